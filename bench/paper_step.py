"""The paper models' training step, measured: B/32, B/16 and L/16 x router x dtype (a benchmark).

  python -m bench.paper_step --out bench/results/paper_step.json        # the grid, as `make bench`
  python -m bench.paper_step --archs B/32 --routers dense,soft_moe --dtypes bfloat16 --rounds 3

Each row is the trainer's step of a paper config (configs/common.py get_paper_config at c = 1;
'dense' is the same ViT without MoE layers), built by vmoe/setup.py, compiled ahead of time, on a
synthetic batch put on the devices once. dtype 'float32' is the configs' default (float32 model,
bfloat16 dispatch: V-MoE's); 'bfloat16' is --config.model.dtype=bfloat16.

Timing: every step of the grid is compiled first; then `--rounds` rounds visit the rows in turn,
each timing `--steps` steps after `--warmup` untimed ones on the round's fresh state (a training
run's steady state; the first of them is first_step_ms); step_ms is the median over rounds. One
train state is alive at a time (a row's state is created before its turn and
dropped after), so L/16 fits on a host that could not hold the grid's states together.
Fields of a row: arch, router, dtype, dispatch_dtype, per_device_batch, num_experts, mesh, remat,
step_ms, images_per_second, flops_per_image (XLA's cost analysis of the compiled per-device step:
vmoe/flops.py says what it counts), mfu (achieved FLOP/s over the devices' peak, `peak_flops`),
peak_memory_bytes (the compiled step's memory analysis: arguments + temporaries, the outputs
aliasing the donated state), update_ms (the optimizer's update alone, timed in the same rounds:
per-parameter work), first_step_ms (the first step on a fresh state: on XLA:CPU it also faults
in the memory the step touches), and, for MoE rows, vs_dense (step time over the dense row of the same arch
and dtype), flops_vs_dense, update_share_of_extra (the MoE update's extra ms over the MoE step's
extra ms) and, for Soft MoE, vs_flops_scaled_dense (vs_dense over flops_vs_dense). The issue's
targets: sparse routers <= 1.15x dense, Soft MoE <= 1.1x the FLOPs-scaled dense step.

Defaults: on accelerators the recipe's per-device batch (4096 over the devices), E = 32 experts
and mesh.expert = gcd(devices, 32). On CPU (one device) 8 images (one routing group: the smallest
batch the recipe routes) and E = 4 experts: one device's share of E = 32 on an 8-way expert mesh,
so that a device holds and computes what it would on an 8-GPU node (without the all-to-all);
L/16 with E = 32 needs ~50 GB of state. Both are recorded in every row.

Processes: each arch x dtype runs in a process of its own (this module with --archs ARCH --dtypes
DTYPE), one after the other, and the records are merged: no comparison crosses processes, and
one process's compiled programs and retained memory never share the host with the next's (the
ten L/16 rows in one process were killed by the OOM killer of a 24 GiB host at 24.2 GB resident,
all compiled, before their first step). A process's record waits in OUT.parts/ until the merge,
so a rerun after a failure skips the processes that finished (a rerun with the same flags: the part's
name holds a hash of them). Each process's calibrated peak and
run time are in `processes`.
"""
import argparse
import hashlib
import json
import math
import os
import statistics
import shutil
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from base import atomic
from bench import moe_layer
from configs import common
from configs import experiment as experiment_parser
from vmoe import flops
from vmoe import setup as setup_lib
from vmoe import sharding
from vmoe import train_step as train_lib

ARCHS = ('B/32', 'B/16', 'L/16')
DENSE = common.DENSE
ROUTERS = (DENSE, 'softmax_tc', 'sinkhorn_ec', 'sparsity_ec', 'soft_moe')
DTYPES = ('float32', 'bfloat16')
SOFT = 'soft_moe'
TARGETS = {'sparse_vs_dense': 1.15, 'soft_moe_vs_flops_scaled_dense': 1.1}
CPU_PER_DEVICE_BATCH, CPU_NUM_EXPERTS = 8, 4
# Dense peak FLOP/s per JAX device, by a substring of jax's device_kind, (bfloat16, float32).
# float32 matmuls run as bfloat16 passes on TPU and as TF32 on A100/H100/H200 at JAX's default
# precision (jax-ml/jax#18934), so those are the float32 peaks. A TPU v3 device is one TensorCore
# (half a 123 TFLOP/s chip); v4 and v5e devices are chips. Sources: cloud.google.com/tpu/docs
# (v3, v4, v5e); NVIDIA's A100 and H100/H200 SXM datasheets (dense, without sparsity).
PEAK_FLOPS = {
    'TPU v3': (61.5e12, 61.5e12),
    'TPU v4': (275e12, 275e12),
    'TPU v5 lite': (197e12, 197e12),
    'TPU v5e': (197e12, 197e12),
    'A100': (312e12, 156e12),
    'H100': (989e12, 494.5e12),
    'H200': (989e12, 494.5e12),
}


