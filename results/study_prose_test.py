"""The committed study's pages equal their rendering from the committed runs, their templates
type no number, and one run's changed accuracy fails the check on the sentence quoting it."""
import json
import os
import shutil

from results import prose
from results import study_prose
from results import summaries

STUDY = os.path.join(summaries.REPO, 'results', 'tiny')
README = os.path.join(summaries.REPO, 'README.md')


def committed_drift(runs_dir: str) -> dict[str, list[str]]:
  """{page: its committed sentences that a rendering from runs_dir no longer produces}."""
  drifted = {}
  for path, text in study_prose.rendered(runs_dir, STUDY, README).items():
    with open(path, encoding='utf-8') as f:
      found = prose.drift(f.read(), text)
    if found:
      drifted[os.path.relpath(path, summaries.REPO)] = found
  return drifted


def test_the_committed_pages_are_their_rendering():
  """make tables wrote results/tiny/README.md and README.md's summary from these runs."""
  pages = study_prose.rendered(os.path.join(STUDY, 'runs'), STUDY, README)
  assert sorted(os.path.relpath(p, summaries.REPO) for p in pages) == [
      'README.md', os.path.join('results', 'tiny', 'README.md')]
  assert committed_drift(os.path.join(STUDY, 'runs')) == {}


def test_the_templates_type_no_number():
  for path in study_prose.templates(STUDY):
    with open(path, encoding='utf-8') as f:
      text = f.read()
    assert prose.generated_sections(text), path
    assert prose.literal_numbers(text) == [], path


def test_one_changed_accuracy_fails_on_the_sentence_that_quotes_it(tmp_path):
  """The dense ViT's seed 0 moved by one point: its mean, quoted in claim 0 and in both
  summaries' tables, moves by 1/5 point, and the check names those sentences."""
  runs = str(tmp_path / 'runs')
  shutil.copytree(os.path.join(STUDY, 'runs'), runs)
  path = os.path.join(runs, 'tiny', 'dense', 'summary.json')
  with open(path, encoding='utf-8') as f:
    summary = json.load(f)
  summary['upstream_prec1'] += 0.01
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(summary, f)
  drifted = committed_drift(runs)
  page = os.path.join('results', 'tiny', 'README.md')
  assert any('The dense ViT has upstream 87.32 \u00b1 0.28.' in s for s in drifted[page])
  assert any('Dense ViT (no MoE layers) | 87.32' in s for s in drifted['README.md'])


def test_a_readme_block_names_its_template():
  name = 'results/tiny/prose/summary.md.in'
  readme = ('# Title\n' + study_prose.README_BEGIN.format(path=name) + '\nold\n'
            + study_prose.README_END.format(path=name) + '\nafter\n')
  filled = study_prose.fill_block(readme, name, 'new text\n')
  assert filled == readme.replace('\nold\n', '\nnew text\n')
  assert study_prose.fill_block(readme, 'other.md.in', 'x') is None
