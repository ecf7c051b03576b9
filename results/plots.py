"""The paper's figures as PNG, from runs' summary.json files and from the paper's own tables.

  python -m results.plots --runs workdirs --out results/out     (also run by results.tables)

  fig1_upstream_<dataset>.png     Figure 1: upstream precision@1 against training cost, one panel
                                  per capacity; the cost relative to the dense ViT where the runs
                                  have one (a dashed line at its accuracy, its +-1 std band).
  fig2_<k>shot_<dataset>.png      Figure 2: the same for k-shot accuracy (best l2), k = 10.
  fig3_softmax_combine_<arch>_<dataset>.png
                                  Figure 3: validation precision@1 over training of Sinkhorn Token
                                  Choice with and without softmax combine, panels k = 1 and k = 2
                                  (only where the ablation ran).
  paper_fig1_jft.png, paper_fig2_imagenet_10shot.png
                                  Figures 1 and 2 drawn from the paper's appendix tables
                                  (TPUv3-days), one panel per architecture, for comparison.
With several seeds, points carry +-1 std error bars and curves a +-1 std band. Every router has
its own colour and marker (router_styles), and the legend sits below the panels. A panel's cost
axis spans the points within OUTLIER_FACTOR of its median cost; a dearer point is drawn at the
axis' edge with its value, so one outlier cannot squeeze the others together. A row that a later
fix superseded is drawn hollow beside its reruns, filled.
"""
import argparse
import dataclasses
import io
import os
import sys
from typing import Sequence

import matplotlib

matplotlib.use('Agg')   # Files only: no display on servers and CI.
import matplotlib.ticker  # pylint: disable=g-import-not-at-top,wrong-import-position
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from results import cost as cost_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from results import paper  # pylint: disable=g-import-not-at-top,wrong-import-position
from results import summaries  # pylint: disable=g-import-not-at-top,wrong-import-position
from base import atomic  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmoe.routing import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    declarations)

# The paper's markers (Sec. 4): Token Choice x and +, Expert Choice square, circle, triangle,
# Soft MoE star; its routers take tab10's first six colours. Other routers, in name order, take
# OTHER_STYLES (colour, marker), none of them a colour already used; the dense ViT is black.
MARKERS = {'softmax_tc': 'x', 'sinkhorn_tc': 'P', 'softmax_ec': 's', 'sinkhorn_ec': 'o',
           'sparsity_ec': '^', 'soft_moe': '*'}
COLORS = dict(zip(paper.ROUTERS, plt.get_cmap('tab10').colors))
OTHER_STYLES = tuple(zip(
    [plt.get_cmap('tab10').colors[i] for i in (6, 8, 9)] + ['#000080', '#b8860b', '#7f7f7f',
                                                             '#00ff7f', '#8b0000'],
    ('D', 'v', '<', '>', 'p', 'h', 'X', 'd')))
OUTLIER_FACTOR = 1.5   # A cost over 1.5x its panel's median is drawn at the axis' edge.


def router_styles(routers) -> dict[str, tuple]:
  """{router: (colour, marker)}: the paper's fixed ones, then the others by name from
  OTHER_STYLES (cycled beyond them, where colours would repeat)."""
  others = sorted(set(routers) - set(COLORS) - {declarations.DENSE})
  styles = {r: (COLORS[r], MARKERS[r]) for r in COLORS}
  styles.update({r: OTHER_STYLES[i % len(OTHER_STYLES)] for i, r in enumerate(others)})
  return styles


SIZE_PER_CAPACITY = 45.0    # Marker area (points^2) per unit of capacity: c=2 is twice c=1.
FEWSHOT_SHOTS = 10          # Figure 2 is the paper's 10-shot task.
DENSE_COLOR = 'black'


@dataclasses.dataclass(frozen=True)
class Point:
  """One router x capacity of one architecture: cost x, accuracy y (percent), their spreads."""
  arch: str
  router: str
  capacity: float | None   # None: the dense baseline.
  x: float
  y: float
  x_err: float = 0.0
  y_err: float = 0.0
  title: str | None = None   # A user's router's recorded title (built-ins: names.py's).
  superseded: bool = False   # A row a later fix superseded (results/superseded.py): drawn hollow.


def save_png(fig, path: str) -> str:
  """Renders `fig` to PNG and writes it atomically (a reader sees the old figure or the new one)."""
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=120, bbox_inches='tight')
  plt.close(fig)
  atomic.write_bytes(path, buffer.getvalue())
  return path


