"""The paper's claims, checked on runs' summary.json files and on the paper's own numbers.

  python -m results.claims --runs workdirs/tiny --out results/tiny/claims.md
  python -m results.claims --paper --out results/claims.md      # the paper's Tables 1-6

The claims, in the paper's words (Sec. 4.2-4.4 and the abstract of
../shared/paper/routers_in_vision_moe.tex), after V-MoE's premise:
  0. MoE beats the dense model: each router, at each c, against the dense ViT of the same
     width, depth and recipe (the sweep's `dense` row). The paper tabulates no dense model, so
     this is checked on runs only; where it fails, no router comparison can show either.
  1. "Expert Choice routers generally outperform Token Choice routers" (abstract, Sec. 4.3).
  2. Token choice routers with a Sinkhorn affinity "tend to outperform those using a
     Softmax-based affinity matrix" (Sec. 4.3).
  3. "the SoftMoE router consistently outperformed the Expert Choice routers" (Sec. 4.3).
  4. "the choice of routing tensor allocation algorithm is more crucial than the specific method
     of parameterizing the token-expert affinity matrix" (Sec. 4.3): the spread among the Expert
     Choice routers (which differ only in their affinity) is small next to the gap between the
     Token Choice and the Expert Choice means. Margin = |mean(EC) - mean(TC)| - (max EC - min EC).
  5. "The 'with softmax combine' variant achieves approximately 1% higher accuracy" (Sec. 4.4,
     Figure 3): a router with softmax combine against the same router without it. The paper
     plots this only (Figure 3), so it cannot be checked on the paper's tabulated numbers.
  6a. "the sparsity-constrained router is more expensive compared to others" (Sec. 4.2): its
     training cost over the most expensive other router at the same c, in percent.
  6b. "soft MoEs generally outperform sparse MoEs with a fixed compute budget" (abstract; "SoftMoE
     routers have the best compute-accuracy tradeoff", Sec. 4.2): Soft MoE at c against every
     other router, at either c, that trained within Soft MoE's budget. The budget is Soft MoE's
     cost plus BUDGET_TOLERANCE, the spread of the paper's own costs among routers meant to be
     equal (B/32, c = 1: 33.73-36.95 TPUv3-days, 9.5%): a router that cheap and more accurate
     would refute the trade-off.
Token and Expert Choice are read from the router registry (RouterSpec.allocation).

Each claim is checked per (arch, dataset), per capacity c and per metric (upstream precision@1
and every 10-shot column), on the seeds' means. The margin is called clear when it exceeds twice
its standard error, sqrt(sum over the compared rows of std^2 / n), and is marked 'n=1, spread
unknown' when a compared row has a single seed. Costs are the caller's: results/tables.py passes
the controlled cost of results/cost.py where the benchmark covers the runs, else wall-clock
device-hours; the paper's are TPUv3-days. A cost margin has no seed spread to judge it by.
"""
import argparse
import dataclasses
import math
import sys
from typing import Callable, Sequence

from base import atomic
from base.stats import Stat
from results import cost
from results import paper
from results import summaries

FEWSHOT_SHOTS = 10
BUDGET_TOLERANCE = 0.10      # Claim 6b: a router within 10% of Soft MoE's cost is within budget.

