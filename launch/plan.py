"""Memory and time plan: per-device memory and FLOPs of the paper's models on common slices.

  nice -n 19 .venv/bin/python -m launch.plan --out docs/scaling.md   # ~13 CPU-minutes x 4 (estimated)
  nice -n 19 .venv/bin/python -m launch.plan --no-precisions --out /tmp/scaling.md   # ~13

For B/32, B/16 and L/16 with E = 32 experts (softmax_ec, c = 1) at the paper's batch of 4096, on
each slice of SLICES, this compiles the real sharded train step (the trainer's: mixup, loss,
gradients, Adam update; state donated) for that many simulated CPU devices on a mesh
data x expert with expert = gcd(devices, E) (every expert on one device when there are at least E
devices), and reads XLA's own counters of the per-device program:
  arguments  memory_analysis().argument_size_in_bytes: the device's share of the train state
             (parameters and Adam's two moments, expert weights split over 'expert') and batch;
  temporary  memory_analysis().temp_size_in_bytes: activations kept for the backward pass,
             gradients, the all-to-all buffers, every other intermediate at the peak;
  FLOPs      cost_analysis()['flops'] (vmoe/flops.py: what XLA counts) of the per-device program.
The outputs (the new state) alias the donated arguments, so a device needs arguments + temporary.
Parameter and optimizer bytes come from the state's shapes and shardings. The same step is
compiled again under each of PRECISIONS (bfloat16 compute, remat, both) for the peak per device
of each: parameters and Adam moments stay float32, so what changes is the temporary memory.

Caveats: the buffer assignment is XLA:CPU's. XLA:TPU and XLA:GPU fuse differently, and they
rematerialise activations when a program would not otherwise fit, which XLA:CPU never does, so
the temporary column is the program as written, an upper bound rather than a prediction. The
ideal step time divides the device's FLOPs by its peak: float32 matmuls run as bfloat16 passes on
TPU and as TF32 on A100 by default (jax-ml/jax#18934), so the peaks are those; real runs reach a
fraction of it (MoE routing, all-to-all and the input pipeline are not in the FLOPs).
"""
import argparse
import dataclasses
import math
import os
import shlex
import sys
import time

if __name__ == '__main__':   # XLA reads this when jax starts: devices for the largest slice.
  os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=256'
  os.environ['JAX_PLATFORMS'] = 'cpu'

import jax   # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np   # pylint: disable=wrong-import-position

from base import atomic   # pylint: disable=wrong-import-position
from base import fast_compile   # pylint: disable=wrong-import-position
from configs import common   # pylint: disable=wrong-import-position
from configs import experiment as experiment_parser   # pylint: disable=wrong-import-position
from vmoe import flops   # pylint: disable=wrong-import-position
from vmoe import setup as setup_lib   # pylint: disable=wrong-import-position
from vmoe import sharding   # pylint: disable=wrong-import-position
from vmoe.routing import router as router_lib   # pylint: disable=wrong-import-position

GIB = 2 ** 30
VARIANTS = ('B/32', 'B/16', 'L/16')
ROUTER = 'softmax_ec'
ROUTER_SLICE = 0     # The router comparison runs B/32 on SLICES[0].


@dataclasses.dataclass(frozen=True)
class Slice:
  """A set of accelerators: how many JAX devices, and each one's memory and peak FLOP/s."""
  name: str
  devices: int
  memory_gib: float
  peak_tflops: float


# A v3 chip has 2 TensorCores (2 JAX devices), 32 GiB of HBM and 123 bf16 TFLOP/s
# (cloud.google.com/tpu/docs/v3); an A100 80GB has 80 GiB and 156 TF32 TFLOP/s (dense).
SLICES = (
    Slice('TPU v3-32', 32, 16.0, 61.5),
    Slice('TPU v3-128', 128, 16.0, 61.5),
    Slice('TPU v3-256', 256, 16.0, 61.5),
    Slice('8x A100 80GB', 8, 80.0, 156.0),
    Slice('64x A100 80GB', 64, 80.0, 156.0),
    Slice('8x H100 80GB', 8, 80.0, 494.5),     # H100 SXM: 494.5 dense TF32 TFLOP/s.
)
# Peak-memory columns: the config's overrides for each (the base columns are the configs' float32
# model with bfloat16 dispatch).
PRECISIONS = {
    'bf16': {'model.dtype': 'bfloat16'},
    'remat': {'model.remat': True},
    'bf16 + remat': {'model.dtype': 'bfloat16', 'model.remat': True},
}


