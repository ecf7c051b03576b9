"""The paper models' training step: B/32, B/16, L/16 and the rung's S/32 x router x dtype.

  python -m bench.paper_step --out bench/results/paper_step.json     # as `make bench`
  python -m bench.paper_step --archs VMoE-S/32 --out bench/results/paper_step_ilsvrc_s32.json

Each row is a bench/step.py Stepper of a paper config at c = 1 ('dense': the same ViT without MoE
layers), or for VMoE-S/32 (base/published.py RUNG_ARCH) of the ImageNet-1k rung's recipe at c = 1
(configs/ilsvrc_s32.py: the grid's c = 1 cells). dtype 'float32' is the configs' default (float32
model, bfloat16 dispatch: V-MoE's); 'bfloat16' is --config.model.dtype=bfloat16. Targets: sparse
routers within 1.15x the dense step, Soft MoE within 1.1x the FLOPs-scaled one. With
--augment-on host,device each row is also timed on the device path (data.augment_on = 'device':
uint8 batches, the pp's flip, RandAugment, value range and one-hot inside the step), and its
`augment_share` is its step over the host path's, less 1. MFU is
flops_per_image x images_per_second / devices over a device's peak (launch/plan.py's SLICES list
accelerators').

Defaults: on accelerators the recipe's per-device batch (its global batch over the devices: 4096,
the rung's 8192) and its E (32, the rung's 8). On CPU 8 images (one routing group, the smallest
batch the recipes route) and E = 4 (one device's share of 32 on an 8-way expert mesh, without the
all-to-all; the experts' slots, E x C = c T, hardly depend on E, nor do the FLOPs). Each arch x
dtype runs in a fresh process (bench/processes.py); a ratio compares rows of one process only.
"""
import argparse
import sys
import time

import jax

from base import published
from bench import processes
from bench import step
from bench import timing
from configs import common
from configs import ilsvrc_s32
from vmoe.routing import declarations

ARCHS = published.ARCHS + (published.RUNG_ARCH,)
ROUTERS = (declarations.DENSE, 'softmax_tc', 'sinkhorn_ec', 'sparsity_ec', step.SOFT_MOE)
DTYPES = ('float32', 'bfloat16')
TARGETS = {'sparse': ('vs_dense', 1.15), step.SOFT_MOE: ('vs_flops_scaled_dense', 1.1)}
CPU_PER_DEVICE_BATCH, CPU_NUM_EXPERTS = 8, 4
AUGMENT_ON = ('host', 'device')
AUGMENT_SHARE_TARGET = 0.03       # Issue 51: the device augmentation <= 3% of the GPU step.


def recipe_config(arch: str, router: str):
  """arch x router at c = 1: a paper config, or the ImageNet-1k rung's (published.RUNG_ARCH)."""
  if arch == published.RUNG_ARCH:
    return ilsvrc_s32.rung_config(router, 1.0)
  return common.get_paper_config(arch, router, 'c=1')


