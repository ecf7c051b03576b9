"""The training-step benchmark runs the tiny config's step and derives its ratios (no timing)."""
import json
import os
import statistics

import numpy as np
import pytest

from bench import train_step


def test_grid_writes_rows_and_ratios_from_them(tmp_path, capsys):
  out = tmp_path / 'train_step.json'
  train_step.main(['--routers', 'softmax_tc', '--capacities', '1', '--warmup', '1', '--rounds',
                   '2', '--steps', '1', '--processes', '1', '--out', str(out)])
  capsys.readouterr()
  result = json.loads(out.read_text())
  assert set(result) == {'arch', 'machine', 'method', 'rows', 'ratios'}
  assert result['arch'] == 'XS/7'      # configs/tiny.py's model.variant, as in its summaries.
  dense, moe, ablation = result['rows']
  assert (dense['router'], dense['capacity']) == ('dense', None)
  assert (moe['router'], moe['capacity'], moe['softmax_combine']) == ('softmax_tc', 1.0, True)
  # The sweep's softmax-combine ablation is timed too (results/cost.py prices its runs).
  assert (ablation['router'], ablation['capacity'], ablation['softmax_combine']) == (
      'sinkhorn_tc', 1.0, False)
  for row in (dense, moe, ablation):
    assert row['batch_size'] == 64 and len(row['round_ms']) == 2
    # step_ms is the median over rounds (of two rounds: their mean), before rounding.
    assert row['step_ms'] == pytest.approx(statistics.median(row['round_ms']), abs=1e-3)
    assert row['steps_per_second'] == round(1e3 / row['step_ms'], 2)
    assert row['flops_per_step'] > 0
  # Two MoE layers of E = 8 experts replace two dense MLPs: more parameters than the dense ViT.
  assert moe['num_params'] > dense['num_params']
  ratio = round(moe['step_ms'] / dense['step_ms'], 3)
  ablation_ratio = round(ablation['step_ms'] / dense['step_ms'], 3)
  assert result['ratios'] == [
      {'router': 'softmax_tc', 'capacity': 1.0, 'softmax_combine': True, 'vs_dense': ratio,
       'target': 1.3, 'meets_target': ratio <= 1.3},
      {'router': 'sinkhorn_tc', 'capacity': 1.0, 'softmax_combine': False,
       'vs_dense': ablation_ratio, 'target': None, 'meets_target': None}]


def test_ratios_hand_worked():
  row = lambda router, capacity, ms, smc=True: {'router': router, 'capacity': capacity,
                                                'softmax_combine': smc, 'step_ms': ms}
  rows = [row('dense', None, 10.0), row('sinkhorn_ec', 1.0, 12.5), row('soft_moe', 1.0, 12.5),
          row('sinkhorn_ec', 2.0, 20.0), row('sinkhorn_tc', 1.0, 15.0, False)]
  # 12.5 / 10 = 1.25: within sinkhorn_ec's 1.3, outside Soft MoE's 1.2; c = 2 and the
  # ablation have no target.
  ratio = lambda router, capacity, vs, target, meets, smc=True: {
      'router': router, 'capacity': capacity, 'softmax_combine': smc, 'vs_dense': vs,
      'target': target, 'meets_target': meets}
  assert train_step.ratios(rows) == [
      ratio('sinkhorn_ec', 1.0, 1.25, 1.3, True), ratio('soft_moe', 1.0, 1.25, 1.2, False),
      ratio('sinkhorn_ec', 2.0, 2.0, None, None), ratio('sinkhorn_tc', 1.0, 1.5, None, None, False)]


