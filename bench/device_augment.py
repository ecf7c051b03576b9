"""The accelerator's share of augmentation: data/device_augment.py beside the rung's S/32 training
step, timed in one process (a benchmark, not a test).

  python -m bench.device_augment --out bench/results/device_augment.json

Rows, timed in interleaved rounds (bench/step.py): the ImageNet-1k rung's training step
(VMoE-S/32, Softmax Token Choice at c = 1, configs/ilsvrc_s32.py; on CPU 8 images and E = 4, as
bench/paper_step.py), and the augmentation of the same number of 224 px uint8 images as the host
would ship them: flip, RandAugment (2 layers at the rung's magnitude 10, and at V-MoE's
ImageNet-21k magnitude 20), value range and one-hot. `share` is the augmentation's time over the
step's; the target is at most 5% (issue 51).
"""
import argparse
import functools
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

from base import atomic
from base import published
from bench import paper_step
from bench import step
from bench import timing
from data import device_augment

TARGET_SHARE = 0.05
MAGNITUDES = (10, 20)


class Augmenter:
  """The jitted augmentation of `batch` images of the step's shape and classes."""

  def __init__(self, batch: int, image_shape: tuple, num_classes: int, magnitude: float):
    self.magnitude = magnitude
    rng = np.random.default_rng(0)
    self.images = jnp.asarray(rng.integers(0, 256, (batch,) + image_shape), jnp.uint8)
    self.labels = jnp.asarray(rng.integers(0, num_classes, batch), jnp.int32)
    self.keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(batch))
    self.fn = jax.jit(functools.partial(device_augment.augment, num_classes=num_classes,
                                        num_layers=2, magnitude=magnitude))

  def __call__(self):
    return self.fn(self.images, self.labels, self.keys)['image']

  def round(self, steps: int, warmup: int) -> dict:
    return {'augment_ms': timing.time_ms(self, warmup=warmup, repeats=steps)}


def run(args) -> dict:
  stepper = step.Stepper(paper_step.paper_config(
      published.RUNG_ARCH, 'softmax_tc', 'float32', args.per_device_batch, None))
  e = stepper.experiment
  augmenters = [Augmenter(e.batch_size, e.model.image_shape[:2] + (3,), e.model.num_classes, m)
                for m in MAGNITUDES]
  timers = [functools.partial(step.one_round, stepper, args.steps, args.warmup)] + [
      functools.partial(a.round, args.steps, args.warmup) for a in augmenters]
  times = timing.interleaved(timers, args.rounds)
  step_ms = statistics.median(times[0]['step_ms'])
  rows = [{**stepper.fields, 'step_ms': round(step_ms, 3)}]
  for augmenter, found in zip(augmenters, times[1:]):
    augment_ms = statistics.median(found['augment_ms'])
    rows.append({'augmentation': f'flip|randaug(2, {augmenter.magnitude:g})|value_range|onehot',
                 'images': e.batch_size, 'augment_ms': round(augment_ms, 3),
                 'ms_per_image': round(augment_ms / e.batch_size, 3),
                 'share': round(augment_ms / step_ms, 4), 'target': TARGET_SHARE,
                 'meets_target': augment_ms / step_ms <= TARGET_SHARE})
  return {'machine': timing.machine(), 'rows': rows,
          'method': f'{args.rounds} interleaved rounds; per round, the step as bench/step.py '
                    f'times it ({args.warmup} untimed, median of {args.steps}) and each '
                    f'augmentation ({args.warmup} untimed, median of {args.steps}); medians over '
                    'rounds'}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--per-device-batch', type=int, default=None,
                      help='default: bench/paper_step.py\'s (8 images on CPU)')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--out', default='bench/results/device_augment.json')
  args = parser.parse_args(argv)
  if min(args.rounds, args.steps, args.warmup) < 1:
    parser.error('--rounds, --steps and --warmup must be >= 1')
  result = run(args)
  atomic.write_json(args.out, result)
  for row in result['rows'][1:]:
    print(f'{row["augmentation"]}: {row["augment_ms"]} ms for {row["images"]} images, '
          f'{100 * row["share"]:.1f}% of the step ({result["rows"][0]["step_ms"]} ms)')
  return 0


if __name__ == '__main__':
  sys.exit(main())
