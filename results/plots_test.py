"""Figures a reader can read: a colour and marker per router, an axis that an outlier does not
stretch, and fixed reruns beside their superseded rows."""
import os

from results import paper
from results import plots
from results import summaries
from results.tables_test import write_summary
from vmoe.routing import declarations


def test_every_router_of_the_study_has_its_own_colour_and_marker():
  routers = list(paper.ROUTERS) + sorted(declarations.LAB_ROUTERS)
  styles = plots.router_styles(routers)
  colours = [styles[r][0] for r in routers]
  markers = [styles[r][1] for r in routers]
  assert len(set(colours)) == len(routers) == len(set(markers))
  assert plots.DENSE_COLOR not in colours


def test_an_outlier_sits_beyond_the_axis_and_the_others_within_it():
  # Median of (1.0, 1.1, 1.2, 18.5) = 1.15; 1.5 x 1.15 = 1.725 keeps 1.0-1.2, pads 8% of 0.2.
  low, high = plots.axis_range([1.0, 1.1, 1.2, 18.5])
  assert (round(low, 3), round(high, 3)) == (0.984, 1.216)
  # Coinciding points: 5% of the value either side.
  assert plots.axis_range([2.0, 2.0]) == (1.9, 2.1)


def test_fixed_reruns_are_drawn_filled_beside_their_hollow_originals(tmp_path):
  root, rerun = str(tmp_path / 'runs'), str(tmp_path / 'rerun')
  write_summary(root, arch='XS/7', router='dense', capacity=None, dataset='fashion_mnist')
  write_summary(root, arch='XS/7', router='base', capacity=2.0, dataset='fashion_mnist',
                upstream_prec1=0.30)
  write_summary(root, arch='XS/7', router='base', capacity=1.0, dataset='fashion_mnist')
  write_summary(rerun, arch='XS/7', router='base', capacity=2.0, dataset='fashion_mnist',
                upstream_prec1=0.35, train_device_seconds=1800.0)
  runs, _ = summaries.load_runs(root)
  fixed, _ = summaries.load_runs(rerun)
  rows, _ = summaries.group_seeds(runs)
  points = plots.run_points(rows, lambda r: r.get('upstream_prec1'),
                            superseded={('base', 2.0): 'bug'},
                            reruns={('base', 2.0): (fixed, summaries.Run.device_hours)})
  base2 = sorted((p.superseded, p.y, p.x) for p in points if (p.router, p.capacity) == ('base', 2))
  assert base2 == [(False, 35.0, 0.5), (True, 30.0, 1.0)]
  out = str(tmp_path / 'out')
  written = plots.write_figures(runs, out, superseded={('base', 2.0): 'bug'},
                                reruns={('base', 2.0): (fixed, summaries.Run.device_hours)})
  assert os.path.join(out, 'fig1_upstream_fashion_mnist.png') in written