def paper_config(variant: str, router: str = ROUTER):
  """The paper's config of `variant` x `router` at c = 1 (configs/common.py)."""
  return common.get_paper_config(variant, router, 'c=1')


def mesh_shape(num_devices: int, num_experts: int) -> tuple[int, int]:
  """(data, expert): the expert axis as long as both the device and the expert count allow."""
  expert = math.gcd(num_devices, num_experts)
  return num_devices // expert, expert


def device_bytes(tree, shardings) -> int:
  """Bytes one device holds of an abstract tree laid out with `shardings`."""
  return int(sum(np.prod(s.shard_shape(a.shape)) * a.dtype.itemsize
                 for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings))))


def measure(config, devices) -> dict:
  """Compiles `config`'s train step at config.batch_size over `devices`; per-device counters."""
  experiment = experiment_parser.parse(config, num_devices=len(devices))
  data, expert = mesh_shape(len(devices), experiment.moe.num_experts)
  setup = setup_lib.build(experiment, sharding.make_mesh(sharding.MeshConfig(data, expert),
                                                         devices))
  state, state_shardings = setup.abstract_state, setup.state_shardings
  start = time.process_time()
  compiled = setup.compile(fast_compile.OPTIONS)
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


def plan_row(config, slice_: Slice, devices, precisions: tuple[str, ...] = ()) -> dict:
  """`measure` on a slice, with the totals a user sizes a run by, and the peak bytes per device
  under each of `precisions` (PRECISIONS names) in row['precision_peak_bytes']."""
  row = {'arch': config.model.variant, 'router': config.moe.router.name, 'slice': slice_.name,
         **measure(config, devices[:slice_.devices])}
  row['peak_bytes'] = row['argument_bytes'] + row['temp_bytes']
  row['fits'] = row['peak_bytes'] <= slice_.memory_gib * GIB
  row['precision_peak_bytes'] = {}
  for name in precisions:
    other = measure(common.override(config.copy_and_resolve_references(), PRECISIONS[name]),
                    devices[:slice_.devices])
    row['precision_peak_bytes'][name] = other['argument_bytes'] + other['temp_bytes']
  row['flops_per_step'] = row['flops_per_device'] * slice_.devices
  row['ideal_step_seconds'] = row['flops_per_device'] / (slice_.peak_tflops * 1e12)
  row['ideal_days'] = row['ideal_step_seconds'] * config.num_train_steps / 86_400
  return row


def _gib(num_bytes: float) -> str:
  return f'{num_bytes / GIB:.2f}'


