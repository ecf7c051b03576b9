"""Memory and time plan: per-device memory and FLOPs of the paper's models on common slices.

  nice -n 19 .venv/bin/python -m launch.plan --jobs 2 --out docs/scaling.md   # as make plan
  nice -n 19 .venv/bin/python -m launch.plan --no-tpu-compiler --out /tmp/scaling.md   # XLA:CPU
  nice -n 19 .venv/bin/python -m launch.plan --rung-only --out docs/scaling.md   # the rung alone

On a host short of memory, MALLOC_ARENA_MAX=2 in the environment (fewer glibc malloc arenas for
libtpu's compiler threads) lowers what the process holds while it compiles.

For B/32, B/16 and L/16 with E = 32 experts (softmax_ec, c = 1) at the paper's batch of 4096, on
each slice of SLICES, this compiles the real sharded train step (the trainer's: mixup, loss,
gradients, Adam update; state donated) on the configs' mesh data x expert (mesh.expert = -1:
expert = gcd(devices, E), vmoe/model/sharding.py `resolve`; every expert on one device when there
are at least E devices); and the ImageNet-1k rung's published cell (configs/ilsvrc_s32_vmoe.py) on
each slice of RUNG_SLICES, in a section of its own that --rung-only rewrites alone. It reads the
compiler's own counters of the per-device program:
  arguments  memory_analysis().argument_size_in_bytes: the device's share of the train state
             (parameters and Adam's two moments, expert weights split over 'expert') and batch;
  temporary  memory_analysis().temp_size_in_bytes: activations kept for the backward pass,
             gradients, the all-to-all buffers, every other intermediate at the peak;
  FLOPs      cost_analysis()['flops'] (vmoe/train/flops.py: what XLA counts) of the per-device
             program.
The outputs (the new state) alias the donated arguments, so a device needs arguments + temporary.
Parameter and optimizer bytes come from the state's shapes and shardings. The same step is
compiled again under each of PRECISIONS (bfloat16 compute, remat) for the peak per device
of each: parameters and Adam moments stay float32, so what changes is the temporary memory.

The compiler is XLA:TPU's (launch/tpu_compiler.py: libtpu compiles for a TPU topology without a
TPU). The TPU rows compile for the slice itself. The GPU rows compile the same per-device program
for TPU v5p chips (95 GiB of HBM each) as a stand-in for XLA:GPU, which cannot compile without a
GPU: both are accelerator compilers with native bfloat16 that schedule for memory and
rematerialise to fit, which XLA:CPU does not. Without libtpu (--no-tpu-compiler), every row is
XLA:CPU's on simulated CPU devices, with its memory-aware scheduler (CPU_SCHEDULER_FLAG). Its
numbers are upper bounds: it converts bfloat16 matmul operands to float32 (both copies live), and
it never rematerialises on its own.

Each compiled program's counters are kept in --cache-dir, so a killed plan resumes where it
stopped, and the 8x H100 rows reuse the 8x A100 stand-in's programs. `--jobs N` compiles with N
processes (one a core): each takes the next program, the largest models first, that no other
has claimed (an exclusive file in a claims directory of the cache, gone with the run) or cached,
and this process then writes the page from the cache. A
measurement's name holds a digest of what makes its program (`program_digest`: the resolved
config, the jax and jaxlib versions and the model code's sources), so an edited config or model
compiles afresh instead of reading stale counters.

The ideal step time divides the device's FLOPs by its peak: float32 matmuls run as bfloat16
passes on TPU and as TF32 on A100 by default (jax-ml/jax#18934), so the peaks are those; real runs
reach a fraction of it (MoE routing, all-to-all and the input pipeline are not in the FLOPs).
"""
import argparse
import dataclasses
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

# XLA:CPU's default scheduler orders a program for concurrency: it runs the backward pass's
# recomputations as soon as their inputs exist, which undoes remat (dense B/32, 64 images: 3.17
# GiB of temporaries with remat or without). With this flag it schedules for memory, as the
# accelerator compilers do (12 MLP blocks of width 768 on 12,800 tokens: 5.90 -> 5.86 GiB under
# remat by default, 5.75 -> 2.82 GiB with it; launch/plan_test.py checks the effect).
CPU_SCHEDULER_FLAG = '--xla_cpu_enable_concurrency_optimized_scheduler=false'

