"""Images per second of the training input pipeline at 224 px (a benchmark, not a test).

  python -m bench.input_pipeline --out bench/results/input_pipeline.json     # as `make bench`

Writes an ImageNet-21k archive of random photo-sized JPEGs (default 300 of 320..500 px a side,
about 100 kB each, near ImageNet's average of about 110 kB, so decoding costs what photos cost),
builds it with the ImageNet-21k TFDS builder, and times data.stream.pipeline.make_train_iterator, in
one run, on these pps:
  randaug          the paper configs' training pp (V-MoE's ImageNet-21k: decode|inception_crop|
                   flip|RandAugment(2, 20)|value range|one-hot), all of it on the host;
  randaug_device   the same pp under data.augment_on='device' (the configs' setting): the host
                   decodes the crop window and ships uint8 images, label ids and keys;
  rung             the ImageNet-1k rung's training pp (RandAugment(2, 10)) on the host;
  rung_device      the same on the device path (issue 51's target: >= 450 images/s a vCPU and
                   within 1.25x of the floor; `targets` in the result);
  no_randaug       V-MoE's pp without RandAugment, on the host;
  full_decode      no_randaug with the whole JPEG decoded before the crop (an op between decode
                   and inception_crop keeps them apart), as before the windowed decode;
and the floor: one core decoding the same kind of windows (data/pp/ops.py's fused decode and crop)
and resizing them, nothing else, over the archive's JPEGs held in memory. Each pipeline row gives
its images/second and per vCPU (divided by its parallel calls, one core each). Compare them with
the training step's images/second to know whether input or model bounds a step on this host.
"""
import argparse
import dataclasses
import io
import json
import os
import tempfile

import numpy as np
from PIL import Image
import tensorflow_datasets as tfds

from base import atomic
from base import host
from bench import timing
from configs import common
from configs import ilsvrc_s32
from data import config as data_config
from data.datasets import imagenet21k
from data.pp import device_split
from data.pp import ops
from data.stream import pipeline
from data.stream import reader

NUM_CLASSES = 21_843       # V-MoE's ImageNet-21k head.
TARGET_PER_VCPU = 450      # Issue 51: the rung's pp on the device path, images/s a vCPU ...
TARGET_OF_FLOOR = 1.25     # ... and within 1.25x of the floor.
SYNSETS = 10


