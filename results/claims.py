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
  7. A router published after the paper (any router outside the paper's six, such as the router
     lab's) beats the paper's best at c = 1: each such router against Soft MoE and against the
     best of the paper's sparse routers, at c = 1.
Token and Expert Choice are read from the router registry (RouterSpec.allocation).

Each claim is checked per (arch, dataset), per capacity c and per metric (upstream precision@1
and every 10-shot column), on the seeds' means. The verdict rule, fixed before the results:
- The seed spread is pooled over every configuration of the table for that metric (dense,
  routers, ablation): std_p = sqrt(sum (n_i - 1) s_i^2 / df), df = sum (n_i - 1). One
  configuration's few seeds estimate its own spread poorly; the pooled estimate assumes the
  configurations share one spread, which the committed study's 15 rows support (their spreads
  are those of samples of 3 from one distribution).
- A margin that is a contrast sum c_i mean_i has the standard error std_p sqrt(sum c_i^2 / n_i)
  and a two-sided t test with df degrees of freedom. Claim 4's margin (a gap minus a spread) adds
  the variances of its two parts.
- A claim's comparisons in one table and metric form a family (claim 0: one per router and c;
  claim 7: two per new router and c = 1; the others: one per c), and their p-values are
  Holm-adjusted within it.
- A claim is 'shown' when its adjusted p < ALPHA and the margin has the claimed sign. Where one
  side is the extreme of several rows (the best other router, the worst Expert Choice router),
  beating that extreme is beating every row (an intersection-union test, valid at ALPHA), but the
  extreme is biased towards the other sign: 'opposite shown' then needs p times the number of
  pairs it was chosen among (Bonferroni) below ALPHA. Otherwise 'not shown'. Each verdict states the
  smallest margin its seeds call shown (t_{1 - ALPHA/2, df} s.e., before any Holm adjustment) and
  the difference they detect with POWER (t_{1 - ALPHA/2, df} + t_{POWER, df}) s.e.: "not shown" with
  that much power is the result.
A row with a single seed in a table with no pooled spread is 'n=1, spread unknown'. Costs are the
caller's: results/tables.py passes the controlled cost of results/cost.py where the benchmark
covers the runs, else wall-clock device-hours; the paper's are TPUv3-days. A cost margin has no
seed spread to judge it by.
"""
import argparse
import dataclasses
import functools
import math
import sys
from typing import Callable, Sequence

import numpy as np

from base import atomic
from base import stats as stats_lib
from base.stats import Stat
from results import cost
from results import paper
from results import summaries
from results import superseded as superseded_lib
from vmoe.routing import declarations

FEWSHOT_SHOTS = 10
BUDGET_TOLERANCE = 0.10      # Claim 6b: a router within 10% of Soft MoE's cost is within budget.
ALPHA = 0.05                 # Two-sided level of every verdict, family-wise within a Holm family.
POWER = 0.80                 # The power at which each verdict states its detectable difference.

CLAIM_MOE_DENSE = '0. MoE > dense'
CLAIM_EC_TC_MEANS = '1. Expert Choice > Token Choice (means)'
CLAIM_EC_TC_WORST = '1. Expert Choice > Token Choice (worst EC vs best TC)'
CLAIM_SINKHORN_TC = '2. Sinkhorn TC > Softmax TC'
CLAIM_SOFT_BEST = '3. Soft MoE > every other router'
CLAIM_ALLOCATION = '4. Allocation matters more than affinity (TC-EC gap > EC spread)'
CLAIM_SOFTMAX_COMBINE = '5. Softmax combine > without it (paper: ~1 pt)'
CLAIM_SPARSITY_COST = '6a. Sparsity-constrained EC costs the most'
CLAIM_SOFT_BUDGET = '6b. Soft MoE > every router at a fixed compute budget'
CLAIM_NEW_ROUTER = '7. A router after the paper > the paper\'s best at c = 1'
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
  stderr: float | None     # From the pooled spread; None when the table has none.
  detail: str
  unit: str = 'pts'
  note: str | None = None  # Replaces the seed-based strength (cost margins).
  df: int | None = None    # Degrees of freedom of the pooled spread.
  p_adjusted: float | None = None   # Two-sided p, Holm-adjusted within its family.
  family: int = 1          # How many comparisons share the Holm adjustment.
  chosen_among: int = 1    # Pairs that an extreme side was chosen among (1: no choice).
  bias: float | None = None   # Claim 4: the expected range of equal routers' means it subtracts.
  superseded: tuple = ()   # Rows it compares that a later fix superseded (results/superseded.py).
  stderr_blocked: float | None = None   # Exploratory: from the seed-blocked residual spread.
  df_blocked: int | None = None
  p_blocked_adjusted: float | None = None

  @property
  def interval(self) -> tuple[float, float] | None:
    """The margin's 95% confidence interval (two-sided t on the pooled spread, unadjusted)."""
    if self.threshold is None:
      return None
    return self.margin - self.threshold, self.margin + self.threshold

  @property
  def p_blocked(self) -> float | None:
    """Exploratory: the two-sided p of the margin on the seed-blocked spread (blocked_spread)."""
    return _two_sided_p(self.margin, self.stderr_blocked, self.df_blocked)

  @property
  def holds(self) -> bool:
    return self.margin > 0

  @property
  def p(self) -> float | None:
    """The unadjusted two-sided p of the margin's t statistic."""
    return _two_sided_p(self.margin, self.stderr, self.df)

  @property
  def threshold(self) -> float | None:
    """The smallest margin these seeds call shown, before any Holm adjustment."""
    if self.stderr is None:
      return None
    return stats_lib.t_quantile(1 - ALPHA / 2, self.df) * self.stderr

  @property
  def detectable(self) -> float | None:
    """The difference these seeds detect with probability POWER (two-sided, at ALPHA)."""
    if self.stderr is None:
      return None
    return self.threshold + stats_lib.t_quantile(POWER, self.df) * self.stderr

  @property
  def strength(self) -> str:
    if self.note is not None:
      return self.note
    if self.stderr is None:
      return 'n=1, spread unknown'
    p = self.p if self.p_adjusted is None else self.p_adjusted
    if self.holds:
      return 'shown' if p < ALPHA else 'not shown'
    return 'opposite shown' if p * self.chosen_among < ALPHA else 'not shown'