if __name__ == '__main__':   # XLA reads these when jax starts: devices for the largest slice.
  os.environ['XLA_FLAGS'] = f'--xla_force_host_platform_device_count=256 {CPU_SCHEDULER_FLAG}'
  os.environ['JAX_PLATFORMS'] = 'cpu'   # TPU slices are compiled for, never run (tpu_compiler).

import jax   # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np   # pylint: disable=wrong-import-position

from base import atomic   # pylint: disable=wrong-import-position
from base import fast_compile   # pylint: disable=wrong-import-position
from base import host   # pylint: disable=wrong-import-position
from base import published   # pylint: disable=wrong-import-position
from configs import common   # pylint: disable=wrong-import-position
from configs import ilsvrc_s32_vmoe   # pylint: disable=wrong-import-position
from data.pp import device_split   # pylint: disable=wrong-import-position
from data.pp import syntax as pp_syntax   # pylint: disable=wrong-import-position
from launch import tpu_compiler   # pylint: disable=wrong-import-position
from vmoe.routing import declarations   # pylint: disable=wrong-import-position
from vmoe.model import sharding   # pylint: disable=wrong-import-position
from vmoe.routing import router as router_lib   # pylint: disable=wrong-import-position
from vmoe.train import experiment as experiment_lib   # pylint: disable=wrong-import-position
from vmoe.train import flops   # pylint: disable=wrong-import-position
from vmoe.train import train_program   # pylint: disable=wrong-import-position

GIB = 2 ** 30
ROUTER = 'softmax_ec'
ROUTER_SLICE = 0     # The router comparison runs B/32 on SLICES[0].


@dataclasses.dataclass(frozen=True)
class Slice:
  """A set of accelerators: how many JAX devices, each one's memory and peak FLOP/s, and the TPU
  topology (launch/tpu_compiler.py) whose compiler sizes it: the slice's own for a TPU, one with
  as many devices for a GPU slice (a stand-in: see the module's docstring)."""
  name: str
  devices: int
  memory_gib: float
  peak_tflops: float
  tpu_topology: str


# A v3 chip has 2 TensorCores (2 JAX devices), 32 GiB of HBM and 123 bf16 TFLOP/s
# (cloud.google.com/tpu/docs/v3); an A100 80GB has 80 GiB and 156 TF32 TFLOP/s (dense). A v5p
# chip is one JAX device with 95 GiB of HBM, more than the GPUs', so the stand-in's compiler
# does not rematerialise what would fit in 80 GiB.
SLICES = (
    Slice('TPU v3-32', 32, 16.0, 61.5, 'v3:4x4'),
    Slice('TPU v3-128', 128, 16.0, 61.5, 'v3:8x8'),
    Slice('TPU v3-256', 256, 16.0, 61.5, 'v3:8x16'),
    Slice('8x A100 80GB', 8, 80.0, 156.0, 'v5p:2x2x2'),
    Slice('64x A100 80GB', 64, 80.0, 156.0, 'v5p:4x4x4'),
    Slice('8x H100 80GB', 8, 80.0, 494.5, 'v5p:2x2x2'),   # H100 SXM: 494.5 dense TF32 TFLOP/s.
)
# The ImageNet-1k rung on one 8-GPU node (the stand-in above) and on a TPU v4-32: 16 chips of 32
# GiB and 275 bf16 TFLOP/s (cloud.google.com/tpu/docs/v4). libtpu's v4 topology lists each chip's
# two TensorCores as two devices, as v3's does, so the slice is 32 devices of half a chip each (a
# v4 VM runs a chip's two cores as one device, with the same memory and FLOP/s per chip).
RUNG_SLICES = tuple(s for s in SLICES if s.devices == 8) + (
    Slice('TPU v4-32', 32, 16.0, 137.5, 'v4:2x2x4'),)
RUNG_HEADING = '## The ImageNet-1k rung'
# Peak-memory columns: the config's overrides for each (the base columns are the configs' float32
# model with bfloat16 dispatch).
# Where the rung's RandAugment runs (data.augment_on): the host's tf.data, or the jitted step on the
# accelerator; the rung section plans each slice on both, the paper configs set 'device'.
AUGMENT_PATHS = ('host', 'device')
PRECISIONS = {
    'bf16': {'model.dtype': 'bfloat16'},
    'remat': {'model.remat': True},
}


