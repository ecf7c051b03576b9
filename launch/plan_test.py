"""The memory and time plan on this process's one CPU device, with a small runlocal paper config
whose three programs (float32, bfloat16, remat) the tests share, and in subprocesses that start
jax as launch/plan.py does (XLA:CPU's memory scheduler, libtpu)."""
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
from typing import NamedTuple

import jax
import pytest

from configs import common
from launch import plan
from launch import tpu_compiler
from testing import tpu_compiler as tpu_compiler_check
from vmoe.train import experiment as experiment_lib


@pytest.mark.parametrize('devices,mesh', [(32, (1, 32)), (128, (4, 32)), (8, (1, 8)),
                                          (64, (2, 32)), (12, (3, 4))])
def test_the_expert_axis_takes_as_many_devices_as_experts_allow(devices, mesh):
  # `measure` compiles on the parsed config's mesh: the paper configs' mesh.expert = -1, resolved
  # to gcd(devices, 32) (vmoe/model/sharding.py resolve). fixed=(): 12 devices fit the batch sizes.
  parsed = experiment_lib.parse(plan.paper_config('B/32'), num_devices=devices, fixed=())
  assert (parsed.mesh.data, parsed.mesh.expert) == mesh


# 'mu' on 32 x 32 images in 4 x 4 patches (65 tokens an image), 256 images and E = 4: the blocks'
# activations are a sizeable part of the peak (at this size most of it is the 21,843 classes'
# logits and their gradients, which neither bfloat16 nor remat touches).
SMALL_MODEL = {'model.image_size': 32, 'model.patch_size': 4, 'batch_size': 256,
               'moe.num_experts': 4}
ONE_CPU = plan.Slice('one CPU', 1, memory_gib=1.0, peak_tflops=1.0, tpu_topology='')


def small_config():
  """The runlocal B/32 paper config (softmax_ec, c = 1) with SMALL_MODEL."""
  config = common.get_paper_config('B/32', 'softmax_ec', 'c=1,runlocal=True')
  return common.override(config, SMALL_MODEL)


class SmallPlan(NamedTuple):
  """small_config()'s plan rows on ONE_CPU and on a second one-CPU slice (the same programs);
  how many times `measure` compiled for them; what the cache directory then holds."""
  rows: list
  measured: int
  cache_files: list[str]


def plan_small_model(cache_dir: str) -> SmallPlan:
  """The plan of small_config() under every precision on two one-CPU slices, measured into
  `cache_dir`."""
  measured, measure = [], plan.measure
  slices = [ONE_CPU, dataclasses.replace(ONE_CPU, name='same CPU')]
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(plan, 'measure', lambda c, d: measured.append(1) or measure(c, d))
    rows = [plan.plan_row(small_config(), s, jax.devices()[:1], tuple(plan.PRECISIONS), cache_dir)
            for s in slices]
  return SmallPlan(rows, len(measured), sorted(os.listdir(cache_dir)))


@pytest.fixture(scope='session')
def small_plan(tmp_path_factory) -> SmallPlan:
  """plan_small_model(), once per session (per worker: the tests that read it carry
  SHARES_SMALL_PLAN): they share its three compiled programs."""
  return plan_small_model(str(tmp_path_factory.mktemp('plan_cache')))


# The tests that read small_plan run on one pytest-xdist worker (make test: --dist loadgroup),
# whose session measures it once for all of them.
SHARES_SMALL_PLAN = pytest.mark.xdist_group('plan_test_small_plan')


@SHARES_SMALL_PLAN
def test_a_row_counts_the_state_and_the_step(small_plan):
  row = small_plan.rows[0]
  assert row['mesh'] == (1, 1) and row['batch_per_device'] == 256
  assert row['param_bytes'] == row['param_bytes_total'] == 4 * row['num_params']
  # Adam's two float32 moments, plus a few scalars (step counts), however optax nests them.
  assert 2 * row['param_bytes'] <= row['optimizer_bytes'] <= 2 * row['param_bytes'] + 64
  # The arguments are the state and the batch as the host ships it (data.augment_on='device'):
  # 256 uint8 images of 32 x 32 x 3 and an int32 label id each (the runlocal stand-in's pp has
  # no random op, so no key).
  batch_bytes = 256 * (32 * 32 * 3 + 4)
  assert row['argument_bytes'] >= row['param_bytes'] + row['optimizer_bytes'] + batch_bytes
  assert row['temp_bytes'] > 0 and row['fits']
  assert row['flops_per_step'] == row['flops_per_device'] > 0
  assert row['ideal_step_seconds'] == pytest.approx(row['flops_per_device'] / 1e12)
  table = plan.to_markdown([row], [row], 'python -m launch.plan', small_config())
  assert '| mu/32 | one CPU | XLA:CPU | device | 1 x 1 | 256 |' in table
  assert '| softmax_ec |' in table


