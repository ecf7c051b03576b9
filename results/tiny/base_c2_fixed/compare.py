"""BASE c = 2 fixed (results/tiny/base_c2_fixed/runs) beside the study: mean ± sd, and margins
against the dense ViT and the study's broken BASE c = 2, judged by the study's pooled sd (claims.md)
with a two-sided t test on its 100 df, one comparison each (post hoc: outside the study's rule).

  python results/tiny/base_c2_fixed/compare.py      # from the repository root
"""
import glob
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())
from base import stats  # pylint: disable=wrong-import-position

POOLED = {'upstream': 0.21, 'fmnist': 0.24}
def load(pattern):
  out = []
  for f in sorted(glob.glob(pattern)):
    d = json.load(open(f))
    out.append({'upstream': 100 * d['upstream_prec1'], 'fmnist': 100 * d['fewshot']['fashion_mnist']['10'],
                'digits': 100 * d['fewshot']['digits']['10']})
  return out
fixed = load('results/tiny/base_c2_fixed/runs/tiny/base_c2*/summary.json')
broken = load('results/tiny/runs/tiny/base_c2*/summary.json')
dense = load('results/tiny/runs/tiny/dense*/summary.json')
print('runs', len(fixed), len(broken), len(dense))
for m in ('upstream', 'fmnist', 'digits'):
  f = [r[m] for r in fixed]
  print(f'{m}: fixed {statistics.mean(f):.2f} ± {statistics.stdev(f):.2f}; broken '
        f'{statistics.mean([r[m] for r in broken]):.2f}; dense {statistics.mean([r[m] for r in dense]):.2f}')
  if m in POOLED:
    se = POOLED[m] * math.sqrt(2 / 5)
    for name, other in (('dense', dense), ('broken', broken)):
      margin = statistics.mean(f) - statistics.mean([r[m] for r in other])
      print(f'   fixed - {name}: {margin:+.2f}, s.e. {se:.3f}, p {stats.two_sided_p(margin / se, 100):.3f}')
