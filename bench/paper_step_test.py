"""The paper-step benchmark: its grid on shrunk paper configs, the rows' fields and the ratios'
arithmetic (no timing is checked)."""
import json

import jax
import pytest

from bench import paper_step
from configs import common


def test_grid_on_runlocal_configs_writes_every_field(tmp_path, monkeypatch, capsys):
  # The paper configs' runlocal shrink ('mu/32' on 64 x 64 images) stands in for B/32 at 224 px.
  paper_config = common.get_paper_config
  monkeypatch.setattr(paper_step.common, 'get_paper_config',
                      lambda arch, router, arg: paper_config(arch, router, f'{arg},runlocal=True'))
  calibrate = paper_step.calibrated_peak
  monkeypatch.setattr(paper_step, 'calibrated_peak', lambda dtype: calibrate(dtype, size=256))
  args = paper_step.parse_args(['--archs', 'B/32', '--routers', 'dense,soft_moe',
                                '--rounds', '2', '--out', str(tmp_path / 'o.json')])
  assert args.per_device_batch == 8 and args.num_experts == 4     # The CPU defaults.
  result = paper_step.run(args)
  capsys.readouterr()
  assert result['peak_flops']['float32']['source'].startswith('calibration matmul')
  rows = {(r['router'], r['dtype']): r for r in result['rows']}
  assert len(result['rows']) == 4
  for (router, dtype), r in rows.items():
    assert r['arch'] == 'B/32' and r['per_device_batch'] == 8 and len(r['round_ms']) == 2
    assert r['num_experts'] == (0 if router == 'dense' else 4)
    assert r['dispatch_dtype'] == (None if router == 'dense' else 'bfloat16')
    assert r['flops_per_image'] > 0 and r['peak_memory_bytes'] > 0 and 0 < r['mfu']
    assert r['images_per_second'] == pytest.approx(8 / (r['step_ms'] / 1e3), rel=1e-3)
    assert 0 < r['update_ms']           # The optimizer's update alone, in the same rounds.
    assert 0 < r['first_step_ms']       # Each round's untimed first step on its fresh state.
  for dtype in paper_step.DTYPES:
    dense, soft = rows[('dense', dtype)], rows[('soft_moe', dtype)]
    assert soft['vs_dense'] == pytest.approx(soft['step_ms'] / dense['step_ms'], abs=1e-3)
    assert soft['vs_flops_scaled_dense'] == pytest.approx(
        soft['vs_dense'] / soft['flops_vs_dense'], abs=2e-3)
  # bfloat16 activations: the step needs less memory than in float32.
  assert rows[('dense', 'bfloat16')]['peak_memory_bytes'] < rows[('dense', 'float32')][
      'peak_memory_bytes']


def fields(arch, router, dtype, flops):
  return {'arch': arch, 'router': router, 'dtype': dtype, 'per_device_batch': 8,
          'flops_per_image': flops}


def test_rows_and_ratios_hand_worked():
  peak = 1e12
  rows = [paper_step.row(fields('B/32', 'dense', 'float32', 1e9), [10.0, 30.0, 20.0], peak),
          paper_step.row(fields('B/32', 'sinkhorn_ec', 'float32', 1e9), [22.0], peak),
          paper_step.row(fields('B/32', 'soft_moe', 'float32', 1.25e9), [25.0], peak),
          paper_step.row(fields('B/16', 'soft_moe', 'float32', 1e9), [25.0], peak)]
  dense = rows[0]
  # Median 20 ms for 8 images per device: 400 images/s per device, 4e11 FLOP/s: 40% of 1e12.
  assert dense['step_ms'] == 20.0
  assert dense['images_per_second'] == 400.0 * jax.device_count()
  assert dense['mfu'] == pytest.approx(0.4)
  dense_, sparse, soft, lonely = paper_step.add_ratios(rows)
  assert dense_ == dense and lonely == rows[3]      # No dense B/16 row: no ratio.
  # 22 / 20 = 1.1 <= 1.15; Soft MoE 25 / 20 = 1.25 at 1.25x the FLOPs: 1.0 of the scaled dense.
  assert (sparse['vs_dense'], sparse['flops_vs_dense'], sparse['meets_target']) == (1.1, 1.0, True)
  assert (soft['vs_dense'], soft['flops_vs_dense'], soft['vs_flops_scaled_dense']) == (
      1.25, 1.25, 1.0)
  assert soft['target'] == 1.1 and soft['meets_target']


