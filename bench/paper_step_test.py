"""The paper-step benchmark: its grid on shrunk paper configs, the processes' merge and its flags
(no timed assertions; the rows' arithmetic is step_test's)."""
import json
import types

import jax
import pytest

from bench import paper_step
from configs import common
from configs import ilsvrc_s32
from results import paper


def test_grid_on_runlocal_configs_writes_every_field(tmp_path, monkeypatch):
  # The paper configs' runlocal shrink ('mu/32' on 64 x 64 images) stands in for B/32 at 224 px.
  paper_config = common.get_paper_config
  monkeypatch.setattr(paper_step.common, 'get_paper_config',
                      lambda arch, router, arg: paper_config(arch, router, f'{arg},runlocal=True'))
  out = tmp_path / 'o.json'
  paper_step.main(['--archs', 'B/32', '--routers', 'dense,soft_moe', '--dtypes', 'float32',
                   '--rounds', '2', '--out', str(out)])
  record = json.loads(out.read_text())
  assert record['processes'][0]['archs'] == ['B/32'] and not (tmp_path / 'o.json.parts').exists()
  dense, soft = record['rows']
  for r in (dense, soft):
    assert (r['per_device_batch'], len(r['round_ms'])) == (8, 2)    # The CPU default batch.
    assert r['flops_per_image'] > 0 and r['peak_memory_bytes'] > 0
    assert 0 < r['update_ms'] and 0 < r['first_step_ms']
  assert (dense['num_experts'], soft['num_experts']) == (0, 4)       # The CPU default E.
  assert (dense['dispatch_dtype'], soft['dispatch_dtype']) == (None, 'bfloat16')
  assert soft['vs_dense'] == pytest.approx(soft['step_ms'] / dense['step_ms'], abs=1e-3)
  assert soft['target'] == {'vs_flops_scaled_dense': 1.1}


def test_each_arch_and_dtype_runs_in_a_process_and_the_records_merge(tmp_path, monkeypatch):
  jobs = []

  def fake_run(module, job_list, out):     # Stands in for processes.run.
    assert module == 'bench.paper_step'
    jobs.extend(job_list)
    return [{'machine': 'm', 'method': 'interleaved', 'targets': paper_step.TARGETS,
             'rows': [{'arch': job[-3], 'dtype': job[-1]}],
             'processes': [{'archs': [job[-3]], 'dtypes': [job[-1]]}]} for job in job_list]
  monkeypatch.setattr(paper_step.processes, 'run', fake_run)
  out = tmp_path / 'o.json'
  argv = ['--archs', 'B/32,L/16', '--rounds', '2', '--out', str(out)]
  paper_step.main(argv)
  # The user's flags come first, then the process's arch and dtype (argparse keeps the last).
  assert jobs == [argv + ['--archs', a, '--dtypes', d]
                  for a in ('B/32', 'L/16') for d in ('float32', 'bfloat16')]
  record = json.loads(out.read_text())
  assert [(r['arch'], r['dtype']) for r in record['rows']] == [
      ('B/32', 'float32'), ('B/32', 'bfloat16'), ('L/16', 'float32'), ('L/16', 'bfloat16')]
  assert len(record['processes']) == 4
  assert record['method'] == 'interleaved; one process per arch and dtype'


def test_overrides_are_set_last():
  default = paper_step.paper_config('B/32', 'soft_moe', 'float32', 8, 4)
  overridden = paper_step.paper_config('B/32', 'soft_moe', 'float32', 8, 4,
                                       overrides={'moe.dispatch_dtype': 'float32'})
  assert (default.moe.dispatch_dtype, overridden.moe.dispatch_dtype) == ('bfloat16', 'float32')
  assert overridden.batch_size == 8 * jax.device_count() and overridden.moe.num_experts == 4


def test_the_rung_times_its_own_recipe(tmp_path, monkeypatch):
  # The rung's runlocal shrink ('mu/32', Last 1) stands in for VMoE-S/32 at 224 px.
  rung_config = ilsvrc_s32.rung_config
  monkeypatch.setattr(paper_step.ilsvrc_s32, 'rung_config',
                      lambda router, c: rung_config(router, c, runlocal=True))
  out = tmp_path / 'o.json'
  paper_step.main(['--archs', paper.RUNG_ARCH, '--routers', 'dense,softmax_tc',
                   '--dtypes', 'float32', '--rounds', '1', '--augment-on', 'host,device',
                   '--out', str(out)])
  dense, dense_device, softmax_tc, softmax_tc_device = json.loads(out.read_text())['rows']
  # On uint8 batches with the pp's tail in the step, beside the host path's float32 batches.
  for host, device in ((dense, dense_device), (softmax_tc, softmax_tc_device)):
    assert (host['augment_on'], device['augment_on']) == ('host', 'device')
    assert device['augment_share'] == round(device['step_ms'] / host['step_ms'] - 1, 4)
    assert device['augment_share_target'] == 0.03 and 'augment_share' not in host
  assert softmax_tc_device['vs_dense'] == round(
      softmax_tc_device['step_ms'] / dense_device['step_ms'], 3)
  assert (dense['router'], softmax_tc['router'], softmax_tc['capacity']) == (
      'dense', 'softmax_tc', 1.0)
  assert softmax_tc['num_experts'] == 4 and softmax_tc['per_device_batch'] == 8
  assert softmax_tc['flops_per_image'] > dense['flops_per_image'] > 0


@pytest.mark.parametrize('arch,per_device_batch,num_experts', [
    ('B/32', 4096 // 8, 32),                   # The paper's batch and E.
    (paper.RUNG_ARCH, 8192 // 8, 8)])          # The rung's.
def test_on_accelerators_the_defaults_are_the_recipes(monkeypatch, arch, per_device_batch,
                                                      num_experts):
  monkeypatch.setattr(paper_step.jax, 'devices', lambda: [types.SimpleNamespace(platform='gpu')])
  monkeypatch.setattr(paper_step.jax, 'device_count', lambda: 8)
  config = paper_step.paper_config(arch, 'softmax_tc', 'bfloat16', None, None)
  assert config.model.variant == arch and config.model.dtype == 'bfloat16'
  assert config.batch_size == 8 * per_device_batch and config.moe.num_experts == num_experts


def test_on_cpu_the_rung_takes_one_routing_group_and_4_experts():
  config = paper_step.paper_config(paper.RUNG_ARCH, 'softmax_tc', 'float32', None, None)
  assert config.batch_size == 8 * jax.device_count() and config.moe.num_experts == 4
  assert (config.model.variant, config.moe.last, config.model.num_classes) == (
      paper.RUNG_ARCH, 2, 1000)


@pytest.mark.parametrize('flag', ['--archs=H/14', '--rounds=0', '--steps=0', '--warmup=0',
                                  '--per-device-batch=0', '--routers=dense,nope'])
def test_bad_flags_exit_2_before_anything_compiles(flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    paper_step.parse_args([flag])
  assert exit_info.value.code == 2
  assert '--' in capsys.readouterr().err.splitlines()[-1]