def table_peak(device_kind: str, dtype: str) -> float | None:
  """The table's peak FLOP/s of one device of `device_kind` in `dtype`, or None if not listed."""
  for name, peaks in PEAK_FLOPS.items():
    if name in device_kind:
      return peaks[('bfloat16', 'float32').index(dtype)]
  return None


def calibrated_peak(dtype: str, size: int = 2048, repeats: int = 5) -> float:
  """FLOP/s of the best of `repeats` size x size matmuls in `dtype` on this device (a CPU has no
  table entry: its peak is what XLA reaches on the step's own kind of work)."""
  a = jnp.ones((size, size), dtype)
  matmul = jax.jit(lambda x: x @ x)
  jax.block_until_ready(matmul(a))
  best = math.inf
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(matmul(a))
    best = min(best, time.perf_counter() - start)
  return 2 * size ** 3 / best


def peak_flops(dtype: str) -> tuple[float, str]:
  """(peak FLOP/s of one device in `dtype`, where it comes from)."""
  kind = jax.devices()[0].device_kind
  peak = table_peak(kind, dtype)
  if peak is not None:
    return peak, f'table ({kind})'
  return calibrated_peak(dtype), f'calibration matmul ({kind})'


def on_cpu() -> bool:
  return jax.devices()[0].platform == 'cpu'


def paper_experiment(arch: str, router: str, dtype: str, per_device_batch: int,
                     num_experts: int, remat: bool, overrides: dict | None = None):
  """The paper config of arch x router at c = 1, at `per_device_batch` images on every device, on
  the configs' mesh (mesh.expert = -1: gcd(devices, E), the reference's), with `overrides`
  ({'dotted.key': value}, as --config.dotted.key=value) set last."""
  config = common.get_paper_config(arch, router, 'c=1')
  num_devices = jax.device_count()
  common.override(config, {
      'batch_size': per_device_batch * num_devices, 'model.dtype': dtype, 'model.remat': remat,
      **(overrides or {})})
  if router != DENSE:
    config.moe.num_experts = num_experts
  return experiment_parser.parse(config)


class Stepper:
  """The compiled step of one row; `load` makes its state and batch, each call runs one step."""

  def __init__(self, arch, router, dtype, per_device_batch, num_experts, remat,
               compiler_options: dict | None = None, overrides: dict | None = None):
    self.experiment = paper_experiment(arch, router, dtype, per_device_batch, num_experts, remat,
                                       overrides)
    self.setup = setup_lib.build(self.experiment)
    self.compiled = self.setup.compile(compiler_options)
    memory = self.compiled.memory_analysis()
    e = self.experiment
    self.fields = {
        'arch': arch, 'router': router, 'dtype': dtype,
        'dispatch_dtype': None if router == DENSE else e.moe.dispatch_dtype,
        'per_device_batch': per_device_batch,
        'num_experts': e.moe.num_experts, 'mesh': dict(self.setup.mesh.shape), 'remat': remat,
        'flops_per_image': flops.compiled_flops(self.compiled) / per_device_batch,
        'peak_memory_bytes': int(memory.argument_size_in_bytes + memory.temp_size_in_bytes)}
    # The optimizer's update alone (the parameters standing in for the gradients): its cost is
    # per parameter, so it weighs on a small per-device batch and MoE's extra expert weights.
    update = lambda state: train_lib.apply_gradients(self.setup.tx, state, state.params)
    shardings = self.setup.state_shardings
    self.compiled_update = jax.jit(update, in_shardings=(shardings,), out_shardings=shardings,
                                   donate_argnums=(0,)).lower(self.setup.abstract_state).compile()
    self.state = self.batch = None

  def load(self):
    """A fresh state and a synthetic batch on the devices."""
    e = self.experiment
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (e.batch_size,) + e.model.image_shape).astype(np.float32)
    labels = np.eye(e.model.num_classes, dtype=np.float32)[
        rng.integers(0, e.model.num_classes, e.batch_size)]
    self.state = self.setup.init_state(jax.random.PRNGKey(0))
    self.batch = sharding.put_batch({'image': images, 'labels': labels},
                                    self.setup.batch_sharding)

  def unload(self):
    self.state = self.batch = None

  def __call__(self):
    self.state, metrics = self.compiled(self.state, self.batch, jax.random.PRNGKey(1))
    return metrics['loss']

  def update(self):
    """The optimizer's update alone, on the loaded state."""
    self.state = self.compiled_update(self.state)
    return self.state.step


