"""Random access to record files, and the multi-label (JFT-style) record format.

Multi-label records (`name: 'multilabel_records'`): serialized tf.train.Example protos, one image
each, in TFRecord or ArrayRecord files, with the features
  image   bytes   the encoded image (JPEG, PNG, GIF, BMP or WebP)
  labels  int64*  the image's class ids, each in [0, num_classes); any number, also none
  key     bytes   optional: the image's name, shown in error messages
`write_multilabel` writes a file of them, decoding each image once as the ImageNet-21k builder does
(data/datasets/image_check.py): CMYK, PNG or GIF images are stored re-encoded as RGB JPEGs,
undecodable ones are left out, and PATH.metadata.json lists both. A user with JFT-like data converts
it once into this form (one call per file; `serialize_example` is one record, unchecked) and sets
  data.name='multilabel_records', data.files='/data/jft/{split}-*.tfrecord', data.file_format=
  'tfrecord' (or 'array_record'), data.pp_train='decode|...|multi_hot(NUM_CLASSES)|keep(...)'.

Random access. ArrayRecord files index their records themselves. TFRecord files have no index, so
`RecordFiles` builds one: it walks each file's record headers (8-byte length, 4-byte CRC), seeking
over the payloads; that reads 16 bytes per record.
Payload CRCs are not checked: a damaged record fails when parsed or decoded, and the pipeline then
reports it with the `locate` text (file and record number).
"""
import bisect
import glob
import os
import struct
import threading
from typing import Iterable, Sequence

from array_record.python import array_record_data_source
from array_record.python import array_record_module
import numpy as np
import tensorflow as tf

from base import atomic
from data.datasets import image_check

FILE_FORMATS = ('tfrecord', 'array_record')

MULTILABEL_FEATURES = {
    'image': tf.io.FixedLenFeature([], tf.string),
    'labels': tf.io.VarLenFeature(tf.int64),
    'key': tf.io.FixedLenFeature([], tf.string, default_value=''),
}


def serialize_example(image: bytes, labels, key: str = '') -> bytes:
  """One multi-label record: encoded image bytes, a list of int class ids and an optional name."""
  feature = {
      'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
      'labels': tf.train.Feature(int64_list=tf.train.Int64List(value=[int(i) for i in labels])),
      'key': tf.train.Feature(bytes_list=tf.train.BytesList(value=[key.encode()])),
  }
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class RecordWriter:
  """Serialized records into one new TFRecord or ArrayRecord file (a context manager).

  ArrayRecord files get group_size:1, so that each record is read on its own (what TFDS writes
  for random access). The records go to PATH.incomplete, renamed to PATH once all are written and
  the file closed: a killed writer never leaves a short file under the final name.
  """

  def __init__(self, path: str, file_format: str):
    _check_format(file_format)
    self._path, self._partial = path, path + '.incomplete'
    if file_format == 'tfrecord':
      self._writer = tf.io.TFRecordWriter(self._partial)
    else:
      self._writer = array_record_module.ArrayRecordWriter(self._partial, 'group_size:1')

  def write(self, record: bytes) -> None:
    self._writer.write(record)

  def close(self) -> None:
    """Closes the file and gives it its final name."""
    self._writer.close()
    os.replace(self._partial, self._path)

  def __enter__(self):
    return self

  def __exit__(self, exc_type, *exc_info):
    if exc_type is None:
      self.close()
    else:   # Left as PATH.incomplete, never under the name a reader looks for.
      self._writer.close()


def write_multilabel(path: str, examples: Iterable[tuple[bytes, Sequence[int], str]],
                     file_format: str, workers: int | None = None) -> dict:
  """Writes (image bytes, class ids, key) examples as multi-label records to the file `path`.

  Each image is decoded once, in `workers` threads (None: os.cpu_count()), by
  image_check.clean_all: stored as is, re-encoded as an RGB JPEG, or left out. Returns the
  metadata written to PATH.metadata.json: {'records': the number written, image_check.SKIPPED
  and REENCODED: [{'name': key, 'reason'}]}. Keep that file out of data.files' glob (end the glob
  in the records' extension).
  """
  listing = {}
  items = ((key, labels, image) for image, labels, key in examples)
  count = 0
  with RecordWriter(path, file_format) as writer:
    for key, labels, image in image_check.clean_all(items, workers or os.cpu_count() or 1,
                                                    listing):
      writer.write(serialize_example(image, labels, key))
      count += 1
  metadata = {'records': count, **listing}
  atomic.write_json(path + '.metadata.json', metadata)
  return metadata