def to_markdown(rows: list[dict], router_rows: list[dict], command: str, steps: int) -> str:
  """docs/scaling.md: the plan table, the router comparison and how they were made."""
  precisions = list(rows[0].get('precision_peak_bytes', {})) if rows else []
  lines = [
      '# Scaling plan: memory and FLOPs per device', '',
      f'Generated by `{command}` (XLA counters of the compiled sharded train step; see '
      '`launch/plan.py` for the method and its caveats). Global batch 4096, E = 32 experts, '
      f'{ROUTER} at c = 1, float32 parameters, Adam; the configs\' float32 model with bfloat16 '
      'dispatch, and the peak under each of ' + (', '.join(precisions) or 'no other precision') +
      ' (`--config.model.dtype=bfloat16`, `--config.model.remat=True`); memory in GiB per device.',
      '', '| model | slice | mesh data x expert | images / device | parameters | Adam moments | '
      'arguments | temporary | peak | ' + ''.join(f'peak, {p} | ' for p in precisions) +
      'device memory | fits | TFLOPs / step | ideal ms / step | '
      f'ideal days, {steps:,} steps |',
      '|' + ' --- |' * (14 + len(precisions))]
  memory = {s.name: s.memory_gib for s in SLICES}
  for r in rows:
    lines.append(
        f"| {r['arch']} | {r['slice']} | {r['mesh'][0]} x {r['mesh'][1]} | "
        f"{r['batch_per_device']} | {_gib(r['param_bytes'])} | {_gib(r['optimizer_bytes'])} | "
        f"{_gib(r['argument_bytes'])} | {_gib(r['temp_bytes'])} | {_gib(r['peak_bytes'])} | " +
        ''.join(f"{_gib(r['precision_peak_bytes'][p])} | " for p in precisions) +
        f"{memory.get(r['slice'], float('nan')):g} | {'yes' if r['fits'] else '**no**'} | "
        f"{r['flops_per_step'] / 1e12:.0f} | {1e3 * r['ideal_step_seconds']:.0f} | "
        f"{r['ideal_days']:.1f} |")
  lines += ['', 'Reading the table: *arguments* is the device\'s share of the train state '
            '(parameters, Adam moments) and of the batch; *temporary* holds the activations kept '
            'for the backward pass, the gradients and the all-to-all buffers; *peak* is their '
            'sum, since the new state overwrites the donated old one. XLA:CPU never '
            'rematerialises, so a **no** means the program as written does not fit: use more '
            'devices (fewer images each), or let the TPU/GPU compiler rematerialise, and check '
            'its memory_analysis() of the step on the device itself. Ideal times assume the '
            'device\'s peak FLOP/s: real steps are slower (routing, all-to-all, input).', '',
            'Parameters in total (all experts; mesh.expert=1 would hold them, and twice as '
            'much again in Adam moments, on every device):', '']
  for r in rows:
    if r['slice'] == SLICES[0].name:
      lines.append(f"- {r['arch']}: {r['num_params'] / 1e6:,.0f} M parameters, "
                   f"{_gib(r['param_bytes_total'])} GiB; with Adam "
                   f"{_gib(3 * r['param_bytes_total'])} GiB.")
  if router_rows:
    lines += ['', f'Routers: {router_rows[0]["arch"]} on {router_rows[0]["slice"]}, c = 1 '
              '(k = 1 for token choice). Parameters and Adam moments hardly depend on the router: '
              'its own weights are a few D x E matrices.', '',
              '| router | temporary | peak | TFLOPs / step |', '| --- | --- | --- | --- |']
    for r in router_rows:
      lines.append(f"| {r['router']} | {_gib(r['temp_bytes'])} | {_gib(r['peak_bytes'])} | "
                   f"{r['flops_per_step'] / 1e12:.0f} |")
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', default='docs/scaling.md', help='Markdown file to (re)write.')
  parser.add_argument('--no-routers', action='store_true', help='Skip the router comparison.')
  parser.add_argument('--no-precisions', action='store_true',
                      help='Skip the bfloat16 and remat columns (PRECISIONS).')
  args = parser.parse_args(argv)
  devices = jax.devices()
  if len(devices) < max(s.devices for s in SLICES):
    raise SystemExit(f'{len(devices)} devices; run as `python -m launch.plan`, which asks XLA '
                     'for 256 simulated CPU devices before jax starts.')
  rows = []
  for variant in VARIANTS:
    for slice_ in SLICES:
      rows.append(plan_row(paper_config(variant), slice_, devices,
                           () if args.no_precisions else tuple(PRECISIONS)))
      print(f"{variant} {slice_.name}: peak {_gib(rows[-1]['peak_bytes'])} GiB "
            f"({rows[-1]['compile_cpu_seconds']:.0f} CPU-s)", flush=True)
  router_rows = []
  routers = () if args.no_routers else router_lib.PAPER_ROUTERS
  for router in routers:   # B/32 on SLICES[ROUTER_SLICE].
    same = router == ROUTER
    router_rows.append(rows[ROUTER_SLICE] if same else plan_row(
        paper_config(VARIANTS[0], router), SLICES[ROUTER_SLICE], devices))
  command = 'python -m launch.plan' + ''.join(f' {shlex.quote(a)}' for a in (argv or sys.argv[1:]))
  atomic.write_text(args.out, to_markdown(rows, router_rows, command,
                                          paper_config(VARIANTS[0]).num_train_steps))
  print(f'wrote {args.out}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