def interleaved_ms(steppers: list, rounds: int, steps: int, warmup: int):
  """(step, first, update): each stepper's per-round median step, its first step on the round's
  fresh state, and its optimizer update alone (ms); the steppers visited in turn every round, one
  loaded at a time. Every round runs `warmup` untimed steps on its fresh state before the timed
  ones (the first of them is `first`): on XLA:CPU the first step after a state is made pays for
  faulting in the memory its buffers and temporaries take (bench/op_profile.py measures it:
  first_step_ms against step_ms in bench/results/op_profile_l16.json)."""
  round_ms = [[] for _ in steppers]
  first_ms = [[] for _ in steppers]
  update_ms = [[] for _ in steppers]
  for index in range(rounds):
    for stepper, times, firsts, update_times in zip(steppers, round_ms, first_ms, update_ms):
      stepper.load()
      if warmup:
        firsts.append(moe_layer.time_ms(stepper, warmup=0, repeats=1))
        for _ in range(warmup - 1):
          jax.block_until_ready(stepper())
      times.append(moe_layer.time_ms(stepper, warmup=0, repeats=steps))
      update_times.append(moe_layer.time_ms(stepper.update, warmup=1 if index == 0 else 0,
                                            repeats=steps))
      stepper.unload()
  return round_ms, first_ms, update_ms


def row(fields: dict, round_ms: list[float], peak: float,
        update_ms: list[float] | None = None, first_ms: list[float] | None = None) -> dict:
  """A row from a stepper's fields, its rounds (and its update's and first steps') and the
  device's peak FLOP/s in the row's dtype."""
  step_ms = statistics.median(round_ms)
  images_per_second = fields['per_device_batch'] * jax.device_count() / (step_ms / 1e3)
  achieved = fields['flops_per_image'] * images_per_second / jax.device_count()
  found = {**fields, 'step_ms': round(step_ms, 3), 'round_ms': [round(t, 3) for t in round_ms],
           'images_per_second': round(images_per_second, 3), 'mfu': achieved / peak}
  if update_ms:
    found['update_ms'] = round(statistics.median(update_ms), 3)
  if first_ms:
    found['first_step_ms'] = round(statistics.median(first_ms), 3)
  return found


def add_ratios(rows: list[dict]) -> list[dict]:
  """Each MoE row with its step and FLOPs over the dense row of the same arch, dtype and batch
  (when the grid has it), and the issue's target for it."""
  key = lambda r: (r['arch'], r['dtype'], r['per_device_batch'])
  dense = {key(r): r for r in rows if r['router'] == DENSE}
  out = []
  for r in rows:
    base = dense.get(key(r))
    if r['router'] == DENSE or base is None:
      out.append(r)
      continue
    vs_dense = r['step_ms'] / base['step_ms']
    flops_ratio = r['flops_per_image'] / base['flops_per_image']
    extra = {'vs_dense': round(vs_dense, 3), 'flops_vs_dense': round(flops_ratio, 3)}
    if 'update_ms' in r and 'update_ms' in base and r['step_ms'] > base['step_ms']:
      # How much of the MoE step's extra time its optimizer update's extra time explains.
      extra['update_share_of_extra'] = round(
          (r['update_ms'] - base['update_ms']) / (r['step_ms'] - base['step_ms']), 3)
    if r['router'] == SOFT:
      extra['vs_flops_scaled_dense'] = round(vs_dense / flops_ratio, 3)
      extra['target'] = TARGETS['soft_moe_vs_flops_scaled_dense']
      extra['meets_target'] = extra['vs_flops_scaled_dense'] <= extra['target']
    else:
      extra['target'] = TARGETS['sparse_vs_dense']
      extra['meets_target'] = extra['vs_dense'] <= extra['target']
    out.append({**r, **extra})
  return out


def run(args) -> dict:
  """The grid of args: compiled, timed interleaved, with ratios; the JSON record."""
  grid = [(arch, router, dtype) for arch in args.archs for router in args.routers
          for dtype in args.dtypes]
  steppers = []
  for arch, router, dtype in grid:
    start = time.perf_counter()
    steppers.append(Stepper(arch, router, dtype, args.per_device_batch, args.num_experts,
                            args.remat))
    print(f'compiled {arch} {router} {dtype} in {time.perf_counter() - start:.0f} s', flush=True)
  peaks = {dtype: peak_flops(dtype) for dtype in args.dtypes}
  round_ms, first_ms, update_ms = interleaved_ms(steppers, args.rounds, args.steps, args.warmup)
  rows = add_ratios([row(s.fields, times, peaks[s.fields['dtype']][0], updates, firsts)
                     for s, times, firsts, updates in zip(steppers, round_ms, first_ms,
                                                          update_ms)])
  for r in rows:
    print(json.dumps(r), flush=True)
  return {'machine': moe_layer.machine(),
          'peak_flops': {d: {'flops_per_second': p, 'source': src} for d, (p, src) in peaks.items()},
          'method': f'paper configs at c=1 (trainer step, synthetic batch); {args.rounds} '
                    f'interleaved rounds of {args.steps} steps per row, each round after '
                    f'{args.warmup} untimed steps on its fresh state (the first: first_step_ms); '
                    'step_ms = median over rounds', 'targets': TARGETS,
          'rows': rows}


