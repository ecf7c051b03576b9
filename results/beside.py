"""A set of runs beside a committed study: does a new run agree with the study's seeds?

  python -m results.tables --runs workdirs/demo --out results/demo --beside results/tiny/runs

writes OUT/beside_study.md: for every row of the new runs (router x capacity) and every metric
(upstream precision@1 and each 10-shot data set), the new value (the mean if it has several
seeds), the study's mean +- sample std over its seeds, and their difference in units of that
std. One new seed is a draw from the same spread as the study's seeds, so a difference within 2
std is what agreement looks like. A row whose config differs from the study's in more than the
seed is compared with nothing: the keys that differ are named instead.
"""
import os
from typing import Sequence

from results import claims
from results import paper
from results import summaries

AGREEMENT_STDS = 2.0


def _verdict(new: float, reference) -> str:
  if reference.n < 2 or reference.std == 0:
    return 'study has no spread'
  z = (new - reference.mean) / reference.std
  return f'{z:+.1f} std: ' + ('agrees' if abs(z) <= AGREEMENT_STDS else 'differs')


def to_markdown(new_rows: dict, study_rows: dict, study: str) -> str:
  """The comparison table (rows: {key: runs} from summaries.group_seeds)."""
  metrics = claims.metrics_of([r for runs in new_rows.values() for r in runs])
  lines = [f'# Beside the study in `{study}`', '',
           f'Each new value beside the study\'s mean {paper.PM} sample std over its seeds; '
           f'"agrees" means within {AGREEMENT_STDS:g} std of the study\'s mean, the spread one '
           'seed is expected to fall in.', '',
           '| row | metric | this run | study | difference |', '| --- | --- | --- | --- | --- |']
  for key in sorted(new_rows, key=paper.row_order):
    runs = new_rows[key]
    title = paper.row_title(key[2], key[3]) + ('' if key[4] else ', no softmax combine')
    reference_runs = study_rows.get(key)
    differences = (summaries.config_differences(reference_runs[0], runs[0])
                   if reference_runs else [])
    for metric, value in metrics.items():
      new = summaries.stat_of(runs, value)
      if new is None:
        continue
      reference = summaries.stat_of(reference_runs, value) if reference_runs else None
      shown = f'{100 * new.mean:.2f}' + (f' (n={new.n})' if new.n > 1 else '')
      if differences:
        study_cell, verdict = 'config differs: ' + ', '.join(differences), '—'
      elif reference is None:
        study_cell, verdict = 'not in the study', '—'
      else:
        study_cell = (f'{100 * reference.mean:.2f} {paper.PM} {100 * reference.std:.2f} '
                      f'(n={reference.n})')
        verdict = _verdict(new.mean, reference)
      lines.append(f'| {title} | {metric} | {shown} | {study_cell} | {verdict} |')
  return '\n'.join(lines) + '\n'


def compare(new_runs: Sequence[summaries.Run], study_dir: str) -> tuple[str, list[str]]:
  """The markdown comparing `new_runs` with the summaries under `study_dir`, and problems."""
  if not os.path.isdir(study_dir):
    return (f'# Beside the study in `{study_dir}`\n\nNo study there: `make study` writes one.\n',
            [f'--beside {study_dir}: not a directory; nothing to compare with.'])
  study_runs, problems = summaries.load_runs(study_dir)
  study_rows, group_problems = summaries.group_seeds(study_runs)
  new_rows, _ = summaries.group_seeds(new_runs)
  return to_markdown(new_rows, study_rows, study_dir), problems + group_problems