CLAIM_MOE_DENSE = '0. MoE > dense'
CLAIM_EC_TC_MEANS = '1. Expert Choice > Token Choice (means)'
CLAIM_EC_TC_WORST = '1. Expert Choice > Token Choice (worst EC vs best TC)'
CLAIM_SINKHORN_TC = '2. Sinkhorn TC > Softmax TC'
CLAIM_SOFT_BEST = '3. Soft MoE > every other router'
CLAIM_ALLOCATION = '4. Allocation matters more than affinity (TC-EC gap > EC spread)'
CLAIM_SOFTMAX_COMBINE = '5. Softmax combine > without it (paper: ~1 pt)'
CLAIM_SPARSITY_COST = '6a. Sparsity-constrained EC costs the most'
CLAIM_SOFT_BUDGET = '6b. Soft MoE > every router at a fixed compute budget'
PAPER_UNCHECKABLE = (
    f'Claim {CLAIM_SOFTMAX_COMBINE[:1]} ("approximately 1% higher accuracy" with softmax combine, '
    'Sec. 4.4) is shown only as Figure 3\'s training curves (Sinkhorn Token Choice, B/32, k = 1 '
    'and 2, JFT-300M validation); the paper tabulates no number for it, so it is not checked here.')


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One comparison: the claimed winner should beat the other side by `margin` (in `unit`)."""
  claim: str
  arch: str
  dataset: str
  capacity: float | None   # None: a comparison across capacities (claim 6b).
  metric: str
  margin: float            # > 0 means the claim holds; percentage points, or `unit`.
  stderr: float | None     # None when a compared row has one seed.
  detail: str
  unit: str = 'pts'
  note: str | None = None  # Replaces the seed-based strength (cost margins).

  @property
  def holds(self) -> bool:
    return self.margin > 0

  @property
  def strength(self) -> str:
    if self.note is not None:
      return self.note
    if self.stderr is None:
      return 'n=1, spread unknown'
    if abs(self.margin) > 2 * self.stderr:
      return 'clear (> 2 s.e.)'
    return 'within noise (<= 2 s.e.)'


def _stderr(stats: Sequence[Stat]) -> float | None:
  if any(s.n < 2 for s in stats):
    return None
  return 100 * math.sqrt(sum(s.std ** 2 / s.n for s in stats))


def metrics_of(runs: Sequence[summaries.Run]) -> dict[str, Callable]:
  """Metric name -> value(run): upstream precision@1 and every 10-shot data set present."""
  metrics = {'upstream prec@1': lambda r: r.get('upstream_prec1')}
  for dataset, shots in summaries.fewshot_columns(runs):
    if shots == FEWSHOT_SHOTS:
      metrics[f'{shots}-shot {dataset}'] = (
          lambda r, d=dataset, k=shots: r.get('fewshot', d, str(k)))
  return metrics


def _row_stats(rows: dict, table: tuple, capacity: float, value: Callable,
               softmax_combine: bool = True) -> dict[str, Stat]:
  """{router: Stat of value over its seeds} for the paper's routers at one capacity."""
  stats = {}
  for router in paper.ROUTERS:
    runs = rows.get(table + (router, capacity, softmax_combine))
    stat = summaries.stat_of(runs, value) if runs else None
    if stat is not None:
      stats[router] = stat
  return stats


def _accuracy_verdicts(stats: dict, ablated: dict, dense: Stat | None, add: Callable) -> None:
  """Claims 0-5 at one (arch, dataset, capacity, metric); `dense` is the baseline's Stat."""
  for router in (r for r in paper.ROUTERS if r in stats and dense is not None):
    add(CLAIM_MOE_DENSE, stats[router].mean - dense.mean, [stats[router], dense],
        f'{router} {100 * stats[router].mean:.2f} vs dense {100 * dense.mean:.2f}')
  mean = lambda names: sum(stats[n].mean for n in names) / len(names)
  ec = [r for r in paper.EXPERT_CHOICE if r in stats]
  tc = [r for r in paper.TOKEN_CHOICE if r in stats]
  if ec and tc:
    add(CLAIM_EC_TC_MEANS, mean(ec) - mean(tc), [stats[n] for n in ec + tc],
        f'EC mean {100 * mean(ec):.2f} vs TC mean {100 * mean(tc):.2f}')
    worst_ec = min(ec, key=lambda n: stats[n].mean)
    best_tc = max(tc, key=lambda n: stats[n].mean)
    add(CLAIM_EC_TC_WORST, stats[worst_ec].mean - stats[best_tc].mean,
        [stats[worst_ec], stats[best_tc]],
        f'{worst_ec} {100 * stats[worst_ec].mean:.2f} vs {best_tc} {100 * stats[best_tc].mean:.2f}')
  if len(ec) >= 2 and tc:
    gap = abs(mean(ec) - mean(tc))
    spread = max(stats[n].mean for n in ec) - min(stats[n].mean for n in ec)
    add(CLAIM_ALLOCATION, gap - spread, [stats[n] for n in ec + tc],
        f'|EC mean - TC mean| {100 * gap:.2f} vs EC spread {100 * spread:.2f} ({len(ec)} routers)')
  if 'sinkhorn_tc' in stats and 'softmax_tc' in stats:
    a, b = stats['sinkhorn_tc'], stats['softmax_tc']
    add(CLAIM_SINKHORN_TC, a.mean - b.mean, [a, b],
        f'sinkhorn_tc {100 * a.mean:.2f} vs softmax_tc {100 * b.mean:.2f}')
  others = [r for r in stats if r != 'soft_moe']
  if 'soft_moe' in stats and others:
    best = max(others, key=lambda n: stats[n].mean)
    a, b = stats['soft_moe'], stats[best]
    add(CLAIM_SOFT_BEST, a.mean - b.mean, [a, b],
        f'soft_moe {100 * a.mean:.2f} vs best other ({best}) {100 * b.mean:.2f}')
  for router, without in sorted(ablated.items()):
    if router in stats:
      a = stats[router]
      add(CLAIM_SOFTMAX_COMBINE, a.mean - without.mean, [a, without],
          f'{router} {100 * a.mean:.2f} with vs {100 * without.mean:.2f} without')