def test_runs_combine_into_median_ratios():
  def run(*ratios):
    return {'ratios': [{'router': r, 'capacity': c, 'vs_dense': v, 'target': t,
                        'meets_target': None if t is None else v <= t} for r, c, v, t in ratios]}
  runs = [run(('sparsity_ec', 1.0, 1.174, 1.3), ('soft_moe', 2.0, 1.48, None)),
          run(('sparsity_ec', 1.0, 1.364, 1.3), ('soft_moe', 2.0, 1.40, None)),
          run(('sparsity_ec', 1.0, 1.388, 1.3), ('soft_moe', 2.0, 1.50, None))]
  # The first run alone meets 1.3; the median of the three (1.364) does not.
  assert train_step.combine_runs(runs) == [
      {'router': 'sparsity_ec', 'capacity': 1.0, 'vs_dense': 1.364,
       'vs_dense_runs': [1.174, 1.364, 1.388], 'target': 1.3, 'meets_target': False},
      {'router': 'soft_moe', 'capacity': 2.0, 'vs_dense': 1.48, 'vs_dense_runs': [1.48, 1.40, 1.50],
       'target': None, 'meets_target': None}]


def test_processes_run_the_grid_in_fresh_processes(tmp_path, monkeypatch, capsys):
  calls = []

  def fake_run(command, check, cwd):   # Stands in for one process's grid: writes its --out file.
    assert check and command[1:3] == ['-m', 'bench.train_step'] and cwd == train_step.REPO
    assert os.path.isfile(os.path.join(cwd, 'bench', 'train_step.py'))
    calls.append(command)
    ratio = round(1.1 + 0.1 * len(calls), 3)
    out = command[command.index('--out') + 1]
    with open(out, 'w') as f:
      json.dump({'arch': 'XS/7', 'machine': {'device': 'cpu'}, 'method': 'one run', 'rows': [],
                 'ratios': [{'router': 'softmax_ec', 'capacity': 1.0, 'vs_dense': ratio,
                             'target': 1.3, 'meets_target': ratio <= 1.3}]}, f)

  monkeypatch.setattr(train_step.subprocess, 'run', fake_run)
  out = tmp_path / 'train_step.json'
  train_step.main(['--routers', 'softmax_ec', '--capacities', '1', '--rounds', '4',
                   '--processes', '3', '--out', str(out)])
  capsys.readouterr()
  assert len(calls) == 3
  assert all(c[c.index('--processes') + 1] == '1' and c[c.index('--rounds') + 1] == '4'
             and c[c.index('--routers') + 1] == 'softmax_ec' for c in calls)
  result = json.loads(out.read_text())
  assert set(result) == {'arch', 'machine', 'method', 'runs', 'ratios'}
  assert len(result['runs']) == 3 and result['arch'] == 'XS/7'
  assert result['ratios'][0]['vs_dense_runs'] == [1.2, 1.3, 1.4]
  assert result['ratios'][0]['vs_dense'] == 1.3 and result['ratios'][0]['meets_target']


class FakeStepper:
  """Stands in for the compiled step (test_grid_writes_rows_and_ratios_from_them compiles real
  ones): the one-row path's plumbing, without a compile."""

  def __init__(self, router, capacity, softmax_combine=True):
    self.router, self.capacity = router, (None if router == train_step.DENSE else capacity)
    self.softmax_combine = softmax_combine
    self.batch_size, self.flops_per_step, self.num_params = 64, 1e6, 1000

  def __call__(self):
    return np.zeros(1)


def test_one_row_json(capsys, monkeypatch):
  monkeypatch.setattr(train_step, 'Stepper', FakeStepper)
  train_step.main(['--router', 'sinkhorn_ec', '--capacity', '2', '--warmup', '1', '--rounds', '3',
                   '--steps', '1', '--json'])
  row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert (row['router'], row['capacity'], row['batch_size']) == ('sinkhorn_ec', 2.0, 64)
  assert row['step_ms'] > 0 and len(row['round_ms']) == 3


def test_unknown_router_fails_listing_valid_ones():
  with pytest.raises(ValueError, match='unknown router .*valid routers'):
    train_step.main(['--router', 'hash'])
