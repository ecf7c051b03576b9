"""The memory the accelerator's pp tail alone holds: XLA:TPU's and XLA:CPU's temporaries an image
(a measurement, not a timing).

  python -m bench.tail_memory --out bench/results/tail_memory.json

The training tails (data/pp/device_augment.py run_tail: flip_lr, randaug(2, m), value_range, onehot,
keep) of the ImageNet-1k rung (m = 10, configs/ilsvrc_s32.py) and of the paper's ImageNet-21k
recipe (m = 20, configs/common.py), on the uint8 224 px batches the host ships, are compiled for
one TensorCore of a TPU v4 by XLA:TPU's compiler (launch/tpu_compiler.py: nothing runs) and for
this machine's CPU. A row is the compiler's memory_analysis(): temporaries an image, and the
arguments and outputs. A compiler's buffer assignment is deterministic, so one compile is the
measurement; XLA:TPU's compile is the slow part, so its batches are small.

--chunk C compiles the tail instead as lax.map over chunks of C images of the batch
(data/pp/device_augment.py run_tail_in_chunks, as the training step runs it on each device with
C = device_augment.CHUNK): what bounds the compile's time and memory as the per-device batch grows.
"""
import argparse
import functools
import os
import sys
import time

if __name__ == '__main__':   # TPU devices are compiled for, never started (launch/tpu_compiler).
  os.environ['JAX_PLATFORMS'] = 'cpu'

import jax   # pylint: disable=wrong-import-position

from base import atomic   # pylint: disable=wrong-import-position
from base import host   # pylint: disable=wrong-import-position
from configs import common   # pylint: disable=wrong-import-position
from configs import ilsvrc_s32   # pylint: disable=wrong-import-position
from data.pp import device_augment   # pylint: disable=wrong-import-position
from data.pp import device_split   # pylint: disable=wrong-import-position
from launch import tpu_compiler   # pylint: disable=wrong-import-position

TPU_TOPOLOGY = 'v4:2x2x1'    # The smallest v4 slice libtpu describes; one of its TensorCores.
IMAGE_SHAPE = (224, 224, 3)
TARGET_MB = 4.0              # Issue 56: XLA:TPU's temporaries at most 4 MB an image.
MB = 2 ** 20


def training_tails() -> dict[str, device_split.Split]:
  """name -> the training pp's tail on the accelerator: the rung's and the paper's."""
  pps = {'rung': ilsvrc_s32.get_config().data.pp_train,
         'paper': common.get_paper_config('B/32', 'softmax_ec', 'c=1').data.pp_train}
  return {name: device_split.split(pp) for name, pp in pps.items()}


def abstract_batch(split: device_split.Split, images: int) -> dict:
  """What the host ships for `images` examples of `split` (shapes and dtypes only)."""
  return {key: jax.ShapeDtypeStruct((images,) + tuple(shape), dtype)
          for key, (shape, dtype) in split.shipped_shapes(IMAGE_SHAPE).items()}


def tail_fn(split: device_split.Split, chunk: int = 0):
  """The tail as compiled: whole (chunk 0), or in chunks (device_augment.run_tail_in_chunks)."""
  if chunk:
    return functools.partial(device_augment.run_tail_in_chunks, split, chunk)
  return functools.partial(device_augment.run_tail, split)


def tail_memory(split: device_split.Split, images: int, device, chunk: int = 0) -> dict:
  """memory_analysis() of `split`'s tail (tail_fn) compiled for `images` images on `device`, in
  bytes and in MB an image."""
  sharding = jax.sharding.SingleDeviceSharding(device)
  start = time.process_time()
  compiled = jax.jit(tail_fn(split, chunk), in_shardings=sharding,
                     out_shardings=sharding).lower(abstract_batch(split, images)).compile()
  memory = compiled.memory_analysis()
  return {'images': images, **({'chunk': chunk} if chunk else {}),
          'temp_bytes': memory.temp_size_in_bytes,
          'temp_mb_per_image': round(memory.temp_size_in_bytes / images / MB, 3),
          'argument_bytes': memory.argument_size_in_bytes,
          'output_bytes': memory.output_size_in_bytes,
          'compile_cpu_seconds': round(time.process_time() - start, 1)}


def tpu_device():
  """One TensorCore of TPU_TOPOLOGY, to compile for."""
  return tpu_compiler.devices(TPU_TOPOLOGY)[0]


def run(args) -> dict:
  tails = {name: split for name, split in training_tails().items() if name in args.tails}
  compilers = {'XLA:CPU': (jax.devices('cpu')[0], args.cpu_images)}
  if not args.no_tpu:
    compilers[f'XLA:TPU {TPU_TOPOLOGY}'] = (tpu_device(), args.tpu_images)
  rows = []
  for compiler, (device, sizes) in compilers.items():
    for name, split in tails.items():
      for images in sizes:
        row = {'tail': name, 'pp': '|'.join(op.spec for op in split.tail), 'compiler': compiler,
               **tail_memory(split, images, device, args.chunk)}
        print(row, flush=True)
        rows.append(row)
  return {'machine': {**host.host(), 'jax': jax.__version__}, 'rows': rows,
          'target_mb_per_image': TARGET_MB,
          'method': 'temp_size_in_bytes of compiled.memory_analysis() over the images, the tail '
                    'jitted alone on one device (one TensorCore of the TPU topology)'}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
  parser.add_argument('--tails', nargs='+', default=['rung', 'paper'], choices=['rung', 'paper'])
  parser.add_argument('--tpu-images', type=int, nargs='+', default=[8],
                      help='batch sizes compiled by XLA:TPU (slow: minutes each)')
  parser.add_argument('--cpu-images', type=int, nargs='*', default=[8, 64],
                      help='batch sizes compiled by XLA:CPU (none: XLA:TPU alone)')
  parser.add_argument('--no-tpu', action='store_true', help='XLA:CPU alone (no libtpu needed)')
  parser.add_argument('--chunk', type=int, default=0,
                      help='compile lax.map over chunks of this many images (0: the whole batch)')
  parser.add_argument('--out', default='bench/results/tail_memory.json')
  args = parser.parse_args(argv)
  uneven = [n for n in args.tpu_images + args.cpu_images if args.chunk and n % args.chunk]
  if args.chunk < 0 or uneven:
    parser.error(f'--chunk {args.chunk}: give 0, or a size that divides every batch size '
                 f'(not {uneven}).')
  if not args.no_tpu and not tpu_compiler.available():
    parser.error(f'{tpu_compiler.MISSING}, or pass --no-tpu.')
  atomic.write_json(args.out, run(args))
  return 0


if __name__ == '__main__':
  sys.exit(main())