def paper_config(variant: str, router: str = ROUTER):
  """The paper's config of `variant` x `router` at c = 1 (configs/common.py)."""
  return common.get_paper_config(variant, router, 'c=1')


def rung_config(augment_on: str | None = None):
  """The ImageNet-1k rung's published cell: V-MoE's S/32 recipe, softmax_tc at k = 2, c = 1.05;
  its augmentation on `augment_on` (AUGMENT_PATHS) where given, else on the config's own."""
  config = ilsvrc_s32_vmoe.get_config()
  return config if augment_on is None else common.override(config, {'data.augment_on': augment_on})


def device_bytes(tree, shardings) -> int:
  """Bytes one device holds of an abstract tree laid out with `shardings`."""
  return int(sum(np.prod(s.shard_shape(a.shape)) * a.dtype.itemsize
                 for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings))))


def measure(config, devices) -> dict:
  """Compiles `config`'s train step at config.batch_size over `devices` (CPU devices, or TPU
  devices of a topology); the per-device counters."""
  experiment = experiment_lib.parse(config, num_devices=len(devices))   # Resolves the mesh.
  data, expert = experiment.mesh.data, experiment.mesh.expert
  setup = train_program.build(experiment, sharding.make_mesh(experiment.mesh, devices))
  state, state_shardings = setup.abstract_state, setup.state_shardings
  start = time.process_time()
  compiled = setup.compile(fast_compile.OPTIONS if devices[0].platform == 'cpu' else None)
  memory = compiled.memory_analysis()
  params = jax.tree.leaves(state.params)
  return {
      'mesh': (data, expert),
      'batch_per_device': experiment.batch_size // len(devices),
      'num_params': int(sum(np.prod(p.shape) for p in params)),
      'param_bytes_total': int(sum(np.prod(p.shape) * p.dtype.itemsize for p in params)),
      'param_bytes': device_bytes(state.params, state_shardings.params),
      'optimizer_bytes': device_bytes(state.opt_state, state_shardings.opt_state),
      'argument_bytes': memory.argument_size_in_bytes,
      'temp_bytes': memory.temp_size_in_bytes,
      'flops_per_device': flops.compiled_flops(compiled),
      'compile_cpu_seconds': time.process_time() - start,
  }


def slice_devices(slice_: Slice, cpu_devices, tpu: bool) -> list:
  """The devices to compile `slice_`'s program for: its TPU topology's, or simulated CPUs."""
  return tpu_compiler.devices(slice_.tpu_topology) if tpu else cpu_devices[:slice_.devices]


# The sources a compiled step is made from (tests aside), relative to the repository's root:
# data/ holds the pp's tail that the device path compiles into the step.
PROGRAM_SOURCES = ('vmoe/**/*.py', 'configs/*.py', 'base/*.py', 'data/**/*.py')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def program_digest(config) -> str:
  """12 hex digits of sha256 over the resolved `config`, jax's and jaxlib's versions and the
  model code (PROGRAM_SOURCES without tests): the cache key's part that changes whenever the
  compiled program can."""
  digest = hashlib.sha256(config.to_json_best_effort(sort_keys=True).encode())
  digest.update(f'jax {jax.__version__} jaxlib {jax.lib.__version__}'.encode())
  for pattern in PROGRAM_SOURCES:
    for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
      if not path.endswith('_test.py'):
        with open(path, 'rb') as f:
          digest.update(os.path.relpath(path, ROOT).encode() + f.read())
  return digest.hexdigest()[:12]


def cache_path(cache_dir: str, key: str) -> str:
  """The file in cache_dir that holds the counters of the program named `key`."""
  return os.path.join(cache_dir, re.sub(r'[^A-Za-z0-9.=+-]', '_', key) + '.json')


def cached(cache_dir: str | None, key: str, compute) -> dict:
  """compute()'s dict, saved once per `key` in cache_dir (atomically) and read back from there by
  any later or concurrent run: a killed plan resumes, and a slice that compiles the same program
  as another (8x H100 and 8x A100 on one stand-in topology) reuses it. None: no cache."""
  if cache_dir is None:
    return compute()
  path = cache_path(cache_dir, key)
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  value = compute()
  atomic.write_json(path, value)
  return value


