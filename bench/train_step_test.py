"""The tiny config's step benchmark: its grid compiled and run, the runs' median, its flags (no
timed assertions)."""
import json

import pytest

from bench import train_step
from results import cost


def test_grid_writes_rows_that_price_the_controlled_cost(tmp_path):
  out = tmp_path / 'train_step.json'
  train_step.main(['--routers', 'softmax_tc', '--capacities', '1', '--warmup', '1', '--rounds',
                   '2', '--steps', '1', '--processes', '1', '--out', str(out)])
  result = json.loads(out.read_text())
  assert set(result) == {'arch', 'machine', 'method', 'rows'}
  assert result['arch'] == 'XS/7'      # configs/tiny.py's model.variant, as in its summaries.
  dense, moe, ablation = result['rows']
  assert (dense['router'], dense['capacity']) == ('dense', None)
  assert (moe['router'], moe['capacity'], moe['softmax_combine']) == ('softmax_tc', 1.0, True)
  # The sweep's softmax-combine ablation is timed too (results/cost.py prices its runs).
  assert (ablation['router'], ablation['capacity'], ablation['softmax_combine']) == (
      'sinkhorn_tc', 1.0, False)
  assert all(r['per_device_batch'] == 64 and len(r['round_ms']) == 2 for r in result['rows'])
  # Two MoE layers of E = 8 experts replace two dense MLPs: more parameters than the dense ViT.
  assert moe['num_params'] > dense['num_params']
  assert moe['target'] == {'vs_dense': 1.3} and ablation['target'] is None
  step_times = cost.load_step_times(str(out))
  assert step_times.arch == 'XS/7'
  assert step_times.times[cost.step_key('sinkhorn_tc', 1.0, False)] == ablation['step_ms']


def test_runs_combine_into_median_ratios():
  def run(*ratios):
    return {'rows': [{'router': 'dense'}] + [
        {'router': r, 'capacity': c, 'softmax_combine': True, 'vs_dense': v,
         'target': None if t is None else {'vs_dense': t}} for r, c, v, t in ratios]}
  runs = [run(('sparsity_ec', 1.0, 1.174, 1.3), ('soft_moe', 2.0, 1.48, None)),
          run(('sparsity_ec', 1.0, 1.364, 1.3), ('soft_moe', 2.0, 1.40, None)),
          run(('sparsity_ec', 1.0, 1.388, 1.3), ('soft_moe', 2.0, 1.50, None))]
  # The first run alone meets 1.3; the median of the three (1.364) does not.
  assert train_step.combine(runs) == [
      {'router': 'sparsity_ec', 'capacity': 1.0, 'softmax_combine': True, 'vs_dense': 1.364,
       'vs_dense_runs': [1.174, 1.364, 1.388], 'target': {'vs_dense': 1.3},
       'meets_target': False},
      {'router': 'soft_moe', 'capacity': 2.0, 'softmax_combine': True, 'vs_dense': 1.48,
       'vs_dense_runs': [1.48, 1.40, 1.50], 'target': None, 'meets_target': None}]


def test_processes_each_run_the_grid_once(tmp_path, monkeypatch):
  jobs = []

  def fake_run(module, job_list, out):     # Stands in for processes.run.
    jobs.extend(job_list)
    return [{'arch': 'XS/7', 'machine': {}, 'method': 'one run', 'rows': [
        {'router': 'dense'}, {'router': 'soft_moe', 'capacity': 1.0, 'softmax_combine': True,
                              'vs_dense': ratio, 'target': {'vs_dense': 1.2}}]}
            for ratio in [1.1, 1.2, 1.3][:len(job_list)]]
  monkeypatch.setattr(train_step.processes, 'run', fake_run)
  out = tmp_path / 'train_step.json'
  argv = ['--routers', 'soft_moe', '--rounds', '4', '--out', str(out)]
  train_step.main(argv)
  # Three processes (the default), each the user's flags with --processes 1 last.
  assert jobs == [argv + ['--processes', '1']] * 3
  result = json.loads(out.read_text())
  assert set(result) == {'arch', 'machine', 'method', 'runs', 'ratios'} and len(result['runs']) == 3
  assert result['ratios'][0]['vs_dense_runs'] == [1.1, 1.2, 1.3]
  assert result['ratios'][0]['vs_dense'] == 1.2 and result['ratios'][0]['meets_target']


@pytest.mark.parametrize('flag', ['--routers=hash', '--capacities=one', '--warmup=0',
                                  '--rounds=0', '--processes=0'])
def test_bad_flags_exit_2(flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    train_step.main([flag])
  assert exit_info.value.code == 2
  assert '--' in capsys.readouterr().err.splitlines()[-1]


def test_the_default_grid_is_the_studys_routers():
  args = train_step.parse_args([])
  assert args.routers[:6] == list(train_step.router_lib.PAPER_ROUTERS)
  assert set(args.routers[6:]) == {'sigmoid_tc', 'lossfree_tc', 'base', 'topp_tc', 'random_tc'}