def _two_sided_p(margin: float, stderr: float | None, df: int | None) -> float | None:
  """The two-sided p of margin / stderr on df degrees of freedom (None without a spread)."""
  if stderr is None or df is None:
    return None
  if stderr == 0:
    return 0.0 if margin else 1.0
  return stats_lib.two_sided_p(margin / stderr, df)


def _holm_adjusted(verdicts: list[Verdict]) -> list[Verdict]:
  """The verdicts with p_adjusted set: Holm within each claim's (arch, dataset, metric)."""
  families: dict[tuple, list[int]] = {}
  for i, v in enumerate(verdicts):
    if v.p is not None:
      families.setdefault((v.claim, v.arch, v.dataset, v.metric), []).append(i)
  adjusted = list(verdicts)
  for members in families.values():
    for i, p in zip(members, stats_lib.holm([verdicts[i].p for i in members])):
      adjusted[i] = dataclasses.replace(adjusted[i], p_adjusted=p, family=len(members))
    blocked = [verdicts[i].p_blocked for i in members]
    if None not in blocked:
      for i, p in zip(members, stats_lib.holm(blocked)):
        adjusted[i] = dataclasses.replace(adjusted[i], p_blocked_adjusted=p)
  return adjusted


def _pair(a: Stat, b: Stat) -> float:
  """sum c_i^2 / n_i of the difference a - b."""
  return 1 / a.n + 1 / b.n


def _means(left: Sequence[Stat], right: Sequence[Stat]) -> float:
  """sum c_i^2 / n_i of mean(left) - mean(right)."""
  return (sum(1 / s.n for s in left) / len(left) ** 2
          + sum(1 / s.n for s in right) / len(right) ** 2)


@functools.cache
def expected_range(count: int) -> float:
  """E[max - min] of `count` independent standard normals (1.128 for 2, 1.693 for 3): the range
  of equal routers' means, in units of one mean's standard error. Claim 4's margin subtracts
  the Expert Choice routers' range, so it is biased by minus this times the s.e. when they are
  equal, and its verdict states that bias."""
  x = np.linspace(-10.0, 10.0, 20001)
  cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
  return float(np.sum(1 - cdf ** count - (1 - cdf) ** count) * (x[1] - x[0]))


