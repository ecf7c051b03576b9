"""Generated inputs for the data tests: data configs, small JPEGs and multi-label record files."""
import io
import os

from array_record.python import array_record_module
import numpy as np
from PIL import Image
import tensorflow as tf

from data import config as data_config_lib
from data import records


def data_config(**overrides) -> data_config_lib.DataConfig:
  """A data section of digits (unless overridden), as the pipeline reads it."""
  pp = 'decode(channels=1)|value_range(-1, 1)|onehot(10)|keep("image", "labels")'
  config = dict(name='digits', train_split='train', eval_split='test', pp_train=pp, pp_eval=pp,
                num_classes=10, shuffle_buffer=10_000)
  return data_config_lib.DataConfig(**{**config, **overrides})


def jpeg(seed: int, size=(12, 10)) -> bytes:
  """A small random RGB JPEG (height, width = size)."""
  pixels = np.random.default_rng(seed).integers(0, 256, size + (3,), dtype=np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, format='JPEG', quality=90)
  return buffer.getvalue()


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
    if file_format == 'tfrecord':
      with tf.io.TFRecordWriter(path) as writer:
        for s in serialized:
          writer.write(s)
    else:
      writer = array_record_module.ArrayRecordWriter(path, 'group_size:1')
      for s in serialized:
        writer.write(s)
      writer.close()
  return os.path.join(directory, f'{name}-*.{file_format}')