def arch_order(arch: str) -> tuple:
  """The paper's architectures first, in its order; others after by name."""
  return (paper.ARCHS.index(arch) if arch in paper.ARCHS else len(paper.ARCHS), arch)


def axis_range(xs: Sequence[float]) -> tuple[float, float]:
  """The cost range a panel's axis spans: the points within OUTLIER_FACTOR of the median, padded
  by 8% of their span on each side (or 5% of the value when they coincide)."""
  median = float(np.median(xs))
  kept = [x for x in xs if x <= OUTLIER_FACTOR * median]
  low, high = min(kept), max(kept)
  pad = 0.08 * (high - low) or 0.05 * high
  return low - pad, high + pad


def draw_point(ax, p: Point, style: tuple, x_max: float | None = None) -> None:
  """One router's point with its +-1 std bars; hollow if superseded. Beyond x_max it is drawn at
  the edge, with its value and an arrow beside it."""
  color, marker = style
  x, beyond = p.x, x_max is not None and p.x > x_max
  if beyond:
    x = x_max
    ax.annotate(f'{p.x:.3g}x \u2192', (x, p.y), xytext=(-7, 0), textcoords='offset points',
                ha='right', va='center', fontsize=8, color=color)
  if p.x_err or p.y_err:
    ax.errorbar(x, p.y, xerr=0 if beyond else p.x_err, yerr=p.y_err, fmt='none', ecolor=color,
                lw=0.8, clip_on=False)
  fill = ({'facecolors': 'none', 'edgecolors': color, 'linewidths': 1.4} if p.superseded
          else {'color': color})
  ax.scatter(x, p.y, marker=marker, s=SIZE_PER_CAPACITY * (1.6 if p.superseded else 1.0),
             clip_on=False, zorder=3, **fill)


def draw_dense_reference(ax, p: Point, x: float) -> None:
  """The dense baseline: a dashed horizontal line at its accuracy, its +-1 std band, and a point
  at its cost x, so that a router above the line beats the dense model."""
  ax.axhline(p.y, ls='--', lw=1.0, color=DENSE_COLOR)
  if p.y_err:
    ax.axhspan(p.y - p.y_err, p.y + p.y_err, color=DENSE_COLOR, alpha=0.1, lw=0)
  ax.scatter(x, p.y, marker='D', color=DENSE_COLOR, s=SIZE_PER_CAPACITY, zorder=3)


def legend_below(fig, points: Sequence[Point], styles: dict, extra=()) -> None:
  """One legend for all panels, below them: each router's colour and marker, then what hollow
  and the dashed line mean."""
  routers = sorted({p.router for p in points} - {declarations.DENSE}, key=paper.router_order)
  titles = {p.router: p.title for p in points if p.title}
  handles = [plt.Line2D([], [], ls='', marker=styles[r][1], color=styles[r][0],
                        label=paper.router_title(r, titles.get(r))) for r in routers]
  if any(p.superseded for p in points):
    handles.append(plt.Line2D([], [], ls='', marker='o', color='gray', markerfacecolor='none',
                              markersize=8, label='hollow: superseded by a fix (filled: rerun)'))
  if any(p.router == declarations.DENSE for p in points):
    handles.append(plt.Line2D([], [], ls='--', marker='D', color=DENSE_COLOR,
                              label=f'{paper.DENSE_TITLE}, \u00b11 std band'))
  handles += list(extra)
  fig.legend(handles=handles, loc='upper center', bbox_to_anchor=(0.5, 0.0), ncol=3,
             frameon=False, fontsize=8)


def capacity_panels(points: Sequence[Point], xlabel: str, ylabel: str, title: str,
                    path: str) -> str:
  """Figures 1/2 of runs: one panel per capacity (a row of them per architecture), accuracy
  against cost; the cost relative to the architecture's dense ViT where there is one (it then
  sits at 1 in every panel), each panel's cost axis holding its points but those beyond
  axis_range, which sit at its right edge."""
  archs = sorted({p.arch for p in points}, key=arch_order)
  capacities = sorted({p.capacity for p in points if p.capacity is not None})
  styles = router_styles({p.router for p in points})
  fig, axes = plt.subplots(len(archs), len(capacities), squeeze=False, sharey='row',
                           figsize=(4.6 * len(capacities), 3.6 * len(archs)))
  for row, arch in zip(axes, archs):
    dense = next((p for p in points if p.arch == arch and p.router == declarations.DENSE), None)
    scale = dense.x if dense and dense.x > 0 else 1.0
    for ax, capacity in zip(row, capacities):
      panel = [dataclasses.replace(p, x=p.x / scale, x_err=p.x_err / scale) for p in points
               if p.arch == arch and p.capacity == capacity]
      if not panel:
        ax.set_axis_off()
        continue
      low, high = axis_range([p.x for p in panel] + ([1.0] if dense else []))
      if dense:
        draw_dense_reference(ax, dense, 1.0)
      for p in panel:
        draw_point(ax, p, styles[p.router], high)
      ax.set_xlim(low, high)
      ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5))
      ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
          lambda v, _, d=dense: f'{v:.2f}x' if d else f'{v:.3g}'))
      ax.set_title((f'{arch}, ' if len(archs) > 1 else '')
                   + f'c = {capacity:g} (k = {capacity:g} for token choice)', fontsize=10)
      ax.set_xlabel(f'{xlabel},\nrelative to the dense ViT' if dense else xlabel, fontsize=9)
      ax.grid(alpha=0.3)
    row[0].set_ylabel(ylabel)
  legend_below(fig, points, styles)
  fig.suptitle(title)
  fig.tight_layout()
  return save_png(fig, path)


