"""The accelerator's share of augmentation: data/pp/device_augment.py beside the rung's S/32
training step, timed in one process (a benchmark, not a test).

  python -m bench.device_augment --out bench/results/device_augment.json

Rows, timed in interleaved rounds (bench/step.py): the ImageNet-1k rung's training step
(VMoE-S/32, Softmax Token Choice at c = 1, configs/ilsvrc_s32.py; on CPU 8 images and E = 4, as
bench/paper_step.py) on the host path (float32 batches); then, for RandAugment at the rung's
magnitude 10 and at V-MoE's ImageNet-21k magnitude 20, the pp's tail alone (flip, RandAugment
(2, m), value range, one-hot) as the step runs it (vmoe/train/train_step.py tail_per_device: each
device's shard in chunks of data/pp/device_augment.py CHUNK images) on the same number of 224 px
uint8 images as the host ships them, and the rung's step on the device path (data.augment_on =
'device': that tail inside the step). `share` is the tail's time over the host-path step's, the
target at most 5% (issue 51); `step_share` is the device-path step's over the host-path step's,
less 1; `round_ms` are each round's medians, the spread to judge it by.
"""
import argparse
import functools
import statistics
import sys

import jax

from base import atomic
from base import published
from bench import paper_step
from bench import step
from bench import timing
from vmoe.model import sharding
from vmoe.train import train_step as train_lib

TARGET_SHARE = 0.05
MAGNITUDES = (10, 20)


class Augmenter:
  """The jitted tail of a device-path stepper's training pp as its step runs it
  (train_step.tail_per_device on the step's mesh), alone, on the synthetic batch that stepper's
  step takes (bench/step.py synthetic_batch)."""

  def __init__(self, device: step.Stepper):
    self.split = device.experiment.pp_splits[device.experiment.data.pp_train]
    self.batch = jax.device_put(step.synthetic_batch(device.program))
    self.fn = jax.jit(sharding.with_mesh(train_lib.tail_per_device(self.split),
                                         device.program.mesh))

  def __call__(self):
    return self.fn(self.batch)['image']

  def round(self, steps: int, warmup: int) -> dict:
    return {'augment_ms': timing.time_ms(self, warmup=warmup, repeats=steps)}


def _randaug(pp: str) -> str:
  """The randaug op of a pp string, as written."""
  found = [op for op in pp.split('|') if op.startswith('randaug(')]
  if len(found) != 1:
    raise ValueError(f'the rung\'s pp_train should hold one randaug op: {pp!r}')
  return found[0]


def run(args) -> dict:
  def config(augment_on: str, magnitude: int | None = None):
    rung = lambda overrides=None: paper_step.paper_config(
        published.RUNG_ARCH, 'softmax_tc', 'float32', args.per_device_batch, None,
        augment_on=augment_on, overrides=overrides)
    if magnitude is None:
      return rung()
    return rung({'data.pp_train': _with_magnitude(rung().data.pp_train, magnitude)})

  host = step.Stepper(config('host'))
  devices = [step.Stepper(config('device', m)) for m in MAGNITUDES]
  e = host.experiment
  augmenters = [Augmenter(d) for d in devices]
  timers = ([functools.partial(step.one_round, s, args.steps, args.warmup)
             for s in [host] + devices] +
            [functools.partial(a.round, args.steps, args.warmup) for a in augmenters])
  times = timing.interleaved(timers, args.rounds)
  median = lambda found, name: statistics.median(found[name])
  step_ms = median(times[0], 'step_ms')
  rounds = lambda found, name: [round(t, 3) for t in found[name]]
  rows = [{**host.fields, 'step_ms': round(step_ms, 3), 'round_ms': rounds(times[0], 'step_ms')}]
  for device, augmenter, device_times, augment_times in zip(
      devices, augmenters, times[1:1 + len(devices)], times[1 + len(devices):]):
    augment_ms, device_ms = median(augment_times, 'augment_ms'), median(device_times, 'step_ms')
    tail = '|'.join(op.spec for op in augmenter.split.tail)
    rows.append({**device.fields, 'tail': tail, 'images': e.batch_size,
                 'augment_ms': round(augment_ms, 3),
                 'ms_per_image': round(augment_ms / e.batch_size, 3),
                 'augment_round_ms': rounds(augment_times, 'augment_ms'),
                 'share': round(augment_ms / step_ms, 4), 'step_ms': round(device_ms, 3),
                 'round_ms': rounds(device_times, 'step_ms'),
                 'step_share': round(device_ms / step_ms - 1, 4), 'target': TARGET_SHARE,
                 'meets_target': augment_ms / step_ms <= TARGET_SHARE})
  return {'machine': timing.machine(), 'rows': rows,
          'method': f'{args.rounds} interleaved rounds; per round, the host-path step and each '
                    f'device-path step as bench/step.py times them ({args.warmup} untimed, '
                    f'median of {args.steps}), and each tail alone ({args.warmup} untimed, '
                    f'median of {args.steps}); medians over rounds. share: the tail alone over '
                    'the host-path step; step_share: the device-path step over the host-path '
                    'step, less 1'}


def _with_magnitude(pp: str, magnitude: int) -> str:
  """pp with its randaug's magnitude set to `magnitude` (the layers and any further argument,
  such as its arithmetic, kept)."""
  layers, _, *rest = _randaug(pp)[len('randaug('):-1].split(',')
  arguments = [layers.strip(), str(magnitude), *(r.strip() for r in rest)]
  return pp.replace(_randaug(pp), f"randaug({', '.join(arguments)})")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--per-device-batch', type=int, default=None,
                      help='default: bench/paper_step.py\'s (8 images on CPU)')
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--out', default='bench/results/device_augment.json')
  args = parser.parse_args(argv)
  if min(args.rounds, args.steps, args.warmup) < 1:
    parser.error('--rounds, --steps and --warmup must be >= 1')
  result = run(args)
  atomic.write_json(args.out, result)
  for row in result['rows'][1:]:
    print(f'{row["tail"]}: {row["augment_ms"]} ms for {row["images"]} images, '
          f'{100 * row["share"]:.1f}% of the step ({result["rows"][0]["step_ms"]} ms); the '
          f'device-path step {row["step_ms"]} ms ({100 * row["step_share"]:+.1f}%)')
  return 0


if __name__ == '__main__':
  sys.exit(main())
