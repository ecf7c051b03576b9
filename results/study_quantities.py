"""The named quantities the study's prose quotes (results/study_prose.py), each computed from the
study's runs, verdicts, costs, reruns and provenance, and formatted as the prose prints it.

Names: `up`, `fm`, `dg` are upstream precision@1, 10-shot Fashion-MNIST and 10-shot digits;
`c1`, `c2` the capacity. Comparative words and counts in words are quantities too, chosen from
the numbers (results/prose.py count_words, larger), so no sentence can say "larger" of a smaller
number.
"""
import json
import math
import os
import statistics

import numpy as np

from base import stats as stats_lib
from results import claims
from results import cost as cost_lib
from results import paper
from results import prose
from results import provenance
from results import rerun_comparison
from results import summaries
from vmoe.routing import declarations

METRICS = {'up': 'upstream prec@1', 'fm': '10-shot fashion_mnist', 'dg': '10-shot digits'}
METRIC_NAMES = {'up': 'upstream', 'fm': '10-shot Fashion-MNIST', 'dg': '10-shot digits'}
CAPACITIES = {'c1': 1.0, 'c2': 2.0}
PM = paper.PM
SIGNIFICANT = 0.05   # The level at which the seed effect's F test is called shown.
EDITION1 = 'edition1'   # The first edition, beside the study's pages.
DENSE_LOWER_BY = 2   # Claim 0's robustness: the dense mean this many standard errors lower.


def pts(x: float) -> str:
  return f'{x:.2f}'


def signed(x: float) -> str:
  return f'{x:+.2f}'


def p_text(p: float) -> str:
  """p to three decimals, or '< 0.001'."""
  return '< 0.001' if p < 0.0005 else f'= {p:.3f}'


def cell(router: str, capacity: float | None) -> str:
  """'Soft MoE c = 1', 'Sinkhorn Token Choice k = 2': a row named in prose."""
  if capacity is None:
    return paper.DENSE_TITLE
  symbol = 'k' if declarations.allocation_of(router) == declarations.TOKEN_CHOICE else 'c'
  return f'{paper.router_title(router)} {symbol} = {capacity:g}'


def listing(items: list[str]) -> str:
  """'a', 'a and b', 'a, b and c'; 'none' for no items."""
  if not items:
    return 'none'
  return items[0] if len(items) == 1 else ', '.join(items[:-1]) + ' and ' + items[-1]


def span(values: list[float], fmt=pts, unit: str = '') -> str:
  """'0.3-1.4%': the least and most of values, or one value if they print alike."""
  low, high = fmt(min(values)), fmt(max(values))
  return f'{low}{unit}' if low == high else f'{low}-{high}{unit}'