def arch_panels(points: Sequence[Point], xlabel: str, ylabel: str, title: str, path: str) -> str:
  """The paper's Figures 1/2: one panel per architecture, accuracy against cost on a log axis
  (the paper's costs span tenfold), marker size = c."""
  archs = sorted({p.arch for p in points}, key=arch_order)
  styles = router_styles({p.router for p in points})
  fig, axes = plt.subplots(1, len(archs), figsize=(4.2 * len(archs), 3.6), squeeze=False)
  for ax, arch in zip(axes[0], archs):
    for p in (p for p in points if p.arch == arch):
      color, marker = styles[p.router]
      ax.scatter(p.x, p.y, marker=marker, s=SIZE_PER_CAPACITY * p.capacity, color=color)
    ax.set_xscale('log')    # Labelled at 1, 1.5, 2, 3, 5 and 7 times each power of ten.
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 1.5, 2, 3, 5, 7)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter('%g'))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title(arch)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
  axes[0][0].set_ylabel(ylabel)
  sizes = [plt.scatter([], [], s=SIZE_PER_CAPACITY * c, marker='o', color='lightgray',
                       label=f'c = {c:g}') for c in sorted({p.capacity for p in points})]
  legend_below(fig, points, styles, sizes)
  fig.suptitle(title)
  fig.tight_layout()
  return save_png(fig, path)


def run_points(rows: dict, value, cost=summaries.Run.device_hours,
               superseded: dict | None = None, reruns: dict | None = None) -> list[Point]:
  """Points (mean +- std over seeds) of the rows that have a cost and a value; no ablations;
  those superseded names ({(router, c): note}) hollow, and beside each its reruns
  ({(router, c): (runs, cost)}, priced by their own cost), filled."""
  points = []
  for (router, capacity), (runs, rerun_cost) in (reruns or {}).items():
    x, y = summaries.stat_of(runs, rerun_cost), summaries.stat_of(runs, value)
    if runs and x is not None and y is not None:
      points.append(Point(runs[0].record.arch, router, capacity, x.mean, 100 * y.mean, x.std,
                          100 * y.std, runs[0].record.router_title))
  for (arch, _, router, capacity, softmax_combine), runs in rows.items():
    x = summaries.stat_of(runs, cost)
    y = summaries.stat_of(runs, value)
    if softmax_combine and x is not None and y is not None:
      points.append(Point(arch, router, capacity, x.mean, 100 * y.mean, x.std, 100 * y.std,
                          runs[0].record.router_title,
                          (router, capacity) in (superseded or {})))
  return points