def blocked_spread(rows: dict, table: tuple, value: Callable) -> stats_lib.Pooled | None:
  """Exploratory: the residual spread of value in a two-way additive model of configuration and
  seed, over the table's configurations that ran the same seeds (the study's seeds are shared,
  and a seed moves every configuration alike). sqrt(sum (y - row mean - seed mean + grand
  mean)^2 / df), df = (configurations - 1)(seeds - 1). None with fewer than 2 of either."""
  by_config = {}
  for key, runs in rows.items():
    if key[:2] == table:
      values = {r.get('seed'): value(r) for r in runs}
      if None not in values.values():
        by_config[key] = values
  if not by_config:
    return None
  seeds = max((tuple(sorted(v)) for v in by_config.values()),
              key=lambda s: sum(tuple(sorted(v)) == s for v in by_config.values()))
  grid = np.array([[v[s] for s in seeds] for v in by_config.values()
                   if tuple(sorted(v)) == seeds], np.float64)
  if grid.shape[0] < 2 or grid.shape[1] < 2:
    return None
  residual = (grid - grid.mean(axis=1, keepdims=True) - grid.mean(axis=0, keepdims=True)
              + grid.mean())
  df = (grid.shape[0] - 1) * (grid.shape[1] - 1)
  return stats_lib.Pooled(math.sqrt(float(np.sum(residual ** 2)) / df), df)


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
  """{router: Stat of value over its seeds} for every router of the table at one capacity, the
  paper's six first in their order, then the others by name."""
  found = {k[2] for k in rows if k[:2] == table and k[2] != declarations.DENSE}
  order = [r for r in paper.ROUTERS if r in found] + sorted(found - set(paper.ROUTERS))
  stats = {}
  for router in order:
    runs = rows.get(table + (router, capacity, softmax_combine))
    stat = summaries.stat_of(runs, value) if runs else None
    if stat is not None:
      stats[router] = stat
  return stats


def _accuracy_verdicts(all_stats: dict, ablated: dict, dense: Stat | None, add: Callable) -> None:
  """Claims 0-5 at one (arch, dataset, capacity, metric); `dense` is the baseline's Stat.

  add(claim, margin, units, detail, chosen_among=1): units is the margin's sum c_i^2 / n_i, and
  chosen_among the number of pairs an extreme side was chosen among (see the module docstring).
  Claim 0 takes every router; claims 1-5 the paper's six only.
  """
  for router, stat in all_stats.items():
    if dense is not None:
      add(CLAIM_MOE_DENSE, stat.mean - dense.mean, _pair(stat, dense),
          f'{router} {100 * stat.mean:.2f} vs dense {100 * dense.mean:.2f}')
  stats = {r: s for r, s in all_stats.items() if r in paper.ROUTERS}
  mean = lambda names: sum(stats[n].mean for n in names) / len(names)
  ec = [r for r in paper.EXPERT_CHOICE if r in stats]
  tc = [r for r in paper.TOKEN_CHOICE if r in stats]
  if ec and tc:
    add(CLAIM_EC_TC_MEANS, mean(ec) - mean(tc), _means([stats[n] for n in ec],
                                                       [stats[n] for n in tc]),
        f'EC mean {100 * mean(ec):.2f} vs TC mean {100 * mean(tc):.2f}')
    worst_ec = min(ec, key=lambda n: stats[n].mean)
    best_tc = max(tc, key=lambda n: stats[n].mean)
    add(CLAIM_EC_TC_WORST, stats[worst_ec].mean - stats[best_tc].mean,
        _pair(stats[worst_ec], stats[best_tc]),
        f'{worst_ec} {100 * stats[worst_ec].mean:.2f} vs {best_tc} {100 * stats[best_tc].mean:.2f}',
        chosen_among=len(ec) * len(tc))
  if len(ec) >= 2 and tc:
    gap = abs(mean(ec) - mean(tc))
    top, bottom = (max(ec, key=lambda n: stats[n].mean), min(ec, key=lambda n: stats[n].mean))
    spread = stats[top].mean - stats[bottom].mean
    units = _means([stats[n] for n in ec], [stats[n] for n in tc]) + _pair(stats[top],
                                                                            stats[bottom])
    n = sum(stats[r].n for r in ec) / len(ec)
    add(CLAIM_ALLOCATION, gap - spread, units,
        f'|EC mean - TC mean| {100 * gap:.2f} vs EC spread {100 * spread:.2f} ({len(ec)} routers)',
        bias_units=(expected_range(len(ec)), 1 / n))
  if 'sinkhorn_tc' in stats and 'softmax_tc' in stats:
    a, b = stats['sinkhorn_tc'], stats['softmax_tc']
    add(CLAIM_SINKHORN_TC, a.mean - b.mean, _pair(a, b),
        f'sinkhorn_tc {100 * a.mean:.2f} vs softmax_tc {100 * b.mean:.2f}')
  others = [r for r in stats if r != 'soft_moe']
  if 'soft_moe' in stats and others:
    best = max(others, key=lambda n: stats[n].mean)
    a, b = stats['soft_moe'], stats[best]
    add(CLAIM_SOFT_BEST, a.mean - b.mean, _pair(a, b),
        f'soft_moe {100 * a.mean:.2f} vs best other ({best}) {100 * b.mean:.2f}',
        chosen_among=len(others))
  for router, without in sorted(ablated.items()):
    if router in stats:
      a = stats[router]
      add(CLAIM_SOFTMAX_COMBINE, a.mean - without.mean, _pair(a, without),
          f'{router} {100 * a.mean:.2f} with vs {100 * without.mean:.2f} without')