def _compiler(slice_: Slice, devices) -> str:
  return f'XLA:TPU {slice_.tpu_topology}' if devices[0].platform == 'tpu' else 'XLA:CPU'


def _router(config) -> str:
  return config.moe.router.name if config.moe.router else declarations.DENSE


def programs(config, slice_: Slice, devices, precisions: tuple[str, ...] = ()) -> list[tuple]:
  """The programs a plan row compiles on `devices` (the slice's): (cache key, config) of the
  config itself, then of its variant under each of `precisions` (PRECISIONS names). A key names
  the program: its arch, router, compiler, device count, augmentation path and program_digest."""
  key = (f'{config.model.variant}-{_router(config)}-{_compiler(slice_, devices)}-{len(devices)}-'
         f'{config.data.augment_on}')
  variants = [(f'-{name}', common.override(config.copy_and_resolve_references(), PRECISIONS[name]))
              for name in precisions]
  return [(f'{key}{suffix}-{program_digest(c)}', c) for suffix, c in [('', config), *variants]]


def plan_row(config, slice_: Slice, devices, precisions: tuple[str, ...] = (),
             cache_dir: str | None = None) -> dict:
  """`measure` on a slice's `devices`, with the totals a user sizes a run by, and the peak bytes
  per device under each of `precisions` (PRECISIONS names) in row['precision_peak_bytes'];
  measurements are `cached` in cache_dir."""
  devices = devices[:slice_.devices]
  (key, _), *variants = programs(config, slice_, devices, precisions)
  row = {'arch': config.model.variant, 'router': _router(config), 'slice': slice_.name,
         'compiler': _compiler(slice_, devices), 'augment_on': config.data.augment_on,
         **cached(cache_dir, key, lambda: measure(config, devices))}
  row['peak_bytes'] = row['argument_bytes'] + row['temp_bytes']
  row['fits'] = row['peak_bytes'] <= slice_.memory_gib * GIB
  row['precision_peak_bytes'] = {}
  for name, (other_key, other_config) in zip(precisions, variants):
    other = cached(cache_dir, other_key, lambda c=other_config: measure(c, devices))
    row['precision_peak_bytes'][name] = other['argument_bytes'] + other['temp_bytes']
  row['flops_per_step'] = row['flops_per_device'] * slice_.devices
  row['ideal_step_seconds'] = row['flops_per_device'] / (slice_.peak_tflops * 1e12)
  row['ideal_days'] = row['ideal_step_seconds'] * config.num_train_steps / 86_400
  return row


def _gib(num_bytes: float) -> str:
  return f'{num_bytes / GIB:.2f}'


def plan_table(rows: list[dict], steps: int, unit: str = 'days') -> list[str]:
  """The Markdown table of plan rows: where each row's augmentation runs (data.augment_on),
  memory in GiB per device, the peak under each precision of the first row, and the ideal time of
  `steps` steps in `unit` ('days', or 'hours' to 0.01)."""
  precisions = list(rows[0].get('precision_peak_bytes', {})) if rows else []
  per_day, digits = {'days': (1, 1), 'hours': (24, 2)}[unit]
  lines = [
      '| model | slice | compiler | augment_on | '
      'mesh data x expert | images / device | parameters | Adam moments | '
      'arguments | temporary | peak | ' + ''.join(f'peak, {p} | ' for p in precisions) +
      'device memory | fits | TFLOPs / step | ideal ms / step | '
      f'ideal {unit}, {steps:,} steps |',
      '|' + ' --- |' * (16 + len(precisions))]
  memory = {s.name: s.memory_gib for s in SLICES + RUNG_SLICES}
  for r in rows:
    lines.append(
        f"| {r['arch']} | {r['slice']} | {r['compiler']} | {r['augment_on']} | "
        f"{r['mesh'][0]} x {r['mesh'][1]} | "
        f"{r['batch_per_device']} | {_gib(r['param_bytes'])} | {_gib(r['optimizer_bytes'])} | "
        f"{_gib(r['argument_bytes'])} | {_gib(r['temp_bytes'])} | {_gib(r['peak_bytes'])} | " +
        ''.join(f"{_gib(r['precision_peak_bytes'][p])} | " for p in precisions) +
        f"{memory.get(r['slice'], float('nan')):g} | {'yes' if r['fits'] else '**no**'} | "
        f"{r['flops_per_step'] / 1e12:.0f} | {1e3 * r['ideal_step_seconds']:.0f} | "
        f"{r['ideal_days'] * per_day:.{digits}f} |")
  return lines