def _budget_verdict(stats_by_c: dict, costs_by_c: dict, capacity: float, add: Callable) -> None:
  """Claim 6b for Soft MoE at `capacity`: against every router at any c within its budget."""
  soft = stats_by_c[capacity].get('soft_moe')
  soft_cost = costs_by_c[capacity].get('soft_moe')
  if soft is None or soft_cost is None:
    return
  budget = (1 + BUDGET_TOLERANCE) * soft_cost.mean
  within = [(router, c) for c, stats in stats_by_c.items() for router in stats
            if router != 'soft_moe' and router in costs_by_c[c]
            and costs_by_c[c][router].mean <= budget]
  if not within:
    return
  router, c = max(within, key=lambda rc: stats_by_c[rc[1]][rc[0]].mean)
  best = stats_by_c[c][router]
  add(CLAIM_SOFT_BUDGET, soft.mean - best.mean, [soft, best],
      f'soft_moe {100 * soft.mean:.2f} (cost {soft_cost.mean:.3g}) vs best of {len(within)} '
      f'within {budget:.3g} ({router} c={c:g}, {100 * best.mean:.2f}, '
      f'cost {costs_by_c[c][router].mean:.3g})')


def check(rows: dict, cost: Callable[[summaries.Run], float | None] = summaries.Run.device_hours,
          cost_title: str = 'wall-clock device-hours') -> list[Verdict]:
  """Verdicts for every (arch, dataset, capacity, metric) that has the routers a claim needs.

  rows: {key: seeds' runs} from summaries.group_seeds (or paper_rows). Rows without softmax
  combine enter claim 5 only. cost(run) prices a run for claims 6a and 6b, in `cost_title`.
  """
  verdicts = []
  metrics = metrics_of([r for runs in rows.values() for r in runs])
  for table in sorted({k[:2] for k in rows}):
    arch, dataset = table
    capacities = sorted({k[3] for k in rows
                         if k[:2] == table and k[4] and k[2] != paper.DENSE})
    dense_runs = rows.get(table + (paper.DENSE, None, True))

    def adder(capacity, metric, **extra):
      def add(claim, margin, compared, detail):
        verdicts.append(Verdict(claim, arch, dataset, capacity, metric, 100 * margin,
                                _stderr(compared), detail, **extra))
      return add

    costs_by_c = {c: _row_stats(rows, table, c, cost) for c in capacities}
    for capacity in capacities:
      for metric, value in metrics.items():
        stats = _row_stats(rows, table, capacity, value)
        ablated = _row_stats(rows, table, capacity, value, softmax_combine=False)
        dense = summaries.stat_of(dense_runs, value) if dense_runs else None
        _accuracy_verdicts(stats, ablated, dense, adder(capacity, metric))
      costs = costs_by_c[capacity]
      others = [r for r in costs if r != 'sparsity_ec']
      if 'sparsity_ec' in costs and others:
        top = max(others, key=lambda n: costs[n].mean)
        ratio = costs['sparsity_ec'].mean / costs[top].mean
        verdicts.append(Verdict(
            CLAIM_SPARSITY_COST, arch, dataset, capacity, 'training cost', 100 * (ratio - 1), None,
            f'sparsity_ec {costs["sparsity_ec"].mean:.3g} vs most expensive other ({top}) '
            f'{costs[top].mean:.3g}', unit='%', note=f'cost: {cost_title}'))
    for metric, value in metrics.items():
      stats_by_c = {c: _row_stats(rows, table, c, value) for c in capacities}
      for capacity in capacities:
        _budget_verdict(stats_by_c, costs_by_c, capacity,
                        adder(capacity, metric, note=None))
  return verdicts