def history(runs: Sequence[summaries.Run]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Steps every seed evaluated at, and the mean and std (percent) of prec@1 over seeds there."""
  curves = []
  for run in runs:
    curves.append({h['step']: h['upstream_prec1'] for h in run.get('eval_history') or []
                   if h.get('upstream_prec1') is not None})
  steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
  values = 100 * np.array([[c[s] for s in steps] for c in curves]).reshape(len(curves), len(steps))
  std = values.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros(len(steps))
  return np.array(steps), values.mean(axis=0), std


def softmax_combine_figure(rows: dict, arch: str, dataset: str, path: str) -> str:
  """Figure 3: sinkhorn_tc with / without softmax combine, panels for each k present."""
  capacities = sorted({k[3] for k in rows if k[:3] == (arch, dataset, 'sinkhorn_tc')})
  fig, axes = plt.subplots(1, len(capacities), figsize=(4.5 * len(capacities), 3.4),
                           squeeze=False, sharey=True)
  for ax, capacity in zip(axes[0], capacities):
    for softmax_combine, label in ((True, 'with softmax combine'),
                                   (False, 'without softmax combine')):
      runs = rows.get((arch, dataset, 'sinkhorn_tc', capacity, softmax_combine))
      steps, mean, std = history(runs or [])
      if len(steps):
        line, = ax.plot(steps, mean, marker='.', label=f'{label} (n={len(runs)})')
        ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set_title(f'k = {capacity:g}')
    ax.set_xlabel('training step')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  axes[0][0].set_ylabel(f'validation prec@1 on {dataset} (%)')
  fig.suptitle(f'{arch}: Sinkhorn Token Choice, softmax combine ablation')
  fig.tight_layout()
  return save_png(fig, path)


def paper_points(value, cost) -> list[Point]:
  """Points of the paper's appendix tables (cells the paper reports)."""
  return [Point(arch, router, c, cost(cell), value(cell))
          for (arch, router, c), cell in paper.PAPER.items()
          if value(cell) is not None and cost(cell) is not None]


def write_figures(runs: Sequence[summaries.Run], out_dir: str,
                  cost=summaries.Run.device_hours,
                  hours: str = 'wall-clock training device-hours',
                  superseded: dict | None = None, reruns: dict | None = None) -> list[str]:
  """Every figure the runs allow, plus the paper's two; returns the paths written. cost(run) is
  the x axis of Figures 1 and 2 (results/cost.py's pricing), labelled `hours`; the rows
  superseded names (results/superseded.py) are drawn hollow beside their reruns
  ({(router, c): (runs, cost)}), filled."""
  rows, _ = summaries.group_seeds(runs)
  written = [
      arch_panels(paper_points(lambda p: p.jft_prec1, lambda p: p.tpuv3_days), 'TPUv3-days',
                     'JFT-300M prec@1 (%)', 'Paper, Figure 1 (from Tables 1-3)',
                     os.path.join(out_dir, 'paper_fig1_jft.png')),
      arch_panels(paper_points(lambda p: p.imagenet_10shot, lambda p: p.tpuv3_days),
                     'TPUv3-days', 'ImageNet 10-shot (%)', 'Paper, Figure 2 (from Tables 1-6)',
                     os.path.join(out_dir, 'paper_fig2_imagenet_10shot.png'))]
  for dataset in sorted({k[1] for k in rows}):
    points = run_points({k: v for k, v in rows.items() if k[1] == dataset},
                        lambda r: r.get('upstream_prec1'), cost, superseded,
                        {k: v for k, v in (reruns or {}).items()
                         if v[0] and v[0][0].key[1] == dataset})
    if points:
      written.append(capacity_panels(points, hours, f'{dataset} prec@1 (%)',
                                    f'Upstream accuracy vs training cost ({dataset})',
                                    os.path.join(out_dir, f'fig1_upstream_{dataset}.png')))
  for fewshot_dataset, shots in summaries.fewshot_columns(runs):
    if shots != FEWSHOT_SHOTS:
      continue
    points = run_points(rows, lambda r, d=fewshot_dataset: r.get('fewshot', d, str(shots)), cost,
                        superseded, reruns)
    if points:
      written.append(capacity_panels(
          points, hours, f'{fewshot_dataset} {shots}-shot (%)',
          f'{shots}-shot {fewshot_dataset} accuracy vs training cost',
          os.path.join(out_dir, f'fig2_{shots}shot_{fewshot_dataset}.png')))
  for arch, dataset in sorted({k[:2] for k in rows if k[2] == 'sinkhorn_tc' and not k[4]}):
    slug = f'{arch.replace("/", "").lower()}_{dataset}'
    written.append(softmax_combine_figure(
        rows, arch, dataset, os.path.join(out_dir, f'fig3_softmax_combine_{slug}.png')))
  return written


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description='The paper\'s figures from summary.json files.')
  parser.add_argument('--runs', required=True, help='Directory searched for summary.json files.')
  parser.add_argument('--out', required=True, help='Directory for the PNG files.')
  cost_lib.add_step_times_flag(parser)
  args = parser.parse_args(argv)
  runs, problems = summaries.load_runs(args.runs)
  for problem in problems:
    print(f'warning: {problem}', file=sys.stderr)
  step_times = cost_lib.load_step_times(args.step_times)
  price, _ = step_times.pricing()
  for path in write_figures(runs, args.out, price, step_times.axis_label(runs)):
    print(path)
  return 0


if __name__ == '__main__':
  sys.exit(main())