@SHARES_SMALL_PLAN
def test_precision_columns_measure_bfloat16_and_remat_memory(small_plan):
  row = small_plan.rows[0]
  peaks = row['precision_peak_bytes']
  assert set(peaks) == {'bf16', 'remat'}
  assert peaks['bf16'] <= row['peak_bytes'] and peaks['remat'] < row['peak_bytes']
  table = plan.to_markdown([row], [], 'python -m launch.plan', small_config())
  assert '| peak, bf16 | peak, remat |' in table
  assert f"| {plan._gib(row['peak_bytes'])} | {plan._gib(peaks['bf16'])} | " in table


def run_python(code: str, xla_flags: str = '') -> dict:
  """`code`'s last stdout line as JSON, from a fresh process that starts jax on the CPU only."""
  env = {**os.environ, 'XLA_FLAGS': xla_flags, 'JAX_PLATFORMS': 'cpu'}
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], env=env, cwd=root,
                       capture_output=True, text=True, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_memory_scheduler_lets_remat_save_memory():
  # Six MLP blocks of width 128 on 1024 tokens. Without remat the backward pass keeps each
  # block's 1024 x 512 hidden layer twice (before and after gelu): 6 x 2 x 2 MiB; with
  # nothing_saveable it keeps the 1024 x 128 inputs (0.5 MiB each) and one block's hidden
  # layers at a time. The flag is what makes XLA:CPU's schedule show it.
  temps = run_python('''
      import json, jax, jax.numpy as jnp
      def block(w, x):
        return x + jax.nn.gelu(x @ w[0]) @ w[1]
      def loss(ws, x, remat):
        f = (jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable)
             if remat else block)
        for w in ws:
          x = f(w, x)
        return jnp.sum(x ** 2)
      ws = [(jnp.zeros((128, 512)), jnp.zeros((512, 128))) for _ in range(6)]
      x = jnp.zeros((1024, 128))
      temp = {remat: jax.jit(jax.grad(lambda ws, x: loss(ws, x, remat))).lower(ws, x).compile()
              .memory_analysis().temp_size_in_bytes for remat in (False, True)}
      print(json.dumps({str(k): v for k, v in temp.items()}))
      ''', xla_flags=plan.CPU_SCHEDULER_FLAG)
  # 6 x 2 hidden layers of 2 MiB kept without remat, at most 2 of them (one block) with it.
  assert temps['False'] - temps['True'] >= 8 * 2 ** 20, temps


def test_the_tpu_compiler_sizes_a_tpu_slice_without_a_tpu():
  tpu_compiler_check.require()
  # SMALL_MODEL's 'mu' with 10 classes, on 32 x 32 images in 8 x 8 patches (17 tokens an image),
  # on a TPU v5e-4 (4 chips, 16 GiB each), compiled by XLA:TPU: 8 images per device, one expert
  # each. XLA:TPU's compile time grows with the batch, the tokens and the classes (4 x 4 patches
  # and 21,843 classes: 7 s a program; this: 4.5 s). At this size (width 32, below the TPU's 128
  # lanes) neither bfloat16 nor remat saves memory; what they save at the paper's sizes is in
  # docs/scaling.md, which this same code writes.
  row = run_python('''
      import json
      from configs import common
      from launch import plan
      config = common.get_paper_config('B/32', 'softmax_ec', 'c=1,runlocal=True')
      pp = f'decode(channels=3)|resize(32)|value_range(-1, 1)|{common.labels_pp(10)}'
      config = common.override(config, {'model.image_size': 32, 'model.patch_size': 8,
                                        'model.num_classes': 10, 'data.num_classes': 10,
                                        'data.pp_train': pp, 'data.pp_eval': pp,
                                        'batch_size': 32, 'moe.num_experts': 4,
                                        'eval.batch_size': 32, 'fewshot.batch_size': 32})
      slice_ = plan.Slice('TPU v5e-4', 4, 16.0, 197.0, 'v5e:2x2')
      row = plan.plan_row(config, slice_, plan.slice_devices(slice_, [], tpu=True),
                          ('bf16',))
      print(json.dumps(row))
      ''')
  assert row['compiler'] == 'XLA:TPU v5e:2x2'
  assert row['mesh'] == [1, 4] and row['batch_per_device'] == 8
  # One expert of four per device: a quarter of the expert weights, all the rest.
  assert row['param_bytes'] < row['param_bytes_total']
  assert row['argument_bytes'] >= row['param_bytes'] + row['optimizer_bytes']
  assert row['temp_bytes'] > 0 and row['fits']
  assert row['flops_per_step'] == 4 * row['flops_per_device'] > 0
  assert row['precision_peak_bytes']['bf16'] > row['argument_bytes']