def paper_rows() -> dict:
  """The paper's Tables 1-6 as rows of single-seed runs: JFT-300M precision@1 as upstream,
  ImageNet 10-shot as 10-shot imagenet2012, TPUv3-days as `tpuv3_days`."""
  rows = {}
  for (arch, router, capacity), cell in paper.PAPER.items():
    if cell.jft_prec1 is None:
      continue
    upstream, fewshot = paper.SOURCES[arch]
    summary = {'arch': arch, 'dataset': 'JFT-300M', 'router': router, 'capacity': capacity,
               'upstream_prec1': cell.jft_prec1 / 100, 'tpuv3_days': cell.tpuv3_days,
               'fewshot': {'imagenet2012': {str(FEWSHOT_SHOTS): cell.imagenet_10shot / 100}}}
    run = summaries.Run(f'paper {upstream} and {fewshot}', summary)
    rows[run.key] = [run]
  return rows


def to_markdown(verdicts: Sequence[Verdict], seeds: dict, notes: Sequence[str] = ()) -> str:
  """One table per (arch, dataset): claim x capacity x metric, margin, verdict."""
  out = ['# The paper\'s claims', '',
         'Generated by `python -m results.claims`; the claims and how each is measured are in '
         'the docstring of `results/claims.py`. Margin: the claimed winner minus the other side, '
         'in percentage points (for 6a: percent more cost); s.e.: standard error of that difference '
         'over seeds; 2 s.e.: the smallest margin these seeds call clear (the detectable '
         'difference).', ''] + [f'{note}\n' for note in notes]
  for arch, dataset in sorted({(v.arch, v.dataset) for v in verdicts}):
    out += [f'## {arch} on {dataset} (seeds per row: {seeds[arch, dataset]})', '',
            '| claim | c | metric | margin | 2 s.e. | holds | strength | compared |',
            '| --- | --- | --- | --- | --- | --- | --- | --- |']
    for v in sorted((v for v in verdicts if (v.arch, v.dataset) == (arch, dataset)),
                    key=lambda v: (v.claim[:2], v.capacity, v.metric)):
      margin = f'{v.margin:+.2f}' + ('' if v.unit == 'pts' else f' {v.unit}')
      clear = '' if v.stderr is None else f'{2 * v.stderr:.2f}'
      out.append(f'| {v.claim} | {v.capacity:g} | {v.metric} | {margin} | {clear} | '
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
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument('--runs', help='Directory searched for summary.json files.')
  source.add_argument('--paper', action='store_true', help='Check the paper\'s own numbers.')
  parser.add_argument('--out', required=True, help='Markdown file to write.')
  cost.add_step_times_flag(parser)
  args = parser.parse_args(argv)
  if args.paper:
    rows = paper_rows()
    verdicts = check(rows, cost=lambda r: r.get('tpuv3_days'), cost_title='paper TPUv3-days')
    text = to_markdown(verdicts, seeds_per_table(rows), notes=[
        'The paper\'s numbers: Tables 1-3 (JFT-300M precision@1, TPUv3-days) and Tables 4-6 '
        '(ImageNet-1k 10-shot), one run per cell; its missing cells are left out.',
        PAPER_UNCHECKABLE])
    atomic.write_text(args.out, text)
    print(args.out)
    return 0
  runs, problems = summaries.load_runs(args.runs)
  rows, group_problems = summaries.group_seeds(runs)
  for problem in problems + group_problems:
    print(f'warning: {problem}', file=sys.stderr)
  price, cost_title = cost.load_step_times(args.step_times).pricing()
  verdicts = check(rows, price, cost_title)
  if not verdicts:
    print(f'No claim can be checked from the runs under {args.runs}: they need Token Choice, '
          'Expert Choice and Soft MoE rows of one architecture.', file=sys.stderr)
    return 1
  atomic.write_text(args.out, to_markdown(verdicts, seeds_per_table(rows)))
  print(args.out)
  return 0


if __name__ == '__main__':
  sys.exit(main())