def _new_router_verdicts(stats: dict, add: Callable) -> None:
  """Claim 7 at c = 1: every router outside the paper's six against Soft MoE and against the
  best of the paper's sparse routers (the best chosen by its mean)."""
  sparse = [r for r in paper.ROUTERS if r != 'soft_moe' and r in stats]
  references = ['soft_moe'] if 'soft_moe' in stats else []
  if sparse:
    references.append(max(sparse, key=lambda r: stats[r].mean))
  for router in (r for r in stats if r not in paper.ROUTERS):
    for name in references:
      add(CLAIM_NEW_ROUTER, stats[router].mean - stats[name].mean, _pair(stats[router],
                                                                         stats[name]),
          f'{router} {100 * stats[router].mean:.2f} vs {name} {100 * stats[name].mean:.2f}',
          chosen_among=1 if name == 'soft_moe' else len(sparse))


def _budget_verdict(stats_by_c: dict, costs_by_c: dict, capacity: float, add: Callable) -> None:
  """Claim 6b for Soft MoE at `capacity`: against every paper router at any c within its
  budget."""
  soft = stats_by_c[capacity].get('soft_moe')
  soft_cost = costs_by_c[capacity].get('soft_moe')
  if soft is None or soft_cost is None:
    return
  budget = (1 + BUDGET_TOLERANCE) * soft_cost.mean
  within = [(router, c) for c, stats in stats_by_c.items() for router in stats
            if router != 'soft_moe' and router in paper.ROUTERS and router in costs_by_c[c]
            and costs_by_c[c][router].mean <= budget]
  if not within:
    return
  router, c = max(within, key=lambda rc: stats_by_c[rc[1]][rc[0]].mean)
  best = stats_by_c[c][router]
  add(CLAIM_SOFT_BUDGET, soft.mean - best.mean, _pair(soft, best),
      f'soft_moe {100 * soft.mean:.2f} (cost {soft_cost.mean:.3g}) vs best of {len(within)} '
      f'within {budget:.3g} ({router} c={c:g}, {100 * best.mean:.2f}, '
      f'cost {costs_by_c[c][router].mean:.3g})', chosen_among=len(within))


def pooled_spread(rows: dict, table: tuple, value: Callable) -> stats_lib.Pooled | None:
  """The seed spread of value pooled over every row (configuration) of one (arch, dataset)."""
  return stats_lib.pooled(summaries.stat_of(runs, value)
                          for key, runs in rows.items() if key[:2] == table)


