"""Numpy batches of a reader's examples in an order's sequence, with a position that resumes.

Batches composes a data/stream/reader.py Reader (what the records hold) with a data/stream/orders.py
order (which record comes next, and its seed position): train and eval iterators are the same class
over different orders. The pp ops of the example at seed position t get base_seed folded with t.
"""
from typing import Callable

import numpy as np
import tensorflow as tf

from base import errors
from data.pp import ops
from data.stream import orders as orders_lib
from data.stream import reader as reader_lib

PREFETCH = 2        # Batches prepared ahead of the consumer.


class CorruptRecordError(errors.UserError):
  """A record that cannot be read, parsed or preprocessed; the one-line message says which and how
  to list the others. A UserError: main.py ends the run with that line and exit status 2."""


def _finish(ds: tf.data.Dataset) -> tf.data.Dataset:
  """Prefetches PREFETCH batches, with tf.data autotuning off (see reader.parallel_calls)."""
  options = tf.data.Options()
  options.autotune.enabled = False
  return ds.prefetch(PREFETCH).with_options(options)


class Batches:
  """Iterator of numpy batches of `batch_size` examples of `reader` in the sequence of `order`.

  order: an EpochOrder (endless) or a OnePass (which adds 'mask' when it has one).
  select: fn(processed example, its seed) -> what to keep of it, e.g. data/stream/shipping.py's
  (None: all of it). identity: what the batches
  depend on besides the position (seed, batch size, ...); get_state() records it and set_state()
  refuses a state with another.
  """

  def __init__(self, reader: reader_lib.Reader, order: orders_lib.EpochOrder | orders_lib.OnePass,
               batch_size: int, *, base_seed=(0, 0),
               select: Callable[[dict, tf.Tensor], dict] | None = None,
               identity: dict | None = None):
    self.reader, self.order, self.batch_size = reader, order, batch_size
    self._base_seed = np.asarray(base_seed, np.int64)
    self._select, self._identity = select, dict(identity or {})
    self._batches = 0
    self._iterator = None
    # Built (traced) now, so that bad pp strings fail here; the first pass from batch 0 uses it
    # rather than tracing the pipeline a second time.
    self._built = (0, self.dataset(0))

  def __iter__(self):
    return self

  def _process(self) -> Callable[[tf.Tensor, dict], dict]:
    """(seed position t, example) -> the example after the pp steps seeded with t, selected."""
    steps, base, select = self.reader.steps, tf.constant(self._base_seed), self._select

    def fn(t, example):
      seed = tf.random.experimental.stateless_fold_in(base, t)
      example = ops.apply(steps, example, seed)
      return select(example, seed) if select else example
    return fn

  def dataset(self, start_batch: int) -> tf.data.Dataset:
    """The tf.data pipeline of the batches from batch `start_batch` on."""
    begin = start_batch * self.batch_size
    process = orders_lib.without_autograph(self._process())
    ds = self.reader.examples(self.order.slots(begin)).map(
        process, num_parallel_calls=reader_lib.parallel_calls())
    masks = self.order.masks(begin)
    if masks is not None:
      with_mask = orders_lib.without_autograph(lambda ex, m: {**ex, 'mask': m})
      ds = tf.data.Dataset.zip(ds, masks).map(with_mask)
    # An endless order's batches are all full; a pass padded by orders.padded too. Only an
    # unpadded pass (split_cache's collection of a whole split) ends with a shorter one.
    return _finish(ds.batch(self.batch_size))

  def __next__(self) -> dict:
    if self._iterator is None:
      start, ds = self._built
      if start != self._batches:
        ds = self.dataset(self._batches)
      self._built = (self._batches, ds)
      self._iterator = ds.as_numpy_iterator()
    try:
      batch = next(self._iterator)
    except tf.errors.OpError as e:
      report = self._diagnose()
      if report is None:
        raise
      raise CorruptRecordError(f'{report.rstrip(".")}. Fix or remove it; this lists every bad '
                               f'record of the split: {self.reader.records.check}') from e
    self._batches += 1
    return batch

  def _diagnose(self) -> str | None:
    """Re-runs the examples of the failing batch (and the prefetched ones) one by one, eagerly;
    returns a report on the first that fails, or None."""
    process = self._process()
    first = self._batches * self.batch_size
    for k in range(first, first + (1 + PREFETCH) * self.batch_size):
      slot = self.order.slot(k)
      if slot is None:
        break
      position, index = slot
      report = self.reader.failure(
          index, lambda example: process(tf.constant(position, tf.int64), example))
      if report is not None:
        return report
    return None

  def get_state(self) -> dict:
    """A small JSON-serialisable dict: the batches yielded so far and what they depend on."""
    return {**self._identity, 'batches': self._batches}

  def set_state(self, state: dict) -> None:
    """Continues exactly where the iterator that produced `state` stopped."""
    self._batches = resume_position(self._identity, state)
    self._iterator = None


def resume_position(identity: dict, state: dict) -> int:
  """The batch count of `state`, after checking that it identifies the same batches."""
  for key, value in identity.items():
    if state.get(key) != value:
      raise ValueError(
          f'data iterator state has {key}={state.get(key)!r} but this run has {value!r}: the '
          'saved position does not identify the same batches. Resume with the same seed, '
          'batch_size, number of processes and data, or start a new workdir.')
  if not isinstance(state.get('batches'), int) or state['batches'] < 0:
    raise ValueError(f'data iterator state has no valid "batches" count: {state!r}')
  return state['batches']
