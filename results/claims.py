"""The paper's three claims, checked against runs' summary.json files.

  python -m results.claims --runs workdirs/tiny --out results/tiny/claims.md

The claims (paper Sec. 4.2-4.3 and its abstract):
  1. Expert Choice routers beat Token Choice routers.
  2. Among Token Choice routers, Sinkhorn beats Softmax.
  3. Soft MoE beats every other router.
Each is checked per (arch, dataset), per capacity c and per metric (upstream precision@1 and every
10-shot column), on the seeds' means. A claim between two sides compares side A's mean with side
B's: for claim 1 the mean of the Expert Choice routers' means against the Token Choice routers',
and also the worst Expert Choice router against the best Token Choice one; claim 3 compares Soft
MoE with the best other router. The margin is called clear when it exceeds twice its standard
error, sqrt(sum over the compared rows of std^2 / n), and is marked 'n=1, spread unknown' when a
compared row has a single seed.
"""
import argparse
import dataclasses
import math
import sys
from typing import Callable, Sequence

from results import paper
from results import summaries
from vmoe import atomic

EXPERT_CHOICE = ('softmax_ec', 'sinkhorn_ec', 'sparsity_ec')
TOKEN_CHOICE = paper.TOKEN_CHOICE
FEWSHOT_SHOTS = 10


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One comparison: `winner_side` should beat `loser_side` by `margin` (percentage points)."""
  claim: str
  arch: str
  dataset: str
  capacity: float
  metric: str
  margin: float            # mean(A) - mean(B), percentage points; > 0 means the claim holds.
  stderr: float | None     # None when a compared row has one seed.
  detail: str

  @property
  def holds(self) -> bool:
    return self.margin > 0

  @property
  def strength(self) -> str:
    if self.stderr is None:
      return 'n=1, spread unknown'
    if abs(self.margin) > 2 * self.stderr:
      return 'clear (> 2 s.e.)'
    return 'within noise (<= 2 s.e.)'


def _stderr(stats: Sequence[summaries.Stat]) -> float | None:
  if any(s.n < 2 for s in stats):
    return None
  return 100 * math.sqrt(sum(s.std ** 2 / s.n for s in stats))


def _metrics(runs: Sequence[summaries.Run]) -> dict[str, Callable]:
  """Metric name -> value(run): upstream precision@1 and every 10-shot data set present."""
  metrics = {'upstream prec@1': lambda r: r.get('upstream_prec1')}
  for dataset, shots in summaries.fewshot_columns(runs):
    if shots == FEWSHOT_SHOTS:
      metrics[f'{shots}-shot {dataset}'] = (
          lambda r, d=dataset, k=shots: r.get('fewshot', d, str(k)))
  return metrics


def check(rows: dict) -> list[Verdict]:
  """Verdicts for every (arch, dataset, capacity, metric) that has the routers a claim needs.

  rows: {key: seeds' runs} from summaries.group_seeds; ablation rows (no softmax combine) are
  left out.
  """
  verdicts = []
  all_runs = [r for runs in rows.values() for r in runs]
  cells = sorted({(k[0], k[1], k[3]) for k in rows if k[4]})
  for arch, dataset, capacity in cells:
    for metric, value in _metrics(all_runs).items():
      stats = {}
      for router in paper.ROUTERS:
        runs = rows.get((arch, dataset, router, capacity, True))
        stat = summaries.stat_of(runs, value) if runs else None
        if stat is not None:
          stats[router] = stat
      verdict = lambda claim, margin, compared, detail: verdicts.append(Verdict(
          claim, arch, dataset, capacity, metric, 100 * margin, _stderr(compared), detail))
      ec = [r for r in EXPERT_CHOICE if r in stats]
      tc = [r for r in TOKEN_CHOICE if r in stats]
      if ec and tc:
        mean = lambda names: sum(stats[n].mean for n in names) / len(names)
        verdict('1. Expert Choice > Token Choice (means)', mean(ec) - mean(tc),
                [stats[n] for n in ec + tc],
                f'EC mean {100 * mean(ec):.2f} vs TC mean {100 * mean(tc):.2f}')
        worst_ec = min(ec, key=lambda n: stats[n].mean)
        best_tc = max(tc, key=lambda n: stats[n].mean)
        verdict('1. Expert Choice > Token Choice (worst EC vs best TC)',
                stats[worst_ec].mean - stats[best_tc].mean, [stats[worst_ec], stats[best_tc]],
                f'{worst_ec} {100 * stats[worst_ec].mean:.2f} vs '
                f'{best_tc} {100 * stats[best_tc].mean:.2f}')
      if 'sinkhorn_tc' in stats and 'softmax_tc' in stats:
        a, b = stats['sinkhorn_tc'], stats['softmax_tc']
        verdict('2. Sinkhorn TC > Softmax TC', a.mean - b.mean, [a, b],
                f'sinkhorn_tc {100 * a.mean:.2f} vs softmax_tc {100 * b.mean:.2f}')
      others = [r for r in stats if r != 'soft_moe']
      if 'soft_moe' in stats and others:
        best = max(others, key=lambda n: stats[n].mean)
        a, b = stats['soft_moe'], stats[best]
        verdict('3. Soft MoE > every other router', a.mean - b.mean, [a, b],
                f'soft_moe {100 * a.mean:.2f} vs best other ({best}) {100 * b.mean:.2f}')
  return verdicts


def to_markdown(verdicts: Sequence[Verdict], seeds: dict) -> str:
  """One table per (arch, dataset): claim x capacity x metric, margin in points, verdict."""
  out = ['# The paper\'s claims at this scale', '',
         'Generated by `python -m results.claims` from the runs\' summary.json files. Margin: '
         'mean of the claimed winner minus mean of the other side, in percentage points; '
         's.e.: standard error of that difference over seeds.', '']
  for arch, dataset in sorted({(v.arch, v.dataset) for v in verdicts}):
    out += [f'## {arch} on {dataset} (seeds per row: {seeds[arch, dataset]})', '',
            '| claim | c | metric | margin (pts) | holds | strength | compared |',
            '| --- | --- | --- | --- | --- | --- | --- |']
    for v in verdicts:
      if (v.arch, v.dataset) == (arch, dataset):
        out.append(f'| {v.claim} | {v.capacity:g} | {v.metric} | {v.margin:+.2f} | '
                   f'{"yes" if v.holds else "no"} | {v.strength} | {v.detail} |')
    out.append('')
  return '\n'.join(out)


def seeds_per_table(rows: dict) -> dict:
  """{(arch, dataset): 'a-b'}: the fewest and most seeds of a row."""
  counts = {}
  for key, runs in rows.items():
    counts.setdefault(key[:2], []).append(len(runs))
  return {k: (f'{min(v)}' if min(v) == max(v) else f'{min(v)}-{max(v)}') for k, v in counts.items()}


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', required=True, help='Directory searched for summary.json files.')
  parser.add_argument('--out', required=True, help='Markdown file to write.')
  args = parser.parse_args(argv)
  runs, problems = summaries.load_runs(args.runs)
  rows, group_problems = summaries.group_seeds(runs)
  for problem in problems + group_problems:
    print(f'warning: {problem}', file=sys.stderr)
  verdicts = check(rows)
  if not verdicts:
    print(f'No claim can be checked from the runs under {args.runs}: they need Token Choice, '
          'Expert Choice and Soft MoE rows of one architecture.', file=sys.stderr)
    return 1
  atomic.write_text(args.out, to_markdown(verdicts, seeds_per_table(rows)))
  print(args.out)
  return 0


if __name__ == '__main__':
  sys.exit(main())
