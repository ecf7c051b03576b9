"""Prose whose numbers come from the code: a Markdown template with named quantities, rendered,
and the checks that keep typed numbers out of it.

A template is Markdown with `{name}` placeholders (lower-case names), each replaced by the
string a quantities mapping gives it; an unknown name is an error, so a template cannot quote
what the code did not compute. The parts of a template between GENERATED_BEGIN and
GENERATED_END lines are its generated sections: there every number, in digits or in words
(NUMBER_WORDS), must come from a placeholder. literal_numbers finds the ones that do not,
outside code, link targets, HTML comments and the STRUCTURAL patterns (labels, not quantities:
capacities, claim and list numbers, the k of k-shot, a seed's label, names with digits).
Comparative words ("larger", "two of six", "all") are quantities too (count_words, larger).

drift compares a committed rendering with a fresh one sentence by sentence, so a check names the
sentence whose number moved rather than only the file.
"""
import difflib
import re
from typing import Mapping

PLACEHOLDER = re.compile(r'\{([a-z][a-z0-9_]*)\}')
GENERATED_BEGIN = '<!-- generated: every number below comes from the runs -->'
GENERATED_END = '<!-- end of generated -->'
# Literal text a generated section may keep: code, link targets, comments, and the design's
# labels, which no run determines.
EXEMPT = (re.compile(r'```.*?```', re.S), re.compile(r'`[^`]*`'), re.compile(r'\]\([^)]*\)'),
          re.compile(r'<!--.*?-->', re.S))
STRUCTURAL = (re.compile(r'\b[ck] = \d\b'),               # A capacity or k of the design.
              re.compile(r'^ *\d+a?\. ', re.M),           # A numbered list item (a claim).
              re.compile(r'\b(?:[Cc]laims?|Figures?) \d+[ab]?\b'),
              re.compile(r'\b\d+[ab]\b'),                 # Claim 6a, 6b.
              re.compile(r'\b\d+-shot\b'),
              re.compile(r'\btop[- ]\d\b'),
              re.compile(r'\bseed \d\b'),                # A seed's label.
              re.compile(r'prec(?:ision)?@1|DeepSeek-V3|AVX-512'))   # Names with digits.
NUMBER_WORDS = re.compile(r'\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|'
                          r'twice|half|tenfold|twofold|threefold)\b', re.I)
WORDS = ('none', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten',
         'eleven', 'twelve')


class TemplateError(ValueError):
  """A template names a quantity nobody computed."""


def render(template: str, quantities: Mapping[str, str]) -> str:
  """The template with each {name} replaced by quantities[name]."""
  missing = sorted({m for m in PLACEHOLDER.findall(template) if m not in quantities})
  if missing:
    raise TemplateError(f'the template names quantities nobody computed: {", ".join(missing)}')
  return PLACEHOLDER.sub(lambda m: quantities[m.group(1)], template)


def generated_sections(text: str) -> list[str]:
  """The text between each GENERATED_BEGIN and the GENERATED_END after it."""
  pattern = re.escape(GENERATED_BEGIN) + r'(.*?)' + re.escape(GENERATED_END)
  return re.findall(pattern, text, re.S)


def literal_numbers(template: str) -> list[str]:
  """Each number that a template's generated sections type rather than take from a
  placeholder, with the words around it: [] for a template whose numbers all come from code."""
  found = []
  for section in generated_sections(template):
    text = PLACEHOLDER.sub(' ', section)
    for pattern in EXEMPT + STRUCTURAL:
      text = pattern.sub(' ', text)
    for match in re.finditer(r'\d+(?:[.,]\d+)*|' + NUMBER_WORDS.pattern, text, re.I):
      found.append(text[max(0, match.start() - 30):match.end() + 30].replace('\n', ' '))
  return found


def sentences(text: str) -> list[str]:
  """The sentences and table rows of a Markdown text, whitespace folded."""
  out = []
  for block in re.split(r'\n\s*\n', text):
    if block.lstrip().startswith('|'):
      out += [line.strip() for line in block.splitlines() if line.strip()]
      continue
    folded = ' '.join(block.split())
    out += [s for s in re.split(r'(?<=[.:;])\s+(?=[A-Z*(\[0-9-])', folded) if s]
  return out


def drift(committed: str, rendered: str) -> list[str]:
  """The committed sentences (and table rows) that a fresh rendering no longer produces."""
  fresh = sentences(rendered)
  old = sentences(committed)
  matcher = difflib.SequenceMatcher(a=old, b=fresh, autojunk=False)
  return [old[i] for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != 'equal'
          for i in range(i1, i2)]


def count_words(count: int, total: int | None = None) -> str:
  """'none', 'two', 'all six', 'two of six': a count in words, against its total if given."""
  word = WORDS[count] if count < len(WORDS) else str(count)
  if total is None:
    return word
  total_word = WORDS[total] if total < len(WORDS) else str(total)
  if count == total:
    return f'all {total_word}' if total > 2 else ('both' if total == 2 else 'the one')
  if count == 0:
    return f'none of the {total_word}'
  return f'{word} of {total_word}'


def larger(a: float, b: float, more: str = 'larger', less: str = 'smaller') -> str:
  """The comparative word for a against b."""
  return more if a > b else less