def test_update_share_of_the_extra_step_hand_worked():
  peak = 1e12
  dense = paper_step.row(fields('B/32', 'dense', 'float32', 1e9), [20.0], peak, [4.0])
  sparse = paper_step.row(fields('B/32', 'sinkhorn_ec', 'float32', 1e9), [30.0], peak, [7.0])
  assert (dense['update_ms'], sparse['update_ms']) == (4.0, 7.0)
  # The MoE step takes 10 ms more, its update 3 ms more: the update explains 30% of the extra.
  assert paper_step.add_ratios([dense, sparse])[1]['update_share_of_extra'] == 0.3


def last_value(command: list, flag: str) -> str:
  """The value of `flag`'s last occurrence in `command` (the one argparse keeps)."""
  return command[len(command) - command[::-1].index(flag)]


def test_each_arch_and_dtype_runs_in_a_process_and_a_rerun_resumes(tmp_path, monkeypatch):
  calls = []

  def fake_run(command, check):
    assert check and command[:3] == [paper_step.sys.executable, '-m', 'bench.paper_step']
    calls.append(command[3:])
    last = lambda flag: last_value(command, flag)
    if last('--archs') == 'L/16' and last('--dtypes') == 'bfloat16' and len(calls) < 5:
      raise paper_step.subprocess.CalledProcessError(-9, command)     # Killed, the first time.
    peak = {last('--dtypes'): {'flops_per_second': len(calls)}}
    record = {'machine': 'm', 'method': 'interleaved', 'targets': paper_step.TARGETS,
              'peak_flops': peak,
              'rows': [{'arch': last('--archs'), 'dtype': last('--dtypes'), 'router': r}
                       for r in ('dense', 'soft_moe')],
              'processes': [{'archs': [last('--archs')], 'dtypes': [last('--dtypes')],
                             'peak_flops': peak}]}
    paper_step.atomic.write_json(last('--out'), record)
  monkeypatch.setattr(paper_step.subprocess, 'run', fake_run)
  out = tmp_path / 'o.json'
  argv = ['--archs', 'B/32,L/16', '--rounds', '2', '--out', str(out)]
  with pytest.raises(paper_step.subprocess.CalledProcessError):
    paper_step.main(argv)
  assert len(calls) == 4 and not out.exists()
  paper_step.main(argv)               # Resumes: only the killed process runs again.
  assert len(calls) == 5 and calls[-1][-5:-2] == ['L/16', '--dtypes', 'bfloat16']
  # The user's flags come first, then the process's arch, dtype and part file.
  assert all(c[:4] == ['--archs', 'B/32,L/16', '--rounds', '2'] for c in calls)
  record = json.loads(out.read_text())
  assert [(r['arch'], r['dtype']) for r in record['rows'][::2]] == [
      ('B/32', 'float32'), ('B/32', 'bfloat16'), ('L/16', 'float32'), ('L/16', 'bfloat16')]
  assert [p['archs'] + p['dtypes'] for p in record['processes']] == [
      ['B/32', 'float32'], ['B/32', 'bfloat16'], ['L/16', 'float32'], ['L/16', 'bfloat16']]
  assert record['peak_flops'] == {'float32': {'flops_per_second': 3},
                                  'bfloat16': {'flops_per_second': 5}}
  assert record['method'] == 'interleaved; one process per arch and dtype, run in turn'
  assert not (tmp_path / 'o.json.parts').exists()


