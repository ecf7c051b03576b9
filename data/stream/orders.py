"""Orders: which record the k-th example of a stream reads, and the seed position its pp ops get.

An order is a pure function of its arguments, so a stream can start at any position without
replaying the ones before it (data/stream/pipeline.py states the contract this implements):
  EpochOrder  endless epochs over a host's shard, each in an order drawn from (seed, host, epoch);
              seed position = stream position.
  OnePass     a fixed list of records read once (eval and few-shot pad it with masked repeats:
              `padded`); seed position = record index.
Both give `slots(start)`, the (seed position, record index) elements from stream position `start`
on, for data/stream/reader.py, and `slot(k)` for the k-th alone; `masks(start)` the float32 'mask'
of each element, or None when every element is real.

`without_autograph` marks the functions the stream's modules hand to tf.data (orders, reader,
batches, data/prepare.py): tf.data runs AutoGraph over every function given to Dataset.map or
flat_map, rewriting Python `if`, `for` and `while` on tensors into graph control flow, and pays for
it in Python (its converters load on first use) in every process that builds a pipeline. These
functions need no rewriting: their control flow is graph ops already (tf.where, tf.while_loop,
tf.switch_case in data/pp/randaug.py), and their Python `if`s test static facts (dtypes, shapes, pp
arguments). A function that branched in Python on a tensor's value would fail to trace, with
TensorFlow's error, rather than be rewritten.
"""
import dataclasses

import numpy as np
import tensorflow as tf


def without_autograph(fn):
  """`fn`, for tf.data to trace without AutoGraph's conversion (of it or what it calls)."""
  return tf.autograph.experimental.do_not_convert(fn)


def host_range(num_examples: int, process_index: int, process_count: int) -> tuple[int, int]:
  """[start, stop) of host process_index's contiguous shard of num_examples records."""
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index={process_index} not in [0, {process_count})')
  return (num_examples * process_index // process_count,
          num_examples * (process_index + 1) // process_count)


class EpochOrder:
  """Stream position t (0, 1, ...) -> record index, over endless epochs of a shard [start, stop).

  The train order of data/stream/pipeline.py's contract: epoch e, drawn from (seed, process_index,
  e), is a uniform permutation, or with a shuffle_buffer smaller than the shard the imitation of a
  tf.data shuffle buffer's locality (docs/fidelity.md D11).
  """

  def __init__(self, start: int, stop: int, seed: int, process_index: int, shuffle_buffer: int):
    self.start, self.size = start, stop - start
    self.seed, self.process_index, self.shuffle_buffer = seed, process_index, shuffle_buffer
    self._last = (-1, None)   # (epoch, order): one tuple, so concurrent readers see a pair.

  def epoch(self, epoch: int) -> np.ndarray:
    """The shard's record indices in the order epoch `epoch` visits them (the last one is kept:
    resuming recomputes one epoch's order, and reading goes through epochs one after another)."""
    last_epoch, order = self._last
    if epoch != last_epoch:
      rng = np.random.default_rng([self.seed, self.process_index, epoch])
      if self.shuffle_buffer >= self.size:
        order = self.start + rng.permutation(self.size)
      else:
        keys = np.arange(self.size) + self.shuffle_buffer * rng.random(self.size)
        order = self.start + np.argsort(keys, kind='stable')
      self._last = (epoch, order)
    return order

  def slot(self, k: int) -> tuple[int, int]:
    """(seed position, record index) of stream position k."""
    return k, int(self.epoch(k // self.size)[k % self.size])

  def slots(self, start: int) -> tf.data.Dataset:
    """(seed position, record index) elements from stream position `start` on, forever."""
    first_epoch, offset = divmod(start, self.size)

    def epoch_slots(epoch):
      order = tf.numpy_function(lambda e: self.epoch(int(e)), [epoch], tf.int64, stateful=False)
      order = tf.ensure_shape(order, [self.size])
      skip = tf.where(epoch == first_epoch, tf.constant(offset, tf.int64), 0)
      positions = epoch * self.size + tf.range(skip, self.size)
      return tf.data.Dataset.from_tensor_slices((positions, order[skip:]))
    epoch_slots = without_autograph(epoch_slots)
    return tf.data.Dataset.range(first_epoch, 2**62).flat_map(epoch_slots)

  def masks(self, start: int) -> None:
    """None: every example of the endless stream is real."""
    del start


@dataclasses.dataclass(frozen=True)
class OnePass:
  """Records `indices` read once in that order; mask: float32, 1 for a real example and 0 for
  padding (None: no 'mask', every example real). Seeds follow the record index, so an example's
  augmentation does not depend on where in the pass it falls."""
  indices: np.ndarray
  mask: np.ndarray | None = None

  def slot(self, k: int) -> tuple[int, int] | None:
    """(seed position, record index) of the k-th example, or None past the end."""
    if k >= len(self.indices):
      return None
    return int(self.indices[k]), int(self.indices[k])

  def slots(self, start: int) -> tf.data.Dataset:
    """(seed position, record index) elements from the start-th example to the end."""
    indices = np.asarray(self.indices[start:], np.int64)
    return tf.data.Dataset.from_tensor_slices((indices, indices))

  def masks(self, start: int) -> tf.data.Dataset | None:
    """The 'mask' of each example from the start-th on, or None."""
    return None if self.mask is None else tf.data.Dataset.from_tensor_slices(self.mask[start:])


def padded(indices: np.ndarray, size: int) -> OnePass:
  """A pass over `indices` padded to `size` by repeating a record (the first, or record 0) with
  mask 0, so that every batch is full and each real example counts exactly once."""
  pad = size - len(indices)
  filler = indices[0] if len(indices) else 0
  return OnePass(np.concatenate([indices, np.full(pad, filler)]).astype(np.int64),
                 np.concatenate([np.ones(len(indices)), np.zeros(pad)]).astype(np.float32))
