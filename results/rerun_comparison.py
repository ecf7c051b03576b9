"""Reruns of a study's row after a fix, beside the study: mean ± sd per metric, and the margins
against the dense ViT and against the row they supersede, each judged by the study's pooled seed
spread (results/claims.py) with a two-sided t test on its degrees of freedom and a 95% interval,
one comparison each: a post-hoc look, outside the study's registered rule.

  python -m results.rerun_comparison --rerun results/tiny/lossfree_c2_fixed/runs \
      --router lossfree_tc --capacity 2
"""
import argparse
import dataclasses
import sys
from typing import Sequence

from base import errors
from base import stats
from results import claims
from results import summaries

TABLE = ('XS/7', 'fashion_mnist')


@dataclasses.dataclass(frozen=True)
class Margin:
  """The reruns' mean minus another row's, in points, judged by the study's pooled spread."""
  metric: str
  other: str                 # 'dense' or 'study': the dense ViT or the superseded row.
  other_mean: float          # Points.
  margin: float
  stderr: float
  low: float                 # The 95% interval.
  high: float
  p: float


def seeds(root: str) -> dict:
  runs, _ = summaries.load_runs(root)
  rows, _ = summaries.group_seeds(runs)
  return rows


def margins(study: dict, rerun_runs: list, router: str, capacity: float,
            table: tuple = TABLE) -> list[Margin]:
  """Per metric, the reruns (one row's runs) minus the dense ViT and minus the study's row."""
  row, dense = table + (router, float(capacity), True), table + ('dense', None, True)
  found = []
  for metric, value in claims.metrics_of(rerun_runs).items():
    spread = claims.pooled_spread(study, table, value)
    new = summaries.stat_of(rerun_runs, value)
    half = stats.t_quantile(1 - claims.ALPHA / 2, spread.df)
    for other, key in (('dense', dense), ('study', row)):
      old = summaries.stat_of(study[key], value)
      margin = 100 * (new.mean - old.mean)
      stderr = 100 * spread.stderr(1 / new.n + 1 / old.n)
      found.append(Margin(metric, other, 100 * old.mean, margin, stderr, margin - half * stderr,
                          margin + half * stderr, stats.two_sided_p(margin / stderr, spread.df)))
  return found


def compare(study_dir: str, rerun_dir: str, router: str, capacity: float,
            table: tuple = TABLE) -> list[str]:
  """The comparison's lines (see the module docstring)."""
  study, rerun = seeds(study_dir), seeds(rerun_dir)
  row, dense = table + (router, float(capacity), True), table + ('dense', None, True)
  if row not in rerun or row not in study or dense not in study:
    raise errors.MissingInput(f'{router} c = {capacity:g} in {rerun_dir}, and it and the dense '
                              f'ViT in {study_dir}, are needed (restore them with git).')
  lines = []
  names = {'dense': 'dense', 'study': f"the study's {router} c = {capacity:g}"}
  for m in margins(study, rerun[row], router, capacity, table):
    if m.other == 'dense':
      value = claims.metrics_of(rerun[row])[m.metric]
      spread = claims.pooled_spread(study, table, value)
      new = summaries.stat_of(rerun[row], value)
      lines.append(f'{m.metric}: fixed {100 * new.mean:.2f} ± {100 * new.std:.2f} '
                   f'(n = {new.n}); study pooled sd {100 * spread.std:.2f} on {spread.df} df')
    lines.append(f'  minus {names[m.other]} ({m.other_mean:.2f}): {m.margin:+.2f} '
                 f'(95% interval {m.low:+.2f} to {m.high:+.2f}), s.e. {m.stderr:.3f}, '
                 f'p {m.p:.3f}')
  return lines


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--study', default='results/tiny/runs', help='The study\'s summaries.')
  parser.add_argument('--rerun', required=True, help='The reruns\' summaries.')
  parser.add_argument('--router', required=True)
  parser.add_argument('--capacity', type=float, required=True)
  args = parser.parse_args(argv)
  print('\n'.join(compare(args.study, args.rerun, args.router, args.capacity)))
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