def test_every_slice_has_as_many_devices_as_its_topology():
  tpu_compiler_check.require()
  # plan_row compiles for the first slice_.devices of the topology's: fewer would plan a part of
  # the slice (libtpu's v4-32, 'v4:2x2x4', is 32 TensorCores, not 16 chips).
  counts = run_python('''
      import json
      from launch import plan
      from launch import tpu_compiler
      print(json.dumps({s.name: len(tpu_compiler.devices(s.tpu_topology))
                        for s in plan.SLICES + plan.RUNG_SLICES}))
      ''')
  assert counts == {s.name: s.devices for s in plan.SLICES + plan.RUNG_SLICES}


@SHARES_SMALL_PLAN
def test_measurements_are_cached_once_per_program(small_plan):
  # A resumed or concurrent plan reads the counters back; two slices compiling the same program
  # (same arch, router, compiler and device count) share one measurement.
  rows = small_plan.rows
  assert small_plan.measured == 3     # The base program and its two variants, once each.
  assert rows[0]['temp_bytes'] == rows[1]['temp_bytes']
  assert rows[0]['precision_peak_bytes'] == rows[1]['precision_peak_bytes']
  config = small_config()
  variants = {name: common.override(config.copy_and_resolve_references(), overrides)
              for name, overrides in plan.PRECISIONS.items()}
  key = f'mu_32-softmax_ec-XLA_CPU-1-{config.data.augment_on}'   # Each path is its own program.
  assert small_plan.cache_files == sorted(
      [f'{key}-{plan.program_digest(config)}.json'] +
      [f'{key}-{name}-{plan.program_digest(variant)}.json' for name, variant in variants.items()])


def test_an_edited_config_or_model_source_is_another_program(tmp_path, monkeypatch):
  config = common.get_paper_config('B/32', 'softmax_ec', 'c=1,runlocal=True')
  digest = plan.program_digest(config)
  assert plan.program_digest(config.copy_and_resolve_references()) == digest
  edited = common.override(config.copy_and_resolve_references(), {'batch_size': 16})
  assert plan.program_digest(edited) != digest
  # A copy of the repository's model sources with one byte more in the router.
  for pattern in plan.PROGRAM_SOURCES:
    for path in glob.glob(os.path.join(plan.ROOT, pattern), recursive=True):
      target = tmp_path / os.path.relpath(path, plan.ROOT)
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy(path, target)
  monkeypatch.setattr(plan, 'ROOT', str(tmp_path))
  assert plan.program_digest(config) == digest
  with open(tmp_path / 'vmoe' / 'routing' / 'router.py', 'a', encoding='utf-8') as f:
    f.write('\n')
  edited_source = plan.program_digest(config)
  assert edited_source != digest
  with open(tmp_path / 'vmoe' / 'routing' / 'router_test.py', 'a', encoding='utf-8') as f:
    f.write('\n')            # Tests do not make the program.
  assert plan.program_digest(config) == edited_source


@pytest.mark.parametrize('name,mesh,per_device', [('8x A100 80GB', (1, 8), 1024),
                                                  ('8x H100 80GB', (1, 8), 1024),
                                                  ('TPU v4-32', (4, 8), 256)])
def test_the_rung_is_planned_on_an_8_gpu_node_and_a_v4_32(name, mesh, per_device):
  # V-MoE's S/32 cell: E = 8 experts, mesh.expert = gcd(devices, 8), batch 8192 over the devices
  # (8192 / 8 = 1024, 8192 / 32 = 256). libtpu's v4-32 is 32 TensorCores (16 chips).
  slice_ = {s.name: s for s in plan.RUNG_SLICES}[name]
  parsed = experiment_lib.parse(plan.rung_config(), num_devices=slice_.devices)
  assert (parsed.mesh.data, parsed.mesh.expert) == mesh
  assert parsed.batch_size // slice_.devices == per_device


