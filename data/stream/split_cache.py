"""What a split costs to compute once: its labels, and its arrays after the pp's leading `decode`.

Each is memoised per process and, for a prepared TFDS data set, kept in a file beside its data, so
later processes load it instead of reading the split again (for the labels of ImageNet's training
split that read is a pass over all its images). A file that does not match the split (another
version of it) is computed again; on a read-only data_dir the result stays in memory only.
"""
import functools
import os
import re
from typing import Callable

from absl import logging
import numpy as np

from base import atomic
from data import config as data_config_lib
from data.datasets import sources
from data.pp import ops
from data.stream import batches as batches_lib
from data.stream import orders
from data.stream import reader as reader_lib


@functools.lru_cache(maxsize=8)
def labels(source: data_config_lib.DataSource, split: str) -> np.ndarray:
  """The int 'label' of every record of `split`, from its label index file if there is one, else
  read (no image decoding) and saved to the index."""
  records = sources.open_split(source, split)
  path = records.label_index
  if path and os.path.exists(path):
    stored = np.load(path)
    if stored.shape == (records.num_examples,):
      return stored
  reader = reader_lib.Reader(records, [], '', None)
  result = _collect(reader, lambda example, _: {'label': example['label']})['label']
  if path and os.path.isdir(os.path.dirname(path)):
    _keep(path, result, 'the label index')
  return result


@functools.lru_cache(maxsize=4)
def decoded(source: data_config_lib.DataSource, split: str, prefix: tuple) -> dict:
  """{key: numpy array over all records} of `split` after the pp ops `prefix` (e.g. decode)."""
  records = sources.open_split(source, split)
  path = _decoded_file(records, prefix)
  if path and os.path.exists(path):
    with np.load(path) as stored:
      arrays = dict(stored)
    if arrays and all(len(a) == records.num_examples for a in arrays.values()):
      return arrays
  steps = ops.build('|'.join(prefix)) if prefix else []
  arrays = _collect(reader_lib.Reader(records, steps, '|'.join(prefix), None), lambda ex, _: ex)
  if path and all(a.dtype != object for a in arrays.values()):   # .npz loads no pickles.
    _keep(path, arrays, 'the decoded split')
  return arrays


def _decoded_file(records: sources.Records, prefix: tuple) -> str | None:
  """Where a split's arrays after the pp ops `prefix` are kept: beside its label index."""
  if not records.label_index:
    return None
  name = os.path.basename(records.label_index).removeprefix('labels-').removesuffix('.npy')
  ops_name = re.sub(r'[^\w.%-]', '_', '|'.join(prefix) or 'none')
  return os.path.join(os.path.dirname(records.label_index), f'decoded-{name}-{ops_name}.npz')


def _collect(reader: reader_lib.Reader, select: Callable) -> dict:
  """Runs reader.steps over every record and stacks select(example, seed) into numpy arrays."""
  n = reader.records.num_examples
  parts = list(batches_lib.Batches(reader, orders.OnePass(np.arange(n)), 1024, select=select))
  try:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  except ValueError as e:
    raise ValueError(f'data.cache=True needs every example of {reader.records.description} to '
                     f'have the same shape after "{reader.pp}" ({e}); set data.cache=False.'
                     ) from None


def _keep(path: str, value, what: str) -> None:
  """Saves `value` for later processes; on a read-only data_dir only warns (it stays in memory)."""
  try:
    _save_atomically(path, value)
  except OSError as e:
    logging.warning('Cannot save %s %s: %s', what, path, e)


def _save_atomically(path: str, value) -> None:
  """Writes an array (.npy) or a dict of arrays (.npz) to path (base.atomic: readable by other
  users of a shared data_dir, never seen half-written)."""
  with atomic.writing(path) as f:
    if isinstance(value, dict):
      np.savez(f, **value)
    else:
      np.save(f, value)