def test_a_rerun_with_other_flags_does_not_take_a_failed_runs_parts(tmp_path, monkeypatch):
  calls = []

  def fake_run(command, check):
    calls.append(command[3:])
    last = lambda flag: last_value(command, flag)
    if '--per-device-batch' in command and last('--dtypes') == 'bfloat16':
      raise paper_step.subprocess.CalledProcessError(-9, command)     # Killed at its 2nd process.
    peak = {last('--dtypes'): {'flops_per_second': 1}}
    paper_step.atomic.write_json(last('--out'), {
        'method': 'm', 'peak_flops': peak, 'rows': [{'batch_flags': command[3:-6]}],
        'processes': [{'archs': [last('--archs')], 'dtypes': [last('--dtypes')],
                       'peak_flops': peak}]})
  monkeypatch.setattr(paper_step.subprocess, 'run', fake_run)
  out = tmp_path / 'o.json'
  failed = ['--archs', 'B/32', '--per-device-batch', '16', '--out', str(out)]
  with pytest.raises(paper_step.subprocess.CalledProcessError):
    paper_step.main(failed)
  left = sorted(p.name for p in (tmp_path / 'o.json.parts').iterdir())
  assert len(calls) == 2 and len(left) == 1 and left[0].startswith('B32_float32_')
  paper_step.main(['--archs', 'B/32', '--out', str(out)])     # Other flags: both processes run.
  assert len(calls) == 4
  rows = json.loads(out.read_text())['rows']
  assert [r['batch_flags'] for r in rows] == [['--archs', 'B/32', '--out', str(out)]] * 2


def test_peak_table_and_calibration():
  assert paper_step.table_peak('NVIDIA H100 80GB HBM3', 'bfloat16') == 989e12
  assert paper_step.table_peak('NVIDIA A100-SXM4-80GB', 'float32') == 156e12
  assert paper_step.table_peak('TPU v4', 'float32') == 275e12
  assert paper_step.table_peak('cpu', 'float32') is None
  assert paper_step.calibrated_peak('float32', size=64, repeats=2) > 0


def test_unknown_arch_is_refused():
  with pytest.raises(SystemExit):
    paper_step.parse_args(['--archs', 'H/14'])


class CountingStepper:
  """Records what interleaved_ms does to it."""

  def __init__(self):
    self.log = []

  def load(self):
    self.log.append('load')

  def unload(self):
    self.log.append('unload')

  def __call__(self):
    self.log.append('step')
    return 0

  def update(self):
    self.log.append('update')
    return 0


def test_every_round_warms_its_fresh_state_before_the_timed_steps():
  stepper = CountingStepper()
  round_ms, first_ms, update_ms = paper_step.interleaved_ms([stepper], rounds=2, steps=3, warmup=2)
  assert [len(t[0]) for t in (round_ms, first_ms, update_ms)] == [2, 2, 2]
  # Each round: its state, 2 untimed steps (the first timed alone), 3 timed; the update's first
  # call (compilation aside) is untimed in the first round only.
  first_round = ['load'] + ['step'] * 5 + ['update'] * 4 + ['unload']
  second_round = ['load'] + ['step'] * 5 + ['update'] * 3 + ['unload']
  assert stepper.log == first_round + second_round


def test_overrides_are_set_last():
  default = paper_step.paper_experiment('B/32', 'soft_moe', 'float32', 8, 4, False)
  overridden = paper_step.paper_experiment('B/32', 'soft_moe', 'float32', 8, 4, False,
                                           {'moe.dispatch_dtype': 'float32'})
  assert (default.moe.dispatch_dtype, overridden.moe.dispatch_dtype) == ('bfloat16', 'float32')
  assert overridden.batch_size == 8 * jax.device_count() and overridden.moe.num_experts == 4


@pytest.mark.parametrize('flag', ['--rounds=0', '--steps=0', '--warmup=-1', '--per-device-batch=0',
                                  '--routers=dense,nope'])
def test_bad_flags_exit_2_before_anything_compiles(flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    paper_step.parse_args([flag])
  assert exit_info.value.code == 2
  assert '--' in capsys.readouterr().err.splitlines()[-1]
