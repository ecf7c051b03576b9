"""The committed study's pages rendered from its runs: results/prose.py's templates filled with
the quantities of results/study_quantities.py.

A study's output directory may hold `prose/`, Markdown templates (`NAME.md.in`). Each renders to
OUT/NAME.md, unless a README names the template in a block (README_BEGIN ... README_END), which
it then fills instead: the repository README's study summary is such a block. The quantities
come from the objects that write claims.md (the grouped rows, the verdicts, the pricing), the
superseded rows' reruns, and the provenance file (results/provenance.py).
"""
import dataclasses
import os
import re
from typing import Callable

from base import atomic
from base import errors
from results import claims
from results import cost
from results import prose
from results import summaries
from results import superseded as superseded_lib

TEMPLATES = 'prose'
SUFFIX = '.md.in'
README_BEGIN = '<!-- rendered by make tables from {path}; edit the template -->'
README_END = '<!-- end of {path} -->'


@dataclasses.dataclass(frozen=True)
class Study:
  """What the study's prose quotes: its rows and verdicts as claims.md has them, and the same
  with each superseded row replaced by its reruns (`fixed_rows`, `fixed_verdicts`)."""
  runs_dir: str
  out_dir: str               # Where the pages go (and the first edition, study_quantities).
  rows: dict
  verdicts: list
  price: Callable
  step_times: cost.StepTimes
  superseded: dict
  reruns: dict               # {(router, c): {key: seeds' runs}} of each superseded row.
  rerun_dirs: dict           # {(router, c): the reruns' directory}
  fixed_rows: dict
  fixed_verdicts: list


def load(runs_dir: str, out_dir: str, rows: dict, verdicts: list, price: Callable,
         cost_title: str, step_times: cost.StepTimes) -> Study:
  """The Study of a runs directory, given what results/tables.py computed from it."""
  replaced = superseded_lib.load(runs_dir)
  loaded = superseded_lib.load_reruns(runs_dir)
  rerun_dirs = {key: directory for key, (directory, _) in loaded.items()}
  reruns, fixed_rows = {}, dict(rows)
  for key, (_, found) in loaded.items():
    grouped, _ = summaries.group_seeds(found)
    reruns[key] = grouped
    fixed_rows.update(grouped)
  return Study(runs_dir, out_dir, rows, verdicts, price, step_times, replaced, reruns, rerun_dirs,
               fixed_rows, claims.check(fixed_rows, price, cost_title))


def rendered(runs_dir: str, out_dir: str, readme_path: str,
             step_times_path: str = cost.DEFAULT_STEP_TIMES) -> dict[str, str]:
  """{path: text} that `results.tables --runs RUNS_DIR --out OUT_DIR` writes from the
  templates, computed as it computes them, without writing."""
  from results import study_quantities  # pylint: disable=g-import-not-at-top
  runs, _ = summaries.load_runs(runs_dir)
  rows, _ = summaries.group_seeds(runs)
  step_times = cost.load_step_times(step_times_path)
  price, cost_title = step_times.pricing()
  verdicts = claims.check(rows, price, cost_title, superseded_lib.load(runs_dir))
  study = load(runs_dir, out_dir, rows, verdicts, price, cost_title, step_times)
  return render_all(out_dir, study_quantities.quantities(study), readme_path)


def templates(out_dir: str) -> list[str]:
  """The templates of OUT/prose, by name."""
  directory = os.path.join(out_dir, TEMPLATES)
  if not os.path.isdir(directory):
    return []
  return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(SUFFIX)]


def fill_block(readme: str, template_path: str, text: str) -> str | None:
  """The README with its block for template_path (repository-relative) holding text; None if
  it has no such block."""
  begin = README_BEGIN.format(path=template_path)
  end = README_END.format(path=template_path)
  pattern = re.compile(re.escape(begin) + r'.*?' + re.escape(end), re.S)
  if not pattern.search(readme):
    return None
  return pattern.sub(lambda _: f'{begin}\n{text.rstrip()}\n{end}', readme)


def render_all(out_dir: str, quantities: dict, readme_path: str) -> dict[str, str]:
  """{path: text} of every rendering of OUT/prose's templates (see the module docstring)."""
  written = {}
  readme = None
  if os.path.exists(readme_path):
    with open(readme_path, encoding='utf-8') as f:
      readme = f.read()
  for path in templates(out_dir):
    with open(path, encoding='utf-8') as f:
      text = prose.render(f.read(), quantities)
    name = os.path.relpath(os.path.abspath(path), summaries.REPO)
    filled = None if readme is None else fill_block(readme, name, text)
    if filled is not None:
      readme = written[readme_path] = filled
    else:
      written[os.path.join(out_dir, os.path.basename(path)[:-len(SUFFIX)] + '.md')] = text
  return written


def write(out_dir: str, study: Study, readme_path: str) -> list[str]:
  """Renders and writes OUT/prose's templates; the paths written."""
  from results import study_quantities  # pylint: disable=g-import-not-at-top
  if not templates(out_dir):
    return []
  try:
    rendered = render_all(out_dir, study_quantities.quantities(study), readme_path)
  except prose.TemplateError as e:
    raise errors.UserError(f'{os.path.join(out_dir, TEMPLATES)}: {e}') from None
  for path, text in rendered.items():
    atomic.write_text(path, text)
  return sorted(rendered)