def part_path(out: str, arch: str, dtype: str, argv: list[str]) -> str:
  """Where the process of `arch` x `dtype` run with the user's `argv` keeps its record until the
  merge; a hash of argv in the name, so that a rerun with other flags never takes a part a failed
  run with these left behind (nor overwrites it)."""
  flags = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12]
  return os.path.join(out + '.parts', f"{arch.replace('/', '')}_{dtype}_{flags}.json")


def run_per_process(args, argv: list[str]) -> dict:
  """Each arch x dtype of `args` run by a process of its own, in turn; the records merged: rows
  in grid order, each process's arch, dtype, peak FLOP/s and run time in `processes`. A process
  gets `argv` followed by --archs ARCH --dtypes DTYPE --out PART (argparse keeps an option's last
  value); its record is kept in PART (part_path), so a rerun after a failure or a kill skips the
  processes that finished."""
  rows, processes = [], []
  for arch in args.archs:
    for dtype in args.dtypes:
      part = part_path(args.out, arch, dtype, argv)
      if not os.path.exists(part):
        subprocess.run([sys.executable, '-m', 'bench.paper_step', *argv, '--archs', arch,
                        '--dtypes', dtype, '--out', part], check=True)
      with open(part, encoding='utf-8') as f:
        record = json.load(f)
      rows += record['rows']
      processes += record['processes']
  return {**record, 'method': record['method'] + '; one process per arch and dtype, run in turn',
          'peak_flops': {d: p['peak_flops'][d] for p in processes for d in p['dtypes']},
          'processes': processes, 'rows': rows}


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  cpu = on_cpu()
  parser.add_argument('--archs', default=','.join(ARCHS))
  parser.add_argument('--routers', default=','.join(ROUTERS))
  parser.add_argument('--dtypes', default=','.join(DTYPES))
  parser.add_argument('--per-device-batch', type=int,
                      default=CPU_PER_DEVICE_BATCH if cpu else
                      common.PAPER_BATCH_SIZE // jax.device_count(),
                      help='images per device (default: 8 on CPU, the recipe\'s 4096 / devices '
                           'on accelerators)')
  parser.add_argument('--num-experts', type=int, default=CPU_NUM_EXPERTS if cpu else 32,
                      help='E (default: 4 on CPU, one device\'s share of 32 on 8; else 32)')
  parser.add_argument('--remat', action='store_true', help='config.model.remat=True')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=1, help='timed steps per row and round')
  parser.add_argument('--warmup', type=int, default=1,
                      help='untimed steps on each round\'s fresh state before its timed steps '
                           '(the first is recorded as first_step_ms)')
  parser.add_argument('--out', default='bench/results/paper_step.json')
  args = parser.parse_args(argv)
  args.archs, args.routers, args.dtypes = (
      [v for v in text.split(',') if v] for text in (args.archs, args.routers, args.dtypes))
  for name, values, valid in (('--archs', args.archs, ARCHS), ('--routers', args.routers, ROUTERS),
                              ('--dtypes', args.dtypes, DTYPES)):
    if not set(values) <= set(valid):
      parser.error(f'{name}: valid values are {", ".join(valid)}')
  if min(args.rounds, args.steps, args.per_device_batch, args.num_experts) < 1 or args.warmup < 0:
    parser.error('--rounds, --steps, --per-device-batch and --num-experts must be >= 1, and '
                 '--warmup >= 0')
  return args


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  if len(args.archs) > 1 or len(args.dtypes) > 1:
    record = run_per_process(args, argv)
  else:
    start = time.perf_counter()
    record = run(args)
    record['processes'] = [{'archs': args.archs, 'dtypes': args.dtypes,
                            'peak_flops': record['peak_flops'],
                            'seconds': round(time.perf_counter() - start, 1)}]
  atomic.write_json(args.out, record)
  shutil.rmtree(args.out + '.parts', ignore_errors=True)   # Merged: the parts are in `record`.
  print(f'wrote {args.out}')


if __name__ == '__main__':
  main()
