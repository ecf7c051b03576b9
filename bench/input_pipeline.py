"""Images per second of the training input pipeline at 224 px (a benchmark, not a test).

  python -m bench.input_pipeline --out bench/results/input_pipeline.json     # as `make bench`

Writes an ImageNet-21k archive of random photo-sized JPEGs (default 300 of 320..500 px a side,
about 100 kB each, near ImageNet's average of about 110 kB, so decoding costs what photos cost),
builds it with the ImageNet-21k TFDS builder, and times data.pipeline.make_train_iterator with
V-MoE's ImageNet-21k training pp (inception crop, flip, RandAugment(2, 20)) and without randaug:
the median images/second over timed windows of batches. Compare it with the training
step's images/second to know whether input or model bounds a step on this host.
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
from data import config as data_config
from data import imagenet21k
from data import pipeline
from data import reader

NUM_CLASSES = 21_843       # V-MoE's ImageNet-21k head.
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
                  'side_px': [args.min_side, args.max_side]}


def images_per_second(config, pp: str, args) -> dict:
  """Images/second of the median timed window (--window-batches batches) after --warmup."""
  iterator = pipeline.make_train_iterator(dataclasses.replace(config, pp_train=pp),
                                          batch_size=args.batch_size, seed=0)
  window = lambda: [next(iterator) for _ in range(args.window_batches)]
  ms = timing.time_ms(window, warmup=args.warmup, repeats=args.windows)
  return {'pp': pp, 'images_per_second': round(args.window_batches * args.batch_size / ms * 1e3, 1)}


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
  tail = f'value_range(-1, 1)|onehot({NUM_CLASSES})|keep("image", "labels")'
  pps = {'randaug': f'decode|inception_crop({args.size})|flip_lr|randaug(2, 20)|{tail}',
         'no_randaug': f'decode|inception_crop({args.size})|flip_lr|{tail}'}
  with tempfile.TemporaryDirectory() as directory:
    config, images = make_dataset(directory, args)
    rows = {name: images_per_second(config, pp, args) for name, pp in pps.items()}
  # data/ loaded TensorFlow after base/no_keras.py; a top-level import would come first, with Keras.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  result = {
      'images_per_second': {name: row['images_per_second'] for name, row in rows.items()},
      'rows': rows, 'images': images, 'batch_size': args.batch_size, 'size': args.size,
      'method': f'median over {args.windows} windows of {args.window_batches} batches after '
                f'{args.warmup} untimed windows; {reader.parallel_calls()} parallel map calls '
                '(data.reader.parallel_calls), tf.data autotuning off',
      'machine': {**host.host(), 'tensorflow': tf.__version__},
  }
  print(json.dumps({'benchmark': 'input_pipeline', **result['images_per_second']}), flush=True)
  atomic.write_json(args.out, result)
  return result


if __name__ == '__main__':
  main()
