"""The controlled cost: one benchmark's step times x a run's steps, hand-worked."""
import json

import pytest

from results import cost
from results import summaries
from results.tables_test import write_summary


def write_step_times(path, arch='XS/7'):
  """A bench/train_step.py result of three processes; softmax_tc c=1 took 20, 30 and 22 ms."""
  row = lambda router, capacity, ms, smc=True: {'router': router, 'capacity': capacity,
                                                 'softmax_combine': smc, 'step_ms': ms}
  runs = [{'rows': [row('dense', None, 10.0), row('softmax_tc', 1.0, ms),
                    row('sinkhorn_tc', 1.0, 2 * ms, False)], 'ratios': []}
          for ms in (20.0, 30.0, 22.0)]
  with open(path, 'w', encoding='utf-8') as f:
    json.dump({'arch': arch, 'machine': {}, 'method': 'm', 'runs': runs, 'ratios': []}, f)
  return str(path)


def load(root):
  runs, problems = summaries.load_runs(str(root))
  assert not problems
  return {run.key: run for run in runs}


def test_controlled_hours_are_the_median_step_times_steps(tmp_path):
  step_times = cost.load_step_times(write_step_times(tmp_path / 'steps.json'))
  arch, times = step_times.arch, step_times.times
  # Medians over the three processes: 22 ms with softmax combine, 44 ms without.
  assert arch == 'XS/7' and times[cost.step_key('softmax_tc', 1)] == 22.0
  assert times[cost.step_key('sinkhorn_tc', 1.0, False)] == 44.0
  assert times[cost.step_key('dense', None)] == 10.0
  for arch_name, router in (('XS/7', 'softmax_tc'), ('B/32', 'softmax_tc'), ('XS/7', 'soft_moe')):
    write_summary(str(tmp_path / 'runs'), arch=arch_name, router=router, capacity=1.0,
                  dataset='fashion_mnist', steps=1500, num_devices=2)
  write_summary(str(tmp_path / 'runs'), arch='XS/7', router='sinkhorn_tc', capacity=1.0,
                softmax_combine=False, dataset='fashion_mnist', steps=1500, num_devices=1)
  runs = load(tmp_path / 'runs')
  hours = lambda a, r, smc=True: step_times.controlled_hours(
      runs[a, 'fashion_mnist', r, 1.0, smc])
  # 22 ms x 1500 steps x 2 devices = 66 s = 0.018333 h; 44 ms x 1500 x 1 = 66 s as well.
  assert hours('XS/7', 'softmax_tc') == pytest.approx(66 / 3600)
  assert hours('XS/7', 'sinkhorn_tc', False) == pytest.approx(66 / 3600)
  assert hours('B/32', 'softmax_tc') is None      # Another arch than the benchmark's.
  assert hours('XS/7', 'soft_moe') is None        # Not timed by this benchmark.


def test_pricing_uses_wall_clock_where_the_benchmark_does_not_reach(tmp_path):
  write_summary(str(tmp_path / 'runs'), arch='XS/7', router='softmax_tc', capacity=1.0,
                steps=1500, num_devices=1, train_device_seconds=7200.0)
  write_summary(str(tmp_path / 'runs'), arch='B/32', router='softmax_tc', capacity=1.0,
                train_device_seconds=7200.0)
  runs = list(load(tmp_path / 'runs').values())
  step_times = cost.load_step_times(write_step_times(tmp_path / 'steps.json'))
  price, title = step_times.pricing()
  assert sorted(price(r) for r in runs) == pytest.approx([22 * 1500 / 3.6e6, 2.0])
  assert title.startswith('controlled device-hours for XS/7')
  assert step_times.axis_label(runs).startswith('training device-hours (controlled for XS/7')
  missing = cost.load_step_times(str(tmp_path / 'missing.json'))
  price, title = missing.pricing()
  assert [price(r) for r in runs] == [2.0, 2.0] and title == 'wall-clock device-hours'
  assert missing.axis_label(runs) == 'wall-clock training device-hours'