def paper_config(arch: str, router: str, dtype: str, per_device_batch: int | None,
                 num_experts: int | None, remat: bool = False, overrides: dict | None = None,
                 augment_on: str = 'host'):
  """The recipe of arch x router at c = 1, at `per_device_batch` images on every device, with
  `num_experts` experts (None: the defaults of the module docstring), on the configs' mesh, its
  pp's tail run where `augment_on` says ('host': the step takes float32 images and one-hot labels;
  'device': it takes what the host ships and flips, RandAugments, scales and one-hots it), with
  `overrides` ({'dotted.key': value}, as --config.dotted.key=value) last."""
  config = recipe_config(arch, router)
  cpu = jax.devices()[0].platform == 'cpu'
  if per_device_batch is None:
    per_device_batch = (CPU_PER_DEVICE_BATCH if cpu else
                        config.batch_size // jax.device_count())
  if num_experts is None:
    num_experts = CPU_NUM_EXPERTS if cpu else config.moe.num_experts
  return common.override(config, {
      'batch_size': per_device_batch * jax.device_count(), 'model.dtype': dtype,
      'model.remat': remat, 'data.augment_on': augment_on,
      **({} if router == declarations.DENSE else {'moe.num_experts': num_experts}),
      **(overrides or {})})


def run(args) -> dict:
  """The grid of args in this process: compiled, timed interleaved, with ratios."""
  steppers = []
  for arch in args.archs:
    for router in args.routers:
      for dtype in args.dtypes:
        for augment_on in args.augment_on:
          start = time.perf_counter()
          steppers.append(step.Stepper(paper_config(
              arch, router, dtype, args.per_device_batch, args.num_experts, args.remat,
              augment_on=augment_on)))
          print(f'compiled {arch} {router} {dtype} augment_on={augment_on} in '
                f'{time.perf_counter() - start:.0f} s', flush=True)
  rows = step.measure(steppers, args.rounds, args.steps, args.warmup)
  rows = add_augment_share(step.add_ratios(rows, TARGETS))
  return {'machine': timing.machine(), 'targets': TARGETS, 'rows': rows,
          'method': f'paper configs at c=1 (trainer step, synthetic batch); {args.rounds} '
                    f'interleaved rounds, each on a fresh state: {args.warmup} untimed steps '
                    f'(the first: first_step_ms), then {args.steps} timed; medians over rounds'}


def add_augment_share(rows: list[dict]) -> list[dict]:
  """Each augment_on='device' row with `augment_share`: its step over the same arch, router, dtype
  and batch's step on the host path, less 1 (the device augmentation's share; target
  AUGMENT_SHARE_TARGET on an accelerator)."""
  key = lambda r: (r['arch'], r['router'], r['dtype'], r['per_device_batch'])
  host = {key(r): r for r in rows if r['augment_on'] == 'host'}
  out = []
  for r in rows:
    base = host.get(key(r)) if r['augment_on'] == 'device' else None
    out.append(r if base is None else {**r, 'augment_share': round(
        r['step_ms'] / base['step_ms'] - 1, 4), 'augment_share_target': AUGMENT_SHARE_TARGET})
  return out


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--archs', default=','.join(published.ARCHS),
                      help=f'default: the paper\'s; {published.RUNG_ARCH}: the ImageNet-1k rung\'s')
  parser.add_argument('--routers', default=','.join(ROUTERS))
  parser.add_argument('--dtypes', default=','.join(DTYPES))
  parser.add_argument('--per-device-batch', type=int,
                      help="images per device (default: 8 on CPU, else the recipe's batch over "
                      'the devices)')
  parser.add_argument('--num-experts', type=int,
                      help="E (default: 4 on CPU, one device's share of 32 on 8; else the "
                      "recipe's)")
  parser.add_argument('--remat', action='store_true', help='config.model.remat=True')
  parser.add_argument('--augment-on', default='host',
                      help='host (float32 batches), device (uint8 batches, the pp\'s tail in the '
                      'step) or host,device (both, with augment_share)')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=1, help='timed steps a round')
  parser.add_argument('--warmup', type=int, default=1, help='untimed steps a round (>= 1)')
  parser.add_argument('--out', default='bench/results/paper_step.json')
  args = parser.parse_args(argv)
  for name, valid in (('archs', ARCHS), ('routers', ROUTERS), ('dtypes', DTYPES),
                      ('augment_on', AUGMENT_ON)):
    setattr(args, name, [v for v in getattr(args, name).split(',') if v])
    if not set(getattr(args, name)) <= set(valid):
      parser.error(f'--{name}: valid values are {", ".join(valid)}')
  sizes = [v for v in (args.per_device_batch, args.num_experts) if v is not None]
  if min(args.rounds, args.steps, args.warmup, *sizes) < 1:
    parser.error('--rounds, --steps, --warmup, --per-device-batch and --num-experts must be >= 1')
  return args


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  start = time.perf_counter()
  if len(args.archs) == 1 and len(args.dtypes) == 1:
    record = run(args)
    record['processes'] = [{'archs': args.archs, 'dtypes': args.dtypes,
                            'seconds': round(time.perf_counter() - start, 1)}]
  else:
    parts = processes.run('bench.paper_step', [argv + ['--archs', a, '--dtypes', d]
                                               for a in args.archs for d in args.dtypes], args.out)
    record = {**parts[-1], 'method': parts[-1]['method'] + '; one process per arch and dtype',
              'processes': [p for part in parts for p in part['processes']],
              'rows': [r for part in parts for r in part['rows']]}
  processes.write(args.out, record)
  print(f'wrote {args.out}')


if __name__ == '__main__':
  main()