def _parameters_line(row: dict) -> str:
  return (f"- {row['arch']}: {row['num_params'] / 1e6:,.0f} M parameters, "
          f"{_gib(row['param_bytes_total'])} GiB; with Adam {_gib(3 * row['param_bytes_total'])} "
          'GiB.')


def augmentation_sentence(config) -> str:
  """Where `config`'s training pp runs (data.augment_on), said with its host ops and its tail."""
  pp = config.data.pp_train
  cut = device_split.tail_on_device(pp, config.data.augment_on)
  if cut is None:
    return (f'The configs run `data.augment_on = {config.data.augment_on}`: the whole training pp, '
            f'`{pp}`, runs in the input pipeline on the host.')
  head = '|'.join(op.spec for op in pp_syntax.parse(pp)[:cut.head_length])
  tail = '|'.join(op.spec for op in cut.tail)
  return ('The paper configs run `data.augment_on = device` (*augment_on*): the host decodes '
          f'and crops (`{head}`) and ships uint8 images, and the jitted step runs the pp\'s tail, '
          f'`{tail}`, on the accelerator, so its temporaries are in the peak.')


def to_markdown(rows: list[dict], router_rows: list[dict], command: str, config) -> str:
  """docs/scaling.md up to the rung's section: the plan table of the paper's `config` (the first
  arch's) and its kin, the router comparison and how they were made."""
  precisions = list(rows[0].get('precision_peak_bytes', {})) if rows else []
  lines = [
      '# Scaling plan: memory and FLOPs per device', '',
      f'Generated by `{command}` (XLA counters of the compiled sharded train step; see '
      '`launch/plan.py` for the method and its caveats). Global batch 4096, E = 32 experts, '
      f'{ROUTER} at c = 1, float32 parameters, Adam; the configs\' float32 model with bfloat16 '
      'dispatch, and the peak under each of ' + (', '.join(precisions) or 'no other precision') +
      ' (`--config.model.dtype=bfloat16`, `--config.model.remat=True`); memory in GiB per device. '
      + augmentation_sentence(config), '', *plan_table(rows, config.num_train_steps)]
  lines += ['', 'Reading the table: *arguments* is the device\'s share of the train state '
            '(parameters, Adam moments) and of the batch; *temporary* holds the activations kept '
            'for the backward pass, the gradients and the all-to-all buffers; *peak* is their '
            'sum, since the new state overwrites the donated old one. *compiler* says whose '
            'counters they are: XLA:TPU for the slice\'s topology (a TPU v5p stand-in for the '
            'GPU slices, whose XLA:GPU cannot compile without a GPU) already rematerialises what '
            'would not fit its chip; XLA:CPU (`--no-tpu-compiler`) never does and computes '
            'bfloat16 matmuls in float32, so its figures are upper bounds. A **no** means the '
            'step does not fit: use more devices (fewer images each), or remat. Ideal times '
            'assume the '
            'device\'s peak FLOP/s: real steps are slower (routing, all-to-all, input).', '',
            'Parameters in total (all experts; mesh.expert=1 would hold them, and twice as '
            'much again in Adam moments, on every device):', '']
  lines += [_parameters_line(r) for r in rows if r['slice'] == SLICES[0].name]
  if router_rows:
    lines += ['', f'Routers: {router_rows[0]["arch"]} on {router_rows[0]["slice"]}, c = 1 '
              '(k = 1 for token choice). Parameters and Adam moments hardly depend on the router: '
              'its own weights are a few D x E matrices.', '',
              '| router | temporary | peak | TFLOPs / step |', '| --- | --- | --- | --- |']
    for r in router_rows:
      lines.append(f"| {r['router']} | {_gib(r['temp_bytes'])} | {_gib(r['peak_bytes'])} | "
                   f"{r['flops_per_step'] / 1e12:.0f} |")
  return '\n'.join(lines) + '\n'


