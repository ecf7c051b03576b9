"""BASE c = 2 with the fixed auction (runs/) beside the study (results/tiny/runs): mean ± sd per
metric, and its margins against the dense ViT and the study's BASE c = 2, each judged by the
study's pooled seed spread (results/claims.py's) with a two-sided t test on its degrees of
freedom, one comparison each (a post-hoc look, outside the study's rule).

  python results/tiny/base_c2_fixed/compare.py
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
sys.path.insert(0, REPO)
# pylint: disable=wrong-import-position
from base import errors
from base import stats
from results import claims
from results import summaries

STUDY = os.path.join(REPO, 'results', 'tiny', 'runs')
FIXED = os.path.join(REPO, 'results', 'tiny', 'base_c2_fixed', 'runs')
TABLE = ('XS/7', 'fashion_mnist')
BASE_C2 = TABLE + ('base', 2.0, True)
DENSE = TABLE + ('dense', None, True)


def seeds(root: str) -> dict:
  runs, _ = summaries.load_runs(root)
  rows, _ = summaries.group_seeds(runs)
  return rows


def main() -> int:
  study, fixed = seeds(STUDY), seeds(FIXED)
  if BASE_C2 not in fixed or BASE_C2 not in study or DENSE not in study:
    raise errors.MissingInput(f'BASE c = 2 in {FIXED}, and BASE c = 2 and the dense ViT in '
                              f'{STUDY}, are needed (both are committed: restore them with git).')
  for metric, value in claims.metrics_of(fixed[BASE_C2]).items():
    spread = claims.pooled_spread(study, TABLE, value)
    new = summaries.stat_of(fixed[BASE_C2], value)
    print(f'{metric}: fixed {100 * new.mean:.2f} ± {100 * new.std:.2f} (n = {new.n}); study '
          f'pooled sd {100 * spread.std:.2f} on {spread.df} df')
    for name, key in (('dense', DENSE), ("the study's BASE c = 2", BASE_C2)):
      other = summaries.stat_of(study[key], value)
      margin = new.mean - other.mean
      stderr = spread.stderr(1 / new.n + 1 / other.n)
      print(f'  minus {name} ({100 * other.mean:.2f}): {100 * margin:+.2f}, s.e. '
            f'{100 * stderr:.3f}, p {stats.two_sided_p(margin / stderr, spread.df):.3f}')
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
