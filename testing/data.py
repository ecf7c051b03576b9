"""Generated inputs for the data tests and the dress rehearsal (launch/rehearsal.py): data configs,
small JPEGs, photograph-sized JPEGs and multi-label record files."""
import io
import os

import numpy as np
from PIL import Image

from data import config as data_config_lib
from data.datasets import records
# pylint: disable-next=unused-import  (the tests' name for it)
from data.datasets.imagenet21k import photo


# The multi-label records' pp (data/conftest.py's `multilabel` set): 4 px, 8 classes, and the key.
MULTILABEL_PP = 'decode|resize(4)|value_range(0, 1)|multi_hot(8)|keep("image", "labels", "key")'


def data_config(**overrides) -> data_config_lib.DataConfig:
  """A data section of digits (unless overridden), as the pipeline reads it."""
  num_classes = overrides.get('num_classes', 10)
  pp = f'decode(channels=1)|value_range(-1, 1)|onehot({num_classes})|keep("image", "labels")'
  config = dict(name='digits', train_split='train', eval_split='test', pp_train=pp, pp_eval=pp,
                num_classes=10, shuffle_buffer=10_000)
  return data_config_lib.DataConfig(**{**config, **overrides})


def jpeg(seed: int, size=(12, 10)) -> bytes:
  """A small random RGB JPEG (height, width = size)."""
  return encoded(seed, size, 'JPEG')


def encoded(seed: int, size, image_format: str, mode: str = 'RGB') -> bytes:
  """Random pixels (height, width = size) in Pillow's `image_format`, converted to `mode`."""
  pixels = np.random.default_rng(seed).integers(0, 256, tuple(size) + (3,), dtype=np.uint8)
  buffer = io.BytesIO()
  quality = {'quality': 90} if image_format == 'JPEG' else {}
  Image.fromarray(pixels).convert(mode).save(buffer, format=image_format, **quality)
  return buffer.getvalue()


# Each kind of odd member a real image archive holds under a .JPEG name, besides RGB JPEGs.
UNDECODABLE = ('truncated', 'empty', 'not_an_image')
CONVERTIBLE = ('cmyk', 'png', 'gif')


def odd_images(seed: int, size=(12, 10)) -> dict[str, bytes]:
  """{kind: bytes} for the kinds in UNDECODABLE and CONVERTIBLE."""
  good = jpeg(seed, size)
  return {
      'truncated': good[:-10],          # Loses its end-of-image marker and the scan's last bytes.
      'empty': b'',
      'not_an_image': b'<html>404 Not Found</html>',
      'cmyk': encoded(seed, size, 'JPEG', 'CMYK'),
      'png': encoded(seed, size, 'PNG'),
      'gif': encoded(seed, size, 'GIF', 'P'),
  }


def write_multilabel(directory, name: str, num_records: int, file_format: str,
                     num_files: int = 2, corrupt=()) -> str:
  """Writes `num_records` multi-label records over `num_files` files; returns their glob.

  Record i has labels [i % 5, 5 + i % 3] and key 'img{i}'; records in `corrupt` hold bytes that
  are no image.
  """
  os.makedirs(directory, exist_ok=True)
  per_file = np.array_split(np.arange(num_records), num_files)
  for f, indices in enumerate(per_file):
    path = os.path.join(directory, f'{name}-{f:05d}.{file_format}')
    serialized = [records.serialize_example(
        b'not an image' if i in corrupt else jpeg(int(i)), [i % 5, 5 + i % 3], f'img{i}')
        for i in indices]
    with records.RecordWriter(path, file_format) as writer:
      for s in serialized:
        writer.write(s)
  return os.path.join(directory, f'{name}-*.{file_format}')