class Quantities:
  """The study's quantities, built section by section into one {name: text} mapping."""

  def __init__(self, study):
    self.study = study
    self.table = next(iter(sorted({k[:2] for k in study.rows})))
    self.q: dict[str, str] = {}

  # --- lookups -----------------------------------------------------------------------------
  def row(self, router: str, capacity: float | None, rows=None, smc: bool = True) -> list:
    return (rows or self.study.rows)[self.table + (router, capacity, smc)]

  def stat(self, router, capacity, metric, rows=None, smc=True) -> stats_lib.Stat:
    value = claims.metrics_of(self.all_runs())[METRICS[metric]]
    return summaries.stat_of(self.row(router, capacity, rows, smc), value)

  def all_runs(self) -> list:
    return [r for runs in self.study.rows.values() for r in runs]

  def verdicts(self, claim: str, metric: str, capacity=None, fixed: bool = False) -> list:
    found = self.study.fixed_verdicts if fixed else self.study.verdicts
    return [v for v in found if v.claim == claim and v.metric == METRICS[metric]
            and (capacity is None or v.capacity == capacity)]

  def spread(self, metric: str, rows=None) -> stats_lib.Pooled:
    value = claims.metrics_of(self.all_runs())[METRICS[metric]]
    return claims.pooled_spread(rows or self.study.rows, self.table, value)

  def mean_sd(self, router, capacity, metric, rows=None) -> str:
    s = self.stat(router, capacity, metric, rows)
    return f'{100 * s.mean:.2f} {PM} {100 * s.std:.2f}'

  # --- sections ----------------------------------------------------------------------------
  def provenance(self) -> None:
    runs = self.all_runs()
    commits = sorted({provenance.short(provenance.commit(r)) for r in runs})
    self.q['study_commit'] = ', '.join(commits)
    self.q['study_cpu'] = ', '.join(sorted({r.get('cpu_model') or 'n/a' for r in runs}))
    self.q['study_cpu_kinds'] = prose.count_words(len({r.get('cpu_model') for r in runs}))
    self.q['runs_count'] = str(len(runs))
    self.q['configs_count'] = str(len(self.study.rows))
    seeds = sorted({r.seed for r in runs})
    self.q['seeds_range'] = f'{seeds[0]}-{seeds[-1]}'
    self.q['seeds_per_row'] = claims.seeds_per_table(self.study.rows)[self.table]
    self.q['seeds_word'] = prose.count_words(int(self.q['seeds_per_row']))
    routers = {k[2] for k in self.study.rows}
    self.q['paper_routers_word'] = prose.count_words(len(routers & set(paper.ROUTERS)))
    self.q['late_routers_word'] = prose.count_words(len(routers & set(declarations.LAB_ROUTERS)))
    self.q['metrics_word'] = prose.count_words(len(claims.metrics_of(runs)))
    self.q['steps'] = ', '.join(sorted({f'{r.get("steps"):,}' for r in runs}))
    self.q['params_m'] = span([r.get('num_params') / 1e6 for r in runs])
    self.q['confidence'] = f'{1 - claims.ALPHA:.0%}'
    self.q['power'] = f'{claims.POWER:.0%}'
    self.q['budget_tolerance'] = f'{claims.BUDGET_TOLERANCE:.0%}'
    self.q['dense_lower_k_word'] = prose.count_words(DENSE_LOWER_BY)
    for key, name in (('base', 2.0), ('lossfree_tc', 2.0)):
      reruns = [r for runs in self.study.reruns[(key, name)].values() for r in runs]
      short = key.split('_')[0]
      self.q[f'{short}_fix_commit'] = ', '.join(sorted(
          {provenance.short(provenance.commit(r)) for r in reruns}))
      self.q[f'{short}_fix_cpu'] = ', '.join(sorted({r.get('cpu_model') or 'n/a'
                                                     for r in reruns}))
      self.q[f'{short}_fix_runs'] = str(len(reruns))
      self.q[f'{short}_fix_word'] = prose.count_words(len(reruns))

  def power(self) -> None:
    n = int(self.q['seeds_per_row'])
    for m in METRICS:
      spread = self.spread(m)
      self.q[f'sd_{m}'] = pts(spread.std * 100)
      se = 100 * spread.stderr(2 / n)
      shown = stats_lib.t_quantile(1 - claims.ALPHA / 2, spread.df) * se
      self.q[f'se_pair_{m}'] = pts(se)
      self.q[f'shown_{m}'] = pts(shown)
      self.q[f'detect_{m}'] = pts(shown + stats_lib.t_quantile(claims.POWER, spread.df) * se)
    self.q['df'] = str(self.spread('up').df)
    self.q['se_formula'] = f'{self.q["sd_up"]} x sqrt(2/{n})'   # Two rows of n seeds each.
    self.q['digits_over_up'] = f'{self.spread("dg").std / self.spread("up").std:.0f}'
    spread = self.spread('up')
    se = 100 * spread.stderr(2 / n)
    for claim, name in ((claims.CLAIM_MOE_DENSE, 'holm0'), (claims.CLAIM_NEW_ROUTER, 'holm7')):
      m = max(v.family for v in self.verdicts(claim, 'up'))
      shown = stats_lib.t_quantile(1 - claims.ALPHA / (2 * m), spread.df) * se
      self.q[f'{name}_m'] = str(m)
      self.q[f'shown_{name}'] = pts(shown)
      self.q[f'detect_{name}'] = pts(shown + stats_lib.t_quantile(claims.POWER, spread.df) * se)

  def seed_effect(self) -> None:
    """The F test of the seed in a configuration + seed model, per metric, and claim 0's cells
    shown below dense by the seed-blocked p against the registered rule."""
    for m, metric in METRICS.items():
      value = claims.metrics_of(self.all_runs())[metric]
      grid = np.array([[value(r) for r in runs] for runs in self.study.rows.values()])
      configs, seeds = grid.shape
      residual = (grid - grid.mean(axis=1, keepdims=True) - grid.mean(axis=0, keepdims=True)
                  + grid.mean())
      df_seed, df_residual = seeds - 1, (configs - 1) * (seeds - 1)
      f = (configs * float(np.sum((grid.mean(axis=0) - grid.mean()) ** 2)) / df_seed
           / (float(np.sum(residual ** 2)) / df_residual))
      from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
      p = float(scipy_stats.f.sf(f, df_seed, df_residual))
      self.q[f'seed_f_{m}'] = f'F({df_seed}, {df_residual}) = {f:.2f}, p {p_text(p)}'
      self.q[f'seed_shown_{m}'] = 'shown' if p < SIGNIFICANT else 'not shown'
      zero = self.verdicts(claims.CLAIM_MOE_DENSE, m)
      self.q[f'blocked_below_{m}'] = str(sum(
          v.margin < 0 and v.p_blocked_adjusted < claims.ALPHA for v in zero))
      self.q[f'registered_below_{m}'] = str(sum(v.strength == 'opposite shown' for v in zero))

  def claim0(self) -> None:
    for m in ('up', 'fm'):
      zero = self.verdicts(claims.CLAIM_MOE_DENSE, m)
      self.q[f'dense_{m}'] = self.mean_sd(declarations.DENSE, None, m)
      below = [v for v in zero if v.margin < 0]
      self.q[f'moe_below_{m}'] = prose.count_words(len(below), len(zero))
      best = max(zero, key=lambda v: v.margin)
      worst = min(zero, key=lambda v: v.margin)
      self.q[f'moe_best_{m}'] = f'{signed(best.margin)} ({self.named(best)})'
      self.q[f'moe_worst_{m}'] = f'{signed(worst.margin)} ({self.named(worst)})'
      means = [self.stat(k[2], k[3], m).mean for k in self.study.rows
               if k[2] != declarations.DENSE and k[4]]
      self.q[f'moe_mean_{m}'] = pts(100 * statistics.fmean(means))
      shown = [v for v in zero if v.strength == 'opposite shown']
      self.q[f'shown_below_{m}'] = prose.count_words(len(shown))
      self.q[f'shown_below_list_{m}'] = listing(
          [f'{self.named(v)} ({signed(v.margin)})' for v in shown])
      fixed = {self.named(v, marks=False): v
               for v in self.verdicts(claims.CLAIM_MOE_DENSE, m, fixed=True)
               if v.strength == 'opposite shown'}
      before = {self.named(v, marks=False) for v in shown}
      self.q[f'fixed_left_{m}'] = listing(sorted(before - set(fixed)))
      self.q[f'fixed_entered_{m}'] = listing(
          [f'{name} (Holm p {fixed[name].p_adjusted:.3f})' for name in sorted(set(fixed) - before)])
    self.q['dense_dg'] = self.mean_sd(declarations.DENSE, None, 'dg')
    self.q['zero_m'] = str(len(self.verdicts(claims.CLAIM_MOE_DENSE, 'up')))
    dense = self.stat(declarations.DENSE, None, 'up')
    se = self.spread('up').std / math.sqrt(dense.n)
    self.q['dense_se_up'] = pts(100 * se)
    lower = dense.mean - DENSE_LOWER_BY * se
    self.q['dense_lower_up'] = pts(100 * lower)
    below = sum(self.stat(k[2], k[3], 'up').mean < lower for k in self.study.rows
                if k[2] != declarations.DENSE and k[4])
    self.q['below_lower_up'] = str(below)

  def named(self, v, marks: bool = True) -> str:
    """The router and c a claim-0 or claim-7 verdict compares first, a dagger if superseded."""
    router = v.detail.split()[0]
    mark = ' \u2020' if marks and v.superseded else ''
    return cell(router, v.capacity) + mark

  def verdict_words(self) -> None:
    """Each claim's headline verdict over the verdict metrics (upstream and 10-shot
    Fashion-MNIST), counted from its cells."""
    def words(claim_names, metrics=('up', 'fm')):
      found = [v for name in claim_names for m in metrics for v in self.verdicts(name, m)]
      shown = sum(v.strength == 'shown' for v in found)
      opposite = sum(v.strength == 'opposite shown' for v in found)
      text = (f'shown in {prose.count_words(shown, len(found))} cells' if shown else
              f'not shown in any of its {len(found)} cells')
      return text + (f'; the opposite is shown in {opposite}' if opposite else '')
    self.q['claim0_verdict'] = words([claims.CLAIM_MOE_DENSE])
    self.q['claim0_verdict_short'] = words([claims.CLAIM_MOE_DENSE], ('up',)).split(';')[0]
    self.q['claim1_verdict'] = words([claims.CLAIM_EC_TC_MEANS, claims.CLAIM_EC_TC_WORST])
    self.q['claim2_verdict'] = words([claims.CLAIM_SINKHORN_TC])
    self.q['claim3_verdict'] = words([claims.CLAIM_SOFT_BEST])
    self.q['claim4_verdict'] = words([claims.CLAIM_ALLOCATION])
    self.q['claim5_verdict'] = words([claims.CLAIM_SOFTMAX_COMBINE])
    self.q['claim6b_verdict'] = words([claims.CLAIM_SOFT_BUDGET])
    self.q['claim7_verdict'] = words([claims.CLAIM_NEW_ROUTER])
    self.q['paper_claims_verdict'] = words(
        [claims.CLAIM_EC_TC_MEANS, claims.CLAIM_EC_TC_WORST, claims.CLAIM_SINKHORN_TC,
         claims.CLAIM_SOFT_BEST, claims.CLAIM_ALLOCATION, claims.CLAIM_SOFTMAX_COMBINE])
    intervals = [b for v in self.verdicts(claims.CLAIM_EC_TC_MEANS, 'up') for b in v.interval]
    self.q['ec_tc_point'] = 'exclude' if all(abs(b) < 1 for b in intervals) else 'do not exclude'
    self.q['point_detected'] = ('would be detected' if float(self.q['detect_up']) < 1
                                else 'could be missed')

  def claims_1_to_5(self) -> None:
    for c_name, c in CAPACITIES.items():
      [v] = self.verdicts(claims.CLAIM_EC_TC_MEANS, 'up', c)
      low, high = v.interval
      self.q[f'ec_tc_{c_name}'] = signed(v.margin)
      self.q[f'ec_tc_interval_{c_name}'] = f'{signed(low)} to {signed(high)}'
      self.q[f'ec_tc_se_{c_name}'] = pts(v.stderr)
      self.q[f'ec_tc_shown_{c_name}'] = pts(v.threshold)
      for m in ('up', 'fm'):
        [v] = self.verdicts(claims.CLAIM_SINKHORN_TC, m, c)
        self.q[f'sinkhorn_tc_{m}_{c_name}'] = signed(v.margin)
        [v] = self.verdicts(claims.CLAIM_SOFTMAX_COMBINE, m, c)
        self.q[f'smc_{m}_{c_name}'] = signed(v.margin)
        [v] = self.verdicts(claims.CLAIM_SOFT_BEST, m, c)
        self.q[f'soft_best_{m}_{c_name}'] = pts(abs(v.margin))
        self.q[f'soft_leads_{m}_{c_name}'] = 'leads' if v.holds else 'trails'
        self.q[f'soft_best_p_{m}_{c_name}'] = f'{v.p_adjusted:.2f}'
        self.q[f'soft_best_p_raw_{m}_{c_name}'] = f'{v.p:.2f}'
        self.q[f'soft_best_m_{m}_{c_name}'] = str(v.family)
        self.q[f'soft_best_other_{c_name}'] = cell(v.detail.split('(')[1].split(')')[0], c)
    self.q['sinkhorn_tc_within'] = pts(max(
        abs(v.margin) for v in self.verdicts(claims.CLAIM_SINKHORN_TC, 'up')))
    self.q['smc_all_below'] = pts(max(
        v.margin for m in ('up', 'fm') for v in self.verdicts(claims.CLAIM_SOFTMAX_COMBINE, m)))
    self.claim4()

  def claim4(self) -> None:
    four = [v for m in ('up', 'fm', 'dg') for v in self.verdicts(claims.CLAIM_ALLOCATION, m)]
    self.q['alloc_cells'] = prose.count_words(len(four))
    self.q['alloc_span'] = f'{signed(min(v.margin for v in four))} to ' \
                           f'{signed(max(v.margin for v in four))}'
    self.q['alloc_shown'] = prose.count_words(sum(v.strength == 'shown' for v in four),
                                              len(four))
    gap = [v for v in four if v.holds]
    self.q['alloc_gap_larger'] = prose.count_words(len(gap), len(four))
    self.q['alloc_range_larger'] = prose.count_words(len(four) - len(gap))
    self.q['alloc_gap_cells'] = listing([
        f'{METRIC_NAMES[self.metric_key(v)]} at c = {v.capacity:g}: a gap of '
        f'{pts(self.gap_and_range(v)[0])} against a range of {pts(self.gap_and_range(v)[1])}'
        for v in gap])
    closest = min(four, key=lambda v: abs(v.margin))
    gap_value, range_value = self.gap_and_range(closest)
    self.q['alloc_closest'] = (f'{METRIC_NAMES[self.metric_key(closest)]} at '
                               f'c = {closest.capacity:g}, a gap of {gap_value:.4f} against a '
                               f'range of {range_value:.4f}')
    up = self.verdicts(claims.CLAIM_ALLOCATION, 'up')
    self.q['alloc_bias_up'] = pts(up[0].bias)
    self.q['alloc_bias_factor'] = f'{claims.expected_range(len(paper.EXPERT_CHOICE)):.3f}'

  def gap_and_range(self, v) -> tuple[float, float]:
    """Claim 4's two parts, in points: |EC mean - TC mean| and the EC means' range."""
    mean = lambda routers: [100 * self.stat(r, v.capacity, self.metric_key(v)).mean
                            for r in routers]
    ec, tc = mean(paper.EXPERT_CHOICE), mean(paper.TOKEN_CHOICE)
    return abs(statistics.fmean(ec) - statistics.fmean(tc)), max(ec) - min(ec)

  def metric_key(self, v) -> str:
    return next(k for k, name in METRICS.items() if name == v.metric)

  def cost_claims(self) -> None:
    """Claim 6a with the benchmark's process-to-process spread; 6b and 7 from their verdicts."""
    step = self.study.step_times
    for c_name, c in CAPACITIES.items():
      costs = {r: self.cost(r, c) for r in paper.ROUTERS if r != 'sparsity_ec'}
      top = max(costs, key=costs.get)
      key, other = cost_lib.step_key('sparsity_ec', c), cost_lib.step_key(top, c)
      ratios = [a / b for a, b in zip(step.per_process[key], step.per_process[other])]
      extra = self.cost('sparsity_ec', c) / costs[top] - 1
      self.q[f'sparsity_cost_{c_name}'] = f'{100 * extra:+.1f}%'
      self.q[f'sparsity_next_{c_name}'] = cell(top, c)
      self.q[f'sparsity_ratios_{c_name}'] = listing([f'{r:.3f}' for r in ratios])
      self.q[f'sparsity_dearer_{c_name}'] = prose.count_words(sum(r > 1 for r in ratios),
                                                              len(ratios))
      self.q[f'sparsity_verdict_{c_name}'] = (
          'dearer in every process' if all(r > 1 for r in ratios) else
          'within the benchmark\'s process-to-process noise')
      for m in ('up', 'fm'):
        [v] = self.verdicts(claims.CLAIM_SOFT_BUDGET, m, c)
        self.q[f'budget_{m}_{c_name}'] = pts(abs(v.margin))
        self.q[f'budget_leads_{m}_{c_name}'] = 'leads' if v.holds else 'trails'
        self.q[f'budget_p_{m}_{c_name}'] = f'{v.p_adjusted:.2f}'
        self.q[f'budget_within_{c_name}'] = prose.count_words(v.chosen_among)
        best = v.detail.split('(')[2].split(',')[0].split(' c=')
        self.q[f'budget_best_{c_name}'] = cell(best[0], float(best[1]))
    self.q['processes'] = prose.count_words(len(next(iter(step.per_process.values()))))
    seven = self.verdicts(claims.CLAIM_NEW_ROUTER, 'up')
    soft = [v for v in seven if v.detail.split()[-2] == 'soft_moe']
    sparse = [v for v in seven if v not in soft]
    self.q['new_m'] = str(len(seven))
    self.q['new_negative'] = prose.count_words(sum(v.margin < 0 for v in seven), len(seven))
    self.q['new_vs_soft'] = listing(
        [f'{signed(v.margin)} ({paper.router_title(v.detail.split()[0])})' for v in soft])
    self.q['new_best_sparse'] = paper.router_title(sparse[0].detail.split()[-2])
    self.q['new_vs_sparse'] = span([v.margin for v in sparse], signed).replace('-+', ' to +') \
        .replace('--', ' to -')
    shown = [v for v in seven if v.strength == 'opposite shown']
    self.q['new_shown'] = listing([f'{paper.router_title(v.detail.split()[0])} below '
                                   f'{paper.router_title(v.detail.split()[-2])} '
                                   f'(p {p_text(v.p_adjusted)})' for v in shown])
    self.q['new_trail_soft'] = prose.count_words(sum(v.margin < 0 for v in soft), len(soft))
    paper_means = [self.stat(r, c, 'up').mean * 100 for r in paper.ROUTERS
                   for c in CAPACITIES.values()]
    self.q['paper_span_up'] = f'{pts(min(paper_means))}-{pts(max(paper_means))}'
    self.q['paper_within_up'] = pts(max(paper_means) - min(paper_means))

  def cost(self, router, capacity, smc: bool = True) -> float:
    return summaries.stat_of(self.row(router, capacity, smc=smc), self.study.price).mean

  def routing(self) -> None:
    """Evaluation-time router metrics at c = 1 (the summaries' router_metrics), seed means."""
    def metric(router, name, block, capacity=1.0):
      return statistics.fmean(r.get('router_metrics', f'router/block_{block}/{name}')
                              for r in self.row(router, capacity))
    blocks = sorted({key.split('/')[1].split('_')[1] for r in self.row('softmax_tc', 1.0)
                     for key in r.get('router_metrics')})
    labels = [b.lstrip('0') or '0' for b in blocks]
    self.q['moe_blocks_slash'] = ' / '.join(labels)
    self.q['moe_blocks_and'] = listing(labels)
    lines = []
    routers = [r for r in paper.ROUTERS if r != 'soft_moe'] + sorted(declarations.LAB_ROUTERS)
    for router in routers:
      drops = ' / '.join(f'{100 * metric(router, "dropped_tokens", b):.1f}%' for b in blocks)
      lines.append(f'| {paper.router_title(router)} | {drops} |')
    self.q['unprocessed_table'] = '\n'.join(lines)
    drop = lambda r: [100 * metric(r, 'dropped_tokens', b) for b in blocks]
    load = lambda r: [metric(r, 'load_max_over_mean', b) for b in blocks]
    for router, name in (('lossfree_tc', 'lossfree'), ('sigmoid_tc', 'sigmoid'),
                         ('random_tc', 'random'), ('base', 'base')):
      self.q[f'{name}_drop'] = span(drop(router), lambda x: f'{x:.1f}', '%')
      self.q[f'{name}_load'] = span(load(router), lambda x: f'{x:.2f}', 'x')
      self.q[f'{name}_up_c1'] = pts(100 * self.stat(router, 1.0, 'up').mean)
    gap = float(self.q['lossfree_up_c1']) - float(self.q['sigmoid_up_c1'])
    self.q['lossfree_sigmoid_gap'] = signed(gap)
    self.q['lossfree_sigmoid_shown'] = ('within' if abs(gap) < float(self.q['shown_up'])
                                        else 'beyond')
    self.q['base_drop_blocks'] = listing([f'{x:.1f}%' for x in drop('base')])
    sparsity = [r for c in CAPACITIES.values() for r in self.row('sparsity_ec', c)]
    fallbacks = [sum(r.get('router_metrics', f'router/block_{b}/solver_fallbacks') for b in blocks)
                 for r in sparsity]
    self.q['solver_fallback_runs'] = prose.count_words(sum(f > 0 for f in fallbacks),
                                                       len(fallbacks))
    ec = paper.EXPERT_CHOICE
    per_block = [max(drop(r)[i] for r in ec) / min(drop(r)[i] for r in ec)
                 for i in range(len(blocks))]
    self.q['ec_coverage_ratio'] = listing([f'{x:.1f}x in block {b}'
                                           for x, b in zip(per_block, labels)])
    ec_up = [100 * self.stat(r, 1.0, 'up').mean for r in ec]
    self.q['ec_range_up_c1'] = f'{max(ec_up) - min(ec_up):.3f}'

  def training_cost(self) -> None:
    runs = self.all_runs()
    seconds = [r.get('train_device_seconds') for r in runs]
    self.q['wall_min_s'] = f'{min(seconds):,.0f}'
    self.q['wall_max_s'] = f'{max(seconds):,.0f}'
    self.q['wall_median_s'] = f'{statistics.median(seconds):,.0f}'
    self.q['wall_total_h'] = f'{sum(seconds) / 3600:.1f}'
    self.q['wall_half_h'] = f'{sum(seconds) / 7200:.1f}'
    dense = self.cost(declarations.DENSE, None)
    self.q['dense_cost'] = f'{dense:.3g}'
    routers = list(paper.ROUTERS) + sorted(declarations.LAB_ROUTERS)
    cells = [f'{paper.router_title(r)} | ' + ' / '.join(f'{self.cost(r, c):.3g}'
                                                          for c in CAPACITIES.values())
             for r in routers]
    cells.append('Sinkhorn TC without softmax combine | ' + ' / '.join(
        f'{self.cost("sinkhorn_tc", c, smc=False):.3g}' for c in CAPACITIES.values()))
    half = (len(cells) + 1) // 2
    self.q['cost_table'] = '\n'.join(
        f'| {a} | {b} |' for a, b in zip(cells[:half], cells[half:] + ['|']))
    ratio = lambda r, c, smc=True: self.cost(r, c, smc) / dense
    target = self.target()
    over = [r for r in routers if ratio(r, 1.0) > target]
    self.q['step_target'] = f'{target:g}x'
    self.q['over_target_c1'] = listing([paper.router_title(r) for r in over])
    self.q['over_target_c1_count'] = prose.count_words(len(over))
    self.q['base_ratio_c1'] = f'{ratio("base", 1.0):.2f}x'
    self.q['base_ratio_c2'] = f'{ratio("base", 2.0):.1f}x'
    wall = lambda r, c: summaries.stat_of(self.row(r, c), summaries.Run.device_hours).mean
    self.q['base_wall_c2'] = f'{wall("base", 2.0):.2f}'
    others = [wall(r, c) for r in routers if r != 'base' for c in CAPACITIES.values()]
    self.q['others_wall'] = span(others)
    late_tc = [r for r in sorted(declarations.LAB_ROUTERS)
               if declarations.allocation_of(r) == declarations.TOKEN_CHOICE]
    self.q['late_tc_count'] = prose.count_words(len(late_tc))
    self.q['late_tc_ratio'] = span([ratio(r, 1.0) for r in late_tc], lambda x: f'{x:.2f}', 'x')
    self.q['softmax_tc_ratio'] = f'{ratio("softmax_tc", 1.0):.2f}x'
    self.q['late_tc_cheaper'] = ('no more than' if all(
        ratio(r, 1.0) <= ratio('softmax_tc', 1.0) for r in late_tc) else 'more than')
    for c_name, c in CAPACITIES.items():
      without = self.cost('sinkhorn_tc', c, False)
      self.q[f'smc_cost_{c_name}'] = f'{without / self.cost("sinkhorn_tc", c):.2f}x'
    step = self.study.step_times
    dense_ms = step.per_process[cost_lib.step_key(declarations.DENSE, None)]
    per = [a / b for a, b in zip(step.per_process[cost_lib.step_key('sinkhorn_tc', 2.0, False)],
                                 dense_ms)]
    self.q['smc_c2_process_ratios'] = span(per, lambda x: f'{x:.2f}', 'x')

  def target(self) -> float:
    """The step-time target vs dense that bench/train_step.py holds sparse routers to."""
    with open(self.study.step_times.path, encoding='utf-8') as f:
      ratios = json.load(f)['ratios']
    return max(r['target']['vs_dense'] for r in ratios if r.get('target'))

  def addenda(self) -> None:
    """Each superseded row's reruns beside the study's row and the dense ViT, judged by the
    study's pooled spread one comparison at a time, and with the reruns in the row's place."""
    for (router, c), grouped in sorted(self.study.reruns.items()):
      name = router.split('_')[0]
      fixed = self.study.fixed_rows
      rerun_runs = fixed[self.table + (router, c, True)]
      by_metric = {(x.metric, x.other): x for x in rerun_comparison.margins(
          self.study.rows, rerun_runs, router, c, self.table)}
      for m in METRICS:
        self.q[f'{name}_fix_{m}'] = self.mean_sd(router, c, m, fixed)
        self.q[f'{name}_study_{m}'] = self.mean_sd(router, c, m)
        for other in ('study', 'dense'):
          x = by_metric[METRICS[m], other]
          prefix = f'{name}_fix_vs_{other}_{m}'
          self.q[prefix] = signed(x.margin)
          self.q[f'{prefix}_se'] = pts(x.stderr)
          self.q[f'{prefix}_p'] = p_text(x.p)
          self.q[f'{prefix}_p_times_m'] = p_text(min(1.0, x.p * int(self.q['zero_m'])))
          self.q[f'{prefix}_interval'] = f'{signed(x.low)} to {signed(x.high)}'
        [v] = [v for v in self.verdicts(claims.CLAIM_MOE_DENSE, m, c, fixed=True)
               if v.detail.split()[0] == router]
        self.q[f'{name}_fix_holm_{m}'] = p_text(v.p_adjusted)
        self.q[f'{name}_fix_verdict_{m}'] = v.strength
        [old] = [v for v in self.verdicts(claims.CLAIM_MOE_DENSE, m, c)
                 if v.detail.split()[0] == router]
        self.q[f'{name}_study_verdict_{m}'] = old.strength
      ps = [by_metric[METRICS[m], 'study'].p for m in ('up', 'fm')]
      self.q[f'{name}_fix_vs_study_verdict'] = ('no change is shown' if min(ps) >= claims.ALPHA
                                                else 'a change is shown')
      up = by_metric[METRICS['up'], 'study']
      self.q[f'{name}_fix_vs_study_up_zero'] = 'includes' if up.low <= 0 <= up.high else 'excludes'
      self.q[f'{name}_fix_health'] = self.health([r for runs in grouped.values() for r in runs])
      self.rerun_step_times(router, c, name)

  def health(self, runs: list) -> str:
    """What the reruns' router_health says of training, or that they record none."""
    if not all(r.get('router_health') for r in runs):
      return ('Their summaries record no `router_health`, so no training-time count of '
              'dropped tokens is stated for them')
    values = lambda key: [100 * b[key] for r in runs for b in r.get('router_health').values()]
    bias = [b['state_bias_range'] for r in runs for b in r.get('router_health').values()
            if 'state_bias_range' in b]
    logged = [b['logged_steps'] for r in runs for b in r.get('router_health').values()]
    text = (f'In training they dropped {span(values("dropped_tokens"), lambda x: f"{x:.1f}", "%")}'
            f' of their tokens and left {span(values("unfilled_slots"), lambda x: f"{x:.0f}", "%")}'
            ' of their slots empty (per block and seed, `router_health`, the mean over '
            f'{span(logged, str)} logged steps)')
    if bias:
      text += f', the bias spreading over {span(bias)}'
    return text

  def rerun_step_times(self, router: str, capacity: float, name: str) -> None:
    """The reruns' own step benchmark (a train_step*.json in their directory), if any."""
    step = cost_lib.step_times_beside(self.study.rerun_dirs[(router, capacity)])
    if step is None:
      return
    self.q[f'{name}_step_file'] = os.path.basename(step.path)
    dense = step.times[cost_lib.step_key(declarations.DENSE, None)]
    for c_name, c in CAPACITIES.items():
      ms = step.times[cost_lib.step_key(router, c)]
      self.q[f'{name}_step_ms_{c_name}'] = f'{ms:.0f}'
      self.q[f'{name}_step_ratio_{c_name}'] = f'{ms / dense:.2f}x'
    runs = self.study.fixed_rows[self.table + (router, capacity, True)]
    self.q[f'{name}_fix_cost'] = f'{step.controlled_hours(runs[0]):.3g}'
    self.q[f'{name}_study_cost'] = f'{self.cost(router, capacity):.3g}'
    others = max(self.cost(r, capacity) for r in list(paper.ROUTERS) + sorted(
        declarations.LAB_ROUTERS) if r != router)
    self.q[f'{name}_fix_rank'] = (
        f'still the dearest router at c = {capacity:g}' if step.controlled_hours(runs[0]) > others
        else f'no longer the dearest router at c = {capacity:g}')

  def cpu_kind(self) -> None:
    """The study's dense seed 0 beside the first edition's (another CPU kind) and its rerun on
    the study's CPU kind (results/tiny/edition1)."""
    edition = os.path.join(self.study.out_dir, EDITION1)
    ours = next(r for r in self.row(declarations.DENSE, None) if r.seed == 0)
    first, _ = summaries.load_runs(os.path.join(edition, 'runs'))
    check = [self.read(os.path.join(edition, 'cpu_check', n))
             for n in sorted(os.listdir(os.path.join(edition, 'cpu_check')))]
    theirs = next(r for r in first if r.key[2] == declarations.DENSE and r.seed == 0)
    self.q['dense_s0_study'] = pts(100 * ours.get('upstream_prec1'))
    self.q['dense_s0_edition1'] = pts(100 * theirs.get('upstream_prec1'))
    self.q['dense_s0_check'] = pts(100 * check[0].get('upstream_prec1'))
    self.q['dense_s0_check_same'] = ('bit for bit' if check[0].get('upstream_prec1')
                                     == ours.get('upstream_prec1') else 'unlike')
    self.q['cpu_code_effect'] = (
        'the code between the commits did not change the run' if check[0].get('upstream_prec1')
        == ours.get('upstream_prec1') else 'the run differs on the same CPU kind too')
    shift = 100 * abs(ours.get('upstream_prec1') - theirs.get('upstream_prec1'))
    self.q['cpu_shift'] = pts(shift)
    self.q['cpu_shift_over_sd'] = f'{shift / float(self.q["sd_up"]):.1f}'

  @staticmethod
  def read(path: str) -> summaries.Run:
    with open(path, encoding='utf-8') as f:
      return summaries.Run(path, json.load(f))

  def summary_table(self) -> None:
    """README's table: upstream mean +- sd of every row, a superseded row with its reruns'."""
    lines = [f'| {paper.DENSE_TITLE} | {self.mean_sd(declarations.DENSE, None, "up")} | |']
    for router in list(paper.ROUTERS) + [r for r in declarations.LAB_ROUTERS]:
      cells = []
      for c in CAPACITIES.values():
        text = self.mean_sd(router, c, 'up')
        if (router, c) in self.study.superseded:
          text += (f' \u2020 (fixed: {self.mean_sd(router, c, "up", self.study.fixed_rows)})')
        cells.append(text)
      lines.append(f'| {paper.router_title(router)} | {" | ".join(cells)} |')
    self.q['summary_table'] = '\n'.join(lines)


def quantities(study) -> dict[str, str]:
  """Every named quantity of the study's prose."""
  q = Quantities(study)
  for section in (q.provenance, q.power, q.seed_effect, q.claim0, q.verdict_words,
                  q.claims_1_to_5, q.cost_claims,
                  q.routing, q.training_cost, q.addenda, q.cpu_kind, q.summary_table):
    section()
  return q.q