def check(rows: dict, cost: Callable[[summaries.Run], float | None] = summaries.Run.device_hours,
          cost_title: str = 'wall-clock device-hours',
          superseded: dict | None = None) -> list[Verdict]:
  """Verdicts for every (arch, dataset, capacity, metric) that has the routers a claim needs.

  rows: {key: seeds' runs} from summaries.group_seeds (or paper_rows). Rows without softmax
  combine enter claim 5 only. cost(run) prices a run for claims 6a and 6b, in `cost_title`.
  """
  verdicts = []
  metrics = metrics_of([r for runs in rows.values() for r in runs])
  for table in sorted({k[:2] for k in rows}):
    arch, dataset = table
    capacities = sorted({k[3] for k in rows
                         if k[:2] == table and k[4] and k[2] != declarations.DENSE})
    dense_runs = rows.get(table + (declarations.DENSE, None, True))

    def adder(capacity, metric, spread, blocked=None):
      def add(claim, margin, units, detail, chosen_among=1, bias_units=None):
        stderr = None if spread is None else 100 * spread.stderr(units)
        bias = None
        if bias_units is not None and spread is not None:
          bias = bias_units[0] * 100 * spread.stderr(bias_units[1])
        verdicts.append(Verdict(
            claim, arch, dataset, capacity, metric, 100 * margin, stderr, detail,
            df=None if spread is None else spread.df, chosen_among=chosen_among, bias=bias,
            superseded=tuple(superseded_lib.involved(superseded or {}, detail, capacity)),
            stderr_blocked=None if blocked is None else 100 * blocked.stderr(units),
            df_blocked=None if blocked is None else blocked.df))
      return add

    costs_by_c = {c: _row_stats(rows, table, c, cost) for c in capacities}
    for metric, value in metrics.items():
      spread = pooled_spread(rows, table, value)
      blocked = blocked_spread(rows, table, value)
      for capacity in capacities:
        stats = _row_stats(rows, table, capacity, value)
        ablated = _row_stats(rows, table, capacity, value, softmax_combine=False)
        dense = summaries.stat_of(dense_runs, value) if dense_runs else None
        add = adder(capacity, metric, spread, blocked)
        _accuracy_verdicts(stats, ablated, dense, add)
        if capacity == 1:
          _new_router_verdicts(stats, add)
      stats_by_c = {c: _row_stats(rows, table, c, value) for c in capacities}
      for capacity in capacities:
        _budget_verdict(stats_by_c, costs_by_c, capacity, adder(capacity, metric, spread,
                                                                blocked))
    for capacity in capacities:
      costs = {r: s for r, s in costs_by_c[capacity].items() if r in paper.ROUTERS}
      others = [r for r in costs if r != 'sparsity_ec']
      if 'sparsity_ec' in costs and others:
        top = max(others, key=lambda n: costs[n].mean)
        ratio = costs['sparsity_ec'].mean / costs[top].mean
        verdicts.append(Verdict(
            CLAIM_SPARSITY_COST, arch, dataset, capacity, 'training cost', 100 * (ratio - 1), None,
            f'sparsity_ec {costs["sparsity_ec"].mean:.3g} vs most expensive other ({top}) '
            f'{costs[top].mean:.3g}', unit='%', note=f'cost: {cost_title}'))
  return _holm_adjusted(verdicts)


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