def path_ratios(rows: list[dict]) -> list[str]:
  """A line per slice of `rows` measured on both AUGMENT_PATHS: the device path's peak over the
  host path's."""
  peaks = {(r['slice'], r['augment_on']): r['peak_bytes'] for r in rows}
  slices = dict.fromkeys(r['slice'] for r in rows)
  return [f"- {s}: peak {_gib(peaks[s, 'device'])} GiB on the device path, "
          f"{_gib(peaks[s, 'host'])} on the host path: "
          f"{peaks[s, 'device'] / peaks[s, 'host']:.2f}x."
          for s in slices if (s, 'device') in peaks and (s, 'host') in peaks]


def rung_section(rows: list[dict], command: str, config) -> str:
  """docs/scaling.md's last section: the rung's published cell `config` on RUNG_SLICES, a row
  per slice and augmentation path (`rows`' augment_on), and the device path's peak against the
  host path's."""
  router = config.moe.router
  lines = [
      RUNG_HEADING, '',
      f'Generated by `{command}`: `configs/ilsvrc_s32_vmoe.py`, V-MoE\'s published cell '
      f'({config.model.variant}, E = {config.moe.num_experts} experts, "Last '
      f'{config.moe.last}": MoE layers in the last {config.moe.last} of every other block, '
      f'{router.name} with k = {router.num_selected_experts} at c = '
      f'{router.capacity_factor:g}), global batch {config.batch_size:,}, on one 8-GPU node '
      '(the TPU v5p stand-in of the table above) and on a TPU v4-32. The columns read as above; '
      'the ideal time is of the cell\'s own steps, in hours. '
      '[`accelerators.md`](accelerators.md) turns it into the cost of a run and of the grid. '
      '*augment_on* is where RandAugment runs (`--config.data.augment_on`): `host`, in the '
      'input pipeline on the CPUs, or `device`, the pp\'s tail in the jitted step on the '
      'accelerator ([`data.md`](data.md)), whose temporaries add to the peak. The rung\'s '
      f'config runs `{config.data.augment_on}`, as the paper configs do.',
      '', *plan_table(rows, config.num_train_steps, unit='hours'), '']
  lines += path_ratios(rows)
  lines += [_parameters_line(r) for r in rows[:1]]
  return '\n'.join(lines) + '\n'


def with_rung_section(text: str, section: str) -> str:
  """`text` (a scaling page, or '') with its rung section, from RUNG_HEADING to the end, replaced
  by `section`; appended where it has none."""
  start = text.find(RUNG_HEADING)
  head = (text if start < 0 else text[:start]).rstrip('\n')
  return f'{head}\n\n{section}' if head else section


def requests(archs: list[str], precisions: tuple[str, ...], routers, rung_only: bool) -> dict:
  """The plan's rows, by section, as requests: 'rung' (the rung's cell on RUNG_SLICES on each of
  AUGMENT_PATHS), and unless rung_only 'paper' (each of archs on SLICES) and 'routers' (B/32 on
  SLICES[ROUTER_SLICE] with each of routers; ROUTER's program is the paper row's)."""
  sections = {'rung': [(rung_config(path), s, precisions)
                       for s in RUNG_SLICES for path in AUGMENT_PATHS]}
  if not rung_only:
    sections['paper'] = [(paper_config(a), s, precisions) for a in archs for s in SLICES]
    sections['routers'] = [(paper_config(published.ARCHS[0], r), SLICES[ROUTER_SLICE], ())
                           for r in routers]
  return sections


def jobs(sections: dict, devices_of) -> list[tuple]:
  """Every distinct program of the requests in `sections` as (key, config, devices), the largest
  models first (a worker that takes the last job then waits least): devices_of(slice) are the
  slice's devices."""
  found = {}
  for config, slice_, precisions in sorted(
      (r for rows in sections.values() for r in rows),
      key=lambda r: -published.ARCHS.index(r[0].model.variant)
      if r[0].model.variant in published.ARCHS else 1):
    devices = devices_of(slice_)[:slice_.devices]
    for key, program in programs(config, slice_, devices, precisions):
      found.setdefault(key, (key, program, devices))
  return list(found.values())


# Programs that a worker compiles alone where the host has less memory than two of them need:
# L/16's compiles held up to 13.5 GiB (on a v3-128 with remat, and on the 8-device stand-in), and
# two at once were killed for memory on a 24 GiB host; B/32's and B/16's ran two at a time.
HEAVY_ARCHS = ('L/16',)
HEAVY_BYTES = 14 * GIB