def rung_rows(row: dict) -> list[dict]:
  """`row` as measured on each of RUNG_SLICES and AUGMENT_PATHS (a stand-in for the rung's rows),
  the device path's peak a quarter above the host path's."""
  return [{**row, 'arch': 'VMoE-S/32', 'slice': s.name, 'augment_on': path,
           'peak_bytes': row['peak_bytes'] * (1.25 if path == 'device' else 1)}
          for s in plan.RUNG_SLICES for path in plan.AUGMENT_PATHS]


@SHARES_SMALL_PLAN
def test_the_rung_section_states_the_cell_and_its_hours(small_plan):
  row = small_plan.rows[0]
  section = plan.rung_section(rung_rows(row), 'python -m launch.plan --rung-only',
                              plan.rung_config())
  assert section.startswith(plan.RUNG_HEADING + '\n')
  assert 'E = 8 experts, "Last 2": MoE layers in the last 2 of every other block' in section
  assert 'softmax_tc with k = 2 at c = 1.05), global batch 8,192' in section
  # The cell's 46,449 steps, in hours: ideal_days x 24.
  assert '| ideal hours, 46,449 steps |' in section
  assert f"| {row['ideal_days'] * 24:.2f} |" in section
  for path in plan.AUGMENT_PATHS:
    assert f'| VMoE-S/32 | TPU v4-32 | XLA:CPU | {path} | 1 x 1 | 256 |' in section
  assert '| augment_on | mesh data x expert |' in section
  assert '| 16 | yes |' in section      # A v4 TensorCore's half of its chip's 32 GiB.
  # The rung and the paper configs augment on the device; each slice's ratio of the two peaks.
  assert 'The rung\'s config runs `device`, as the paper configs do.' in section
  assert (f"- TPU v4-32: peak {plan._gib(1.25 * row['peak_bytes'])} GiB on the device path, "
          f"{plan._gib(row['peak_bytes'])} on the host path: 1.25x.") in section


def test_every_table_says_where_the_augmentation_runs():
  assert '| compiler | augment_on | mesh' in plan.plan_table([], 10)[0]
  # The paper rows' setting, with the ops on each side of the cut (data/pp/device_split.py).
  sentence = plan.augmentation_sentence(plan.paper_config('B/32'))
  assert 'The paper configs run `data.augment_on = device`' in sentence
  assert '(`decode|inception_crop(224)`) and ships uint8 images' in sentence
  assert "`flip_lr|randaug(2, 20, arithmetic='reference')|value_range(-1, 1)|onehot(" in sentence
  host = common.override(plan.paper_config('B/32'), {'data.augment_on': 'host'})
  assert 'the whole training pp, `decode|inception_crop(224)|flip_lr|' in (
      plan.augmentation_sentence(host))


def fake_measure(measured: list):
  """A stand-in for plan.measure that records each compile and returns counters."""
  def measure(config, devices):
    measured.append((config.model.variant, len(devices)))
    return {'compile_cpu_seconds': 0.0, 'argument_bytes': 1, 'temp_bytes': 2}
  return measure


def test_workers_share_the_programs_and_take_each_once(tmp_path, monkeypatch):
  # Two slices of one program (the 8x A100 / 8x H100 stand-in's case), under two precisions:
  # three distinct programs. A program another worker claimed is left to it; a cached one is
  # not compiled again.
  measured = []
  monkeypatch.setattr(plan, 'measure', fake_measure(measured))
  slices = [ONE_CPU, dataclasses.replace(ONE_CPU, name='same CPU')]
  sections = {'paper': [(small_config(), s, tuple(plan.PRECISIONS)) for s in slices]}
  todo = plan.jobs(sections, lambda slice_: jax.devices()[:1])
  assert len(todo) == 3 and len({key for key, _, _ in todo}) == 3
  claims, cache = tmp_path / 'claims', tmp_path / 'cache'
  claims.mkdir()
  (claims / os.path.basename(plan.cache_path(str(cache), todo[1][0]))).touch()
  assert plan.work(todo, str(cache), str(claims)) == 2 and len(measured) == 2
  assert sorted(os.listdir(cache)) == sorted(
      os.path.basename(plan.cache_path(str(cache), todo[i][0])) for i in (0, 2))
  assert plan.work(todo, str(cache), str(claims)) == 0     # Two cached, one claimed.
  (tmp_path / 'next run').mkdir()                          # A later run's claims: the one left.
  assert plan.work(todo, str(cache), str(tmp_path / 'next run')) == 1 and len(measured) == 3