def to_markdown(verdicts: Sequence[Verdict], seeds: dict, notes: Sequence[str] = (),
                spreads: dict | None = None, superseded: dict | None = None) -> str:
  """One table per (arch, dataset): claim x capacity x metric, margin, verdict.

  spreads: {(arch, dataset): {metric: stats.Pooled}} from spreads_per_table, stated above each
  table; superseded: results/superseded.load's rows, whose notes follow the table.
  """
  superseded_notes = {f'{r} c={c:g}': note for (r, c), note in (superseded or {}).items()}
  out = ['# The paper\'s claims', '',
         'Generated by `python -m results.claims`; the claims, how each is measured and the '
         'verdict rule are in the docstring of `results/claims.py`. Margin: the claimed winner '
         'minus the other side, in percentage points (for 6a: percent more cost). s.e.: its '
         'standard error from the seed spread pooled over the table\'s configurations. Shown at: '
         f'the smallest margin these seeds call shown (two-sided t test at {ALPHA:g}, before '
         f'any Holm adjustment). Detects: the difference these seeds find with {POWER:.0%} '
         'power. p: two-sided, Holm-adjusted within the claim\'s m comparisons in that table and '
         'metric (m in parentheses where m > 1: one per capacity for most claims, one per router '
         'and capacity for claim 0); without parentheses, unadjusted. 95% interval: the '
         'margin plus or minus "shown '
         'at", what the seeds exclude as well as what they fail to show. Claim 4\'s margin '
         'subtracts the range of the Expert Choice means, which is positive even when the '
         'routers are equal: that range\'s expected value for equal routers (its upward bias) '
         'is stated beside it. p seed-blocked (exploratory): the same margin judged by the '
         'residual spread of a '
         'configuration + seed model, since every configuration ran the same seeds; Holm-'
         'adjusted as p; the registered verdict is the one on the pooled spread. '
         f'{superseded_lib.MARK}: a row that a later fix superseded, named with its rerun.',
         ''] + [f'{note}\n' for note in notes]
  for arch, dataset in sorted({(v.arch, v.dataset) for v in verdicts}):
    out += [f'## {arch} on {dataset} (seeds per row: {seeds[arch, dataset]})', '']
    for metric, spread in sorted((spreads or {}).get((arch, dataset), {}).items()):
      out.append(f'- {metric}: pooled seed sd {100 * spread.std:.2f} points, {spread.df} degrees '
                 'of freedom.')
    out += ['', '| claim | c | metric | margin | 95% interval | s.e. | shown at | detects | '
            'p (m) | holds | verdict | p seed-blocked (exploratory) | compared |',
            '|' + ' --- |' * 13]
    replaced = set()
    for v in sorted((v for v in verdicts if (v.arch, v.dataset) == (arch, dataset)),
                    key=lambda v: (v.claim[:2], v.capacity, v.metric)):
      margin = f'{v.margin:+.2f}' + ('' if v.unit == 'pts' else f' {v.unit}')
      seeded = [] if v.stderr is None else [
          '({:+.2f}, {:+.2f})'.format(*v.interval), f'{v.stderr:.2f}', f'{v.threshold:.2f}',
          f'{v.detectable:.2f}', _p_text(v)]
      seeded += [''] * (5 - len(seeded))
      verdict = v.strength + ''.join(f' {superseded_lib.MARK} {row}' for row in v.superseded)
      replaced.update(v.superseded)
      blocked = '' if v.p_blocked_adjusted is None else f'{v.p_blocked_adjusted:.3f}'
      bias = '' if v.bias is None else f'; EC range expected for equal routers {v.bias:.2f}'
      out.append(f'| {v.claim} | {v.capacity:g} | {v.metric} | {margin} | {" | ".join(seeded)} | '
                 f'{"yes" if v.holds else "no"} | {verdict} | {blocked} | {v.detail}{bias} |')
    out.append('')
    for row in sorted(replaced):
      out.append(f'- {superseded_lib.MARK} {row}: {superseded_notes.get(row, "superseded")}')
    out.append('')
  return '\n'.join(out)


def _p_text(v: Verdict) -> str:
  p = v.p_adjusted if v.p_adjusted is not None else v.p
  return f'{p:.3f}' + (f' ({v.family})' if v.family > 1 else '')


def spreads_per_table(rows: dict) -> dict:
  """{(arch, dataset): {metric: stats.Pooled}} for every metric with a pooled spread."""
  metrics = metrics_of([r for runs in rows.values() for r in runs])
  found = {}
  for table in sorted({k[:2] for k in rows}):
    for metric, value in metrics.items():
      spread = pooled_spread(rows, table, value)
      if spread is not None:
        found.setdefault(table, {})[metric] = spread
  return found


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
  replaced = superseded_lib.load(args.runs)
  verdicts = check(rows, price, cost_title, replaced)
  if not verdicts:
    print(f'No claim can be checked from the runs under {args.runs}: they need Token Choice, '
          'Expert Choice and Soft MoE rows of one architecture.', file=sys.stderr)
    return 1
  atomic.write_text(args.out, to_markdown(verdicts, seeds_per_table(rows),
                                          spreads=spreads_per_table(rows), superseded=replaced))
  print(args.out)
  return 0


if __name__ == '__main__':
  sys.exit(main())