def photo_like_jpeg(rng: np.random.Generator, min_side: int, max_side: int) -> bytes:
  """A JPEG of random size: noise upsampled 4x plus +-20 grain, which compresses to about the
  size of a photo of that size (white noise would be 3x larger, flat colour 10x smaller)."""
  height, width = rng.integers(min_side, max_side + 1, size=2)
  coarse = rng.integers(0, 256, (height // 4 + 1, width // 4 + 1, 3), dtype=np.uint8)
  image = Image.fromarray(coarse).resize((int(width), int(height)), Image.BILINEAR)
  pixels = np.asarray(image, np.int16) + rng.integers(-20, 21, (height, width, 3))
  buffer = io.BytesIO()
  Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format='JPEG',
                                                                   quality=90)
  return buffer.getvalue()


def make_dataset(directory: str, args) -> tuple[data_config.DataConfig, dict]:
  """Writes and builds the archive; returns the data config and the images' statistics."""
  rng = np.random.default_rng(0)
  images = {f'n{s:08d}': [] for s in range(SYNSETS)}
  sizes = []
  for i in range(args.images):
    data = photo_like_jpeg(rng, args.min_side, args.max_side)
    sizes.append(len(data))
    synset = f'n{i % SYNSETS:08d}'
    images[synset].append((f'{synset}_{i}.JPEG', data))
  manual_dir = os.path.join(directory, 'manual')
  os.makedirs(manual_dir)
  imagenet21k.write_archive(os.path.join(manual_dir, 'fall11_whole.tar'), images)
  builder = imagenet21k.Imagenet21k(config='fall11', data_dir=os.path.join(directory, 'tfds'),
                                    file_format='array_record')
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  config = data_config.DataConfig(
      name='imagenet21k/fall11', train_split='full', eval_split='full', pp_train='decode',
      pp_eval='decode', num_classes=NUM_CLASSES, shuffle_buffer=args.images,
      data_dir=builder.data_dir.split('/imagenet21k/')[0], manual_dir=manual_dir)
  return config, {'num_images': args.images, 'mean_jpeg_kb': round(np.mean(sizes) / 1e3, 1),
                  'side_px': [args.min_side, args.max_side],
                  'jpegs': [data for synset in images.values() for _, data in synset]}


def images_per_second(config, pp: str, args, augment_on: str = 'host') -> dict:
  """Images/second of the median timed window (--window-batches batches) after --warmup, and per
  vCPU (the pipeline's parallel calls, one core each), with the pp's tail run where augment_on
  says (data.augment_on: 'device' ships uint8 images, label ids and keys)."""
  classes = device_split.label_depths(pp)[-1]    # The pp's one-hot: 21,843, or the rung's 1,000.
  iterator = pipeline.make_train_iterator(
      dataclasses.replace(config, pp_train=pp, augment_on=augment_on, num_classes=classes),
      batch_size=args.batch_size, seed=0, cut=device_split.tail_on_device(pp, augment_on))
  window = lambda: [next(iterator) for _ in range(args.window_batches)]
  ms = timing.time_ms(window, warmup=args.warmup, repeats=args.windows)
  rate = args.window_batches * args.batch_size / ms * 1e3
  calls = reader.parallel_calls()
  return {'pp': pp, 'augment_on': augment_on, 'images_per_second': round(rate, 1),
          'parallel_calls': calls, 'images_per_second_per_vcpu': round(rate / calls, 1)}


def floor(jpegs: list[bytes], size: int, args) -> dict:
  """One core decoding each JPEG's crop window and resizing it (data/pp/ops.py's fused decode and
  inception_crop), nothing else: images/second of the median timed pass over `jpegs`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (after data/'s no_keras)
  steps = ops.build(f'decode|inception_crop({size})')
  seeds = tf.random.experimental.stateless_split(tf.constant([0, 1], tf.int64), len(jpegs))
  dataset = tf.data.Dataset.from_tensor_slices((tf.constant(jpegs), seeds)).map(
      lambda image, seed: ops.apply(steps, {'image': image}, seed)['image'])
  options = tf.data.Options()
  options.threading.private_threadpool_size = 1
  options.threading.max_intra_op_parallelism = 1
  options.autotune.enabled = False
  dataset = dataset.with_options(options)
  ms = timing.time_ms(lambda: [None for _ in dataset], warmup=args.warmup, repeats=args.windows)
  return {'pp': f'decode|inception_crop({size}) on one core', 'images': len(jpegs),
          'images_per_second': round(len(jpegs) / ms * 1e3, 1)}


def training_pps() -> tuple[str, str]:
  """The training pp strings of the paper's configs (V-MoE's ImageNet-21k: RandAugment (2, 20))
  and of the ImageNet-1k rung (RandAugment (2, 10)), at 224 px."""
  return (common.get_paper_config('B/32', 'softmax_tc').data.pp_train,
          ilsvrc_s32.rung_config('softmax_tc', 1.0).data.pp_train)


def targets(rows: dict) -> dict:
  """Issue 51's host targets for the rung's pp on the device path: at least TARGET_PER_VCPU
  images/s a vCPU, and within TARGET_OF_FLOOR of the floor measured in the same run."""
  per_vcpu = rows['rung_device']['images_per_second_per_vcpu']
  of_floor = rows['floor']['images_per_second'] / per_vcpu
  return {'rung_device_per_vcpu': per_vcpu, 'per_vcpu_target': TARGET_PER_VCPU,
          'floor_over_rung_device': round(of_floor, 3), 'of_floor_target': TARGET_OF_FLOOR,
          'meets_targets': per_vcpu >= TARGET_PER_VCPU and of_floor <= TARGET_OF_FLOOR}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--images', type=int, default=300)
  parser.add_argument('--min-side', type=int, default=320)
  parser.add_argument('--max-side', type=int, default=500)
  parser.add_argument('--size', type=int, default=224, help='crop size (pixels)')
  parser.add_argument('--batch-size', type=int, default=64)
  parser.add_argument('--warmup', type=int, default=1, help='untimed windows')
  parser.add_argument('--windows', type=int, default=5)
  parser.add_argument('--window-batches', type=int, default=5)
  parser.add_argument('--out', default='bench/results/input_pipeline.json')
  args = parser.parse_args(argv)
  if min(args.images, args.size, args.batch_size, args.windows, args.window_batches) < 1 or (
      args.warmup < 0 or not 0 < args.min_side <= args.max_side):
    parser.error('sizes, counts and --min-side <= --max-side must be >= 1, --warmup >= 0')
  paper, rung = (pp.replace('224', str(args.size)) for pp in training_pps())
  tail = f'value_range(-1, 1)|onehot({NUM_CLASSES})|keep("image", "labels")'
  crop = f'inception_crop({args.size})'
  pps = {'randaug': (paper, 'host'), 'randaug_device': (paper, 'device'),
         'rung': (rung, 'host'), 'rung_device': (rung, 'device'),
         'no_randaug': (f'decode|{crop}|flip_lr|{tail}', 'host'),
         'full_decode': (f'decode|keep("image", "label")|{crop}|flip_lr|{tail}', 'host')}
  with tempfile.TemporaryDirectory() as directory:
    config, images = make_dataset(directory, args)
    rows = {name: images_per_second(config, pp, args, augment_on)
            for name, (pp, augment_on) in pps.items()}
    rows['floor'] = floor(images.pop('jpegs'), args.size, args)
  # data/ loaded TensorFlow after base/no_keras.py; a top-level import would come first, with Keras.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  result = {
      'images_per_second': {name: row['images_per_second'] for name, row in rows.items()},
      'images_per_second_per_vcpu': {name: row.get('images_per_second_per_vcpu',
                                                   row['images_per_second'])
                                     for name, row in rows.items()},
      'rows': rows, 'images': images, 'batch_size': args.batch_size, 'size': args.size,
      'targets': targets(rows),
      'method': f'median over {args.windows} windows of {args.window_batches} batches after '
                f'{args.warmup} untimed windows; {reader.parallel_calls()} parallel map calls '
                '(data.reader.parallel_calls), tf.data autotuning off; per vCPU: divided by '
                'them; floor: one tf.data thread over the JPEGs in memory, median of '
                f'{args.windows} passes',
      'machine': {**host.host(), 'tensorflow': tf.__version__},
  }
  print(json.dumps({'benchmark': 'input_pipeline', **result['images_per_second']}), flush=True)
  atomic.write_json(args.out, result)
  return result


if __name__ == '__main__':
  main()