def memory_total() -> int | None:
  """The host's memory (/proc/meminfo MemTotal), or None where it cannot be read."""
  try:
    return host.meminfo_bytes(host.read_text('/proc/meminfo') or '', 'MemTotal')
  except ValueError:
    return None


def compiles_alone(config) -> bool:
  """Whether `config`'s program is compiled with no other beside it on this host."""
  total = memory_total()
  return config.model.variant in HEAVY_ARCHS and total is not None and total < 2 * HEAVY_BYTES


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def others_compiling(cache_dir: str, claims_dir: str) -> list[bool]:
  """For each program another live worker has claimed and not cached yet: whether it compiles
  alone."""
  found = []
  for name in os.listdir(claims_dir):
    if os.path.exists(os.path.join(cache_dir, name)):
      continue
    with open(os.path.join(claims_dir, name), encoding='utf-8') as f:
      pid, _, mode = f.read().partition(' ')
    if pid and int(pid) != os.getpid() and _alive(int(pid)):
      found.append(mode == 'alone')
  return found


def may_start(alone: bool, others: list[bool]) -> bool:
  """Whether a program that compiles `alone` may start beside the `others` (others_compiling):
  alone, when none compiles; any other, when none compiles alone."""
  return not (others if alone else any(others))


def claim(claims_dir: str, name: str, alone: bool = False) -> bool:
  """Claims the program cached as `name` for this process: an exclusive file holding its pid and
  whether it compiles alone."""
  try:
    fd = os.open(os.path.join(claims_dir, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
  except FileExistsError:
    return False
  with os.fdopen(fd, 'w', encoding='utf-8') as f:
    f.write(f"{os.getpid()} {'alone' if alone else 'shared'}")
  return True


def work(todo: list[tuple], cache_dir: str, claims_dir: str, poll_seconds: float = 5.0) -> int:
  """One worker's share of `todo` (jobs()): it measures into the cache, one at a time, the first
  program in order that is neither cached nor claimed (claim) and that may start beside what the
  other workers compile (may_start), waiting while none may; it stops when none is left. The
  number measured."""
  done = 0
  while True:
    left = [job for job in todo if not os.path.exists(cache_path(cache_dir, job[0])) and
            not os.path.exists(os.path.join(claims_dir, os.path.basename(
                cache_path(cache_dir, job[0]))))]
    if not left:
      return done
    others = others_compiling(cache_dir, claims_dir)
    startable = [job for job in left if may_start(compiles_alone(job[1]), others)]
    if not startable:
      time.sleep(poll_seconds)
      continue
    key, config, devices = startable[0]
    alone = compiles_alone(config)
    if claim(claims_dir, os.path.basename(cache_path(cache_dir, key)), alone):
      row = cached(cache_dir, key, lambda c=config, d=devices: measure(c, d))
      done += 1
      print(f"{key}: {row['compile_cpu_seconds']:.0f} CPU-s", flush=True)


def run_workers(argv: list[str], count: int, cache_dir: str, respawns: int = 4) -> list[int]:
  """`count` processes of this plan (`argv`) with --claims, which fill cache_dir between them;
  their exit codes. One that dies (killed for memory) is replaced, up to `respawns` times: the
  program it held stays claimed, for this process to compile alone afterwards. The claims go
  with them: a killed plan's unfinished programs are free again."""
  os.makedirs(cache_dir, exist_ok=True)
  claims_dir = tempfile.mkdtemp(prefix='claims-', dir=cache_dir)
  # In this process's directory, where argv's relative paths point, with the repository importable.
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join(
      p for p in (ROOT, os.environ.get('PYTHONPATH')) if p)}

  def start():
    return subprocess.Popen([sys.executable, '-m', 'launch.plan', *argv, '--claims', claims_dir],
                            env=env)
  try:
    workers, codes = [start() for _ in range(count)], []
    while workers:
      time.sleep(1)
      for worker in [w for w in workers if w.poll() is not None]:
        workers.remove(worker)
        codes.append(worker.returncode)
        if worker.returncode and respawns:
          respawns -= 1
          workers.append(start())
    return codes
  finally:
    shutil.rmtree(claims_dir, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
  """The command line of `main`."""
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', default='docs/scaling.md', help='Markdown file to (re)write.')
  parser.add_argument('--no-routers', action='store_true', help='Skip the router comparison.')
  parser.add_argument('--no-precisions', action='store_true',
                      help='Skip the bfloat16 and remat columns (PRECISIONS).')
  parser.add_argument('--archs', default=','.join(published.ARCHS),
                      help='Comma-separated subset of the paper\'s architectures (the table lists '
                      'these only).')
  parser.add_argument('--cache-dir', default='workdirs/plan',
                      help='Where each compiled program\'s counters are kept: a killed or '
                      'concurrent plan reuses them (delete it after changing the model).')
  parser.add_argument('--no-tpu-compiler', action='store_true',
                      help='Compile every slice for simulated CPU devices (XLA:CPU) instead of '
                      'with libtpu (launch/tpu_compiler.py).')
  parser.add_argument('--rung-only', action='store_true',
                      help='Compile the ImageNet-1k rung\'s rows alone (RUNG_SLICES) and rewrite '
                      'only their section of --out, keeping the rest of the file as it is.')
  parser.add_argument('--jobs', type=int, default=1,
                      help='Processes that compile the programs (one a CPU core): they share '
                      '--cache-dir, taking each program once, then this one writes --out.')
  parser.add_argument('--claims', help=argparse.SUPPRESS)   # A worker of --jobs: fill the cache.
  return parser


def main(argv=None) -> int:
  parser = _parser()
  argv = sys.argv[1:] if argv is None else list(argv)
  args = parser.parse_args(argv)
  tpu = not args.no_tpu_compiler
  if tpu and not tpu_compiler.available():
    parser.error(f'{tpu_compiler.MISSING}, or pass --no-tpu-compiler.')
  cpu_devices = jax.devices()
  if not tpu and (len(cpu_devices) < max(s.devices for s in SLICES) or
                  CPU_SCHEDULER_FLAG not in os.environ.get('XLA_FLAGS', '')):
    parser.error(f'{len(cpu_devices)} devices; run as `python -m launch.plan`, which asks XLA '
                 'for 256 simulated CPU devices and its memory scheduler before jax starts.')
  archs = [a for a in args.archs.split(',') if a]
  if not set(archs) <= set(published.ARCHS):
    parser.error(f'--archs: valid values are {", ".join(published.ARCHS)}')
  if args.jobs < 1:
    parser.error(f'--jobs {args.jobs}: give at least 1 process.')
  precisions = () if args.no_precisions else tuple(PRECISIONS)
  routers = () if args.no_routers else router_lib.PAPER_ROUTERS
  sections = requests(archs, precisions, routers, args.rung_only)

  def devices_of(slice_):
    return slice_devices(slice_, cpu_devices, tpu)

  if args.claims:
    work(jobs(sections, devices_of), args.cache_dir, args.claims)
    return 0
  if args.jobs > 1:
    codes = run_workers(argv, args.jobs, args.cache_dir)
    if any(codes):
      print(f'workers exited with {codes}: what they left uncompiled is compiled here.',
            flush=True)

  def rows_of(section: str) -> list[dict]:
    rows = []
    for config, slice_, row_precisions in sections[section]:
      rows.append(plan_row(config, slice_, devices_of(slice_), row_precisions, args.cache_dir))
      print(f"{config.model.variant} {_router(config)} {slice_.name} {config.data.augment_on}: "
            f"peak {_gib(rows[-1]['peak_bytes'])} GiB "
            f"({rows[-1]['compile_cpu_seconds']:.0f} CPU-s)", flush=True)
    return rows

  command = 'python -m launch.plan' + ''.join(f' {shlex.quote(a)}' for a in argv)
  rung_text = rung_section(rows_of('rung'), command, rung_config())
  if args.rung_only:
    previous = ''
    if os.path.exists(args.out):
      with open(args.out, encoding='utf-8') as f:
        previous = f.read()
    atomic.write_text(args.out, with_rung_section(previous, rung_text))
  else:
    paper_text = to_markdown(rows_of('paper'), rows_of('routers'), command,
                             paper_config(published.ARCHS[0]))
    atomic.write_text(args.out, with_rung_section(paper_text, rung_text))
  print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