def test_jobs_start_with_the_largest_model():
  sections = plan.requests(['B/32', 'L/16'], (), ('softmax_tc',), rung_only=False)
  todo = plan.jobs(sections, lambda slice_: jax.devices()[:1] * slice_.devices)
  variants = [config.model.variant for _, config, _ in todo]
  assert variants == sorted(variants, key=['L/16', 'B/32', 'VMoE-S/32'].index)
  # Each arch on the slices (8x A100 and 8x H100: one program), one router, the rung's two
  # device counts on both paths.
  assert len(todo) == 2 * (len(plan.SLICES) - 1) + 1 + 2 * len(plan.AUGMENT_PATHS)


def test_jobs_run_as_workers_that_claim_in_one_directory(tmp_path, monkeypatch):
  # Two workers; the first is killed (for memory) and replaced once, the others exit cleanly.
  started = []

  class FakeProcess:
    def __init__(self, command, env):
      started.append((command, env['PYTHONPATH'].split(os.pathsep)[0],
                      os.path.isdir(command[-1])))
      self.returncode = -9 if len(started) == 1 else 0

    def poll(self):
      return self.returncode
  monkeypatch.setattr(plan.subprocess, 'Popen', FakeProcess)
  monkeypatch.setattr(plan.time, 'sleep', lambda seconds: None)
  assert sorted(plan.run_workers(['--out', 'x.md'], 2, str(tmp_path))) == [-9, 0, 0]
  assert len(started) == 3 and started[0] == started[1] == started[2]
  command, path, existed = started[0]
  assert command[1:5] == ['-m', 'launch.plan', '--out', 'x.md'] and command[5] == '--claims'
  assert path == plan.ROOT and existed and not os.path.exists(command[-1])   # Gone after.


def test_a_heavy_program_compiles_alone_on_a_small_host(tmp_path, monkeypatch):
  cache, claims = tmp_path / 'cache', tmp_path / 'claims'
  cache.mkdir()
  claims.mkdir()
  assert plan.claim(str(claims), 'mine.json') and not plan.claim(str(claims), 'mine.json')
  assert (claims / 'mine.json').read_text() == f'{os.getpid()} shared'
  assert plan.others_compiling(str(cache), str(claims)) == []      # Its own claim.
  dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                        capture_output=True, text=True, check=True).stdout.strip()
  (claims / 'killed.json').write_text(f'{dead} alone')
  assert plan.others_compiling(str(cache), str(claims)) == []      # A dead worker's claim.
  (claims / 'other.json').write_text(f'{os.getppid()} alone')
  assert plan.others_compiling(str(cache), str(claims)) == [True]  # Live, not cached.
  # Beside a program compiling alone, nothing starts; beside a shared one, only shared ones.
  assert not plan.may_start(False, [True]) and not plan.may_start(True, [True])
  assert plan.may_start(False, [False]) and not plan.may_start(True, [False])
  assert plan.may_start(True, []) and plan.may_start(False, [])
  # A worker skips what may not start for what may, and waits while nothing may.
  measured = []
  monkeypatch.setattr(plan, 'measure', fake_measure(measured))
  compiles_alone = plan.compiles_alone
  monkeypatch.setattr(plan, 'compiles_alone', lambda config: config.model.variant == 'L/16')
  todo = [('heavy', plan.paper_config('L/16'), []), ('light', plan.paper_config('B/32'), [])]
  (claims / 'other.json').write_text(f'{os.getppid()} shared')     # Another compiles, shared.
  polls = []
  monkeypatch.setattr(plan.time, 'sleep', lambda seconds: (
      polls.append(seconds), (cache / 'other.json').write_text('{}')))
  assert plan.work(todo, str(cache), str(claims)) == 2
  assert measured == [('B/32', 0), ('L/16', 0)] and len(polls) == 1
  # L/16 is heavy: alone on a host with less than two of its compiles' memory, not on more.
  config = plan.paper_config('L/16')
  monkeypatch.setattr(plan, 'memory_total', lambda: 24 * plan.GIB)
  assert compiles_alone(config) and not compiles_alone(plan.paper_config('B/16'))
  monkeypatch.setattr(plan, 'memory_total', lambda: 64 * plan.GIB)
  assert not compiles_alone(config)