def parse_multilabel(serialized: tf.Tensor) -> dict:
  """Graph function: serialized record -> {'image': bytes, 'labels': int64 (n,), 'key': bytes}."""
  example = tf.io.parse_single_example(serialized, MULTILABEL_FEATURES)
  return {**example, 'labels': tf.sparse.to_dense(example['labels'])}


def _check_format(file_format: str) -> None:
  if file_format not in FILE_FORMATS:
    raise ValueError(f'unknown file_format {file_format!r}; valid: {", ".join(FILE_FORMATS)}.')


def match_files(pattern: str) -> list[str]:
  """Sorted files matching a glob; an empty match fails naming the pattern."""
  files = sorted(glob.glob(os.path.expanduser(pattern)))
  if not files:
    raise FileNotFoundError(f'no files match {pattern!r}')
  return files


class RecordFiles:
  """Records of a list of files, addressed by one global index (file order, then position)."""

  def __init__(self, files: list[str], file_format: str):
    _check_format(file_format)
    self.files = list(files)
    self.file_format = file_format
    self._lock = threading.Lock()
    if file_format == 'array_record':
      self._array_records = array_record_data_source.ArrayRecordDataSource(self.files)
      counts = [_array_record_count(f) for f in self.files]
    else:
      self._offsets = [_tfrecord_offsets(f) for f in self.files]
      self._handles = {}
      counts = [len(o) for o in self._offsets]
    self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

  def __len__(self) -> int:
    return int(self._starts[-1])

  def locate(self, index: int) -> str:
    """'FILE record N' for a global index."""
    f = bisect.bisect_right(self._starts, index) - 1
    return f'{self.files[f]} record {index - self._starts[f]}'

  def read(self, indices) -> list[bytes]:
    """The serialized records at `indices` (global), in that order."""
    indices = [int(i) for i in indices]
    for i in indices:
      if not 0 <= i < len(self):
        raise IndexError(f'record {i} out of range: {len(self)} records in {len(self.files)} files')
    if self.file_format == 'array_record':
      return list(self._array_records.__getitems__(indices))
    with self._lock:   # tf.data may call from several threads; file handles are shared.
      return [self._read_tfrecord(i) for i in indices]

  def _read_tfrecord(self, index: int) -> bytes:
    f = bisect.bisect_right(self._starts, index) - 1
    handle = self._handles.get(f)
    if handle is None:
      handle = self._handles[f] = open(self.files[f], 'rb')  # pylint: disable=consider-using-with
    offset = self._offsets[f][index - self._starts[f]]
    handle.seek(offset)
    header = handle.read(12)
    (length,) = struct.unpack('<Q', header[:8])
    data = handle.read(length)
    if len(data) != length:
      raise ValueError(f'{self.locate(index)}: truncated record ({len(data)} of {length} bytes)')
    return data


def _array_record_count(path: str) -> int:
  reader = array_record_module.ArrayRecordReader(path)
  try:
    return reader.num_records()
  finally:
    reader.close()


def _tfrecord_offsets(path: str) -> np.ndarray:
  """Byte offsets of the records of a TFRecord file, from its headers (no payload is read).

  TFRecord layout, per record: uint64 length, uint32 masked CRC of the length, `length` bytes of
  payload, uint32 masked CRC of the payload (all little-endian).
  """
  offsets = []
  size = os.path.getsize(path)
  with open(path, 'rb') as f:
    offset = 0
    while offset < size:
      header = f.read(12)
      if len(header) < 12:
        raise ValueError(f'{path}: truncated TFRecord header at byte {offset}; the file is damaged')
      (length,) = struct.unpack('<Q', header[:8])
      offsets.append(offset)
      offset += 12 + length + 4
      if offset > size:
        raise ValueError(f'{path}: record {len(offsets) - 1} at byte {offsets[-1]} runs past the '
                         'end of the file; the file is truncated')
      f.seek(offset)
  return np.asarray(offsets, np.int64)
