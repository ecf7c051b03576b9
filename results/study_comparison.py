"""New runs compared with a committed study's seeds: would they pass for more of its seeds?

  python -m results.tables --runs workdirs/demo --out results/demo --beside results/tiny/runs

writes OUT/beside_study.md: for every row of the new runs (router x capacity) and every metric
(upstream precision@1 and each 10-shot data set), the new value (the mean if it has several
seeds), the study's mean +- sample std over its seeds, and the difference in standard errors.

The rule is the claims' (results/claims.py): the seed spread is the study's, pooled over every
configuration of its table for that metric (df = sum (n_i - 1) degrees of freedom), because each
configuration's own few seeds estimate it poorly. A new mean of n seeds against the study's mean
of m has the standard error std_p sqrt(1/n + 1/m), and it agrees when |t| is at most the
two-sided t quantile at claims.ALPHA. A run on another CPU kind is not bit-identical to the
study's (the compiled float arithmetic differs) and is one more seed of the same distribution,
which is what this comparison assumes. A row whose config differs from the study's in more than
the seed is compared with nothing: the keys that differ are named instead.
"""
import os
from typing import Sequence

from base import stats
from results import claims
from results import paper
from results import summaries


def _verdict(new: stats.Stat, reference: stats.Stat, spread: stats.Pooled | None) -> str:
  if spread is None or spread.std == 0:
    return 'study has no spread'
  t = (new.mean - reference.mean) / spread.stderr(1 / new.n + 1 / reference.n)
  limit = stats.t_quantile(1 - claims.ALPHA / 2, spread.df)
  return f'{t:+.1f} s.e. (agrees within {limit:.2f}): ' + ('agrees' if abs(t) <= limit
                                                           else 'differs')


def to_markdown(new_rows: dict, study_rows: dict, study: str) -> str:
  """The comparison table (rows: {key: runs} from summaries.group_seeds)."""
  metrics = claims.metrics_of([r for runs in new_rows.values() for r in runs])
  spreads = claims.spreads_per_table(study_rows)
  lines = [f'# Beside the study in `{study}`', '',
           f'Each new value beside the study\'s mean {paper.PM} sample std over its seeds. The '
           'difference is in standard errors from the study\'s seed spread pooled over its '
           'table (results/study_comparison.py); "agrees" means within the two-sided t quantile '
           f'at {claims.ALPHA:g}, where one more seed is expected to fall. A run on another CPU '
           'kind is such a seed, not a bit-identical copy.', '',
           '| row | metric | this run | study | difference |', '| --- | --- | --- | --- | --- |']
  for key in sorted(new_rows, key=paper.row_order):
    runs = new_rows[key]
    title = runs[0].title
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
        spread = spreads.get(key[:2], {}).get(metric)
        verdict = _verdict(new, reference, spread)
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
