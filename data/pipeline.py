"""Train, eval and few-shot iterators: records by index -> pp ops -> numpy batches.

Every iterator reads its split by record index (sources.Records), so the order of the examples is
a pure function and nothing has to be replayed to resume:
  train   each host owns a contiguous shard of the split (host p: records [N p / P, N (p+1) / P)).
          Epoch e visits the shard in an order drawn from (seed, p, e): with data.shuffle_buffer
          >= the shard size a uniform permutation; with a smaller buffer W each record moves about
          W places from its stored position (sorted by position + W * U(0, 1)), the locality of
          a tf.data shuffle buffer of W; W = 1 keeps the stored order. Epochs follow each other
          without a gap, so a batch may span two epochs. The pp ops of the example at stream
          position t get the seed (seed, p) folded with t.
          State: the number of batches yielded. Resuming at batch n recomputes one epoch order
          (a permutation of the shard: about 1 s per 10 million records) and starts reading at
          position n * B_local: no decoding, augmenting or reading of earlier examples.
  eval    one pass over the split in stored order; each host reads its shard; every host yields
          the same number of batches (ceil(ceil(N / P) / B_local)); padding repeats a record with
          'mask' 0, so each example counts exactly once.
  fewshot exactly `shots` records per class, drawn with `seed`, in index order, padded like eval.
data.cache=True decodes the split once (the pp's leading `decode`) and keeps the arrays in memory
(per process, the 4 most recent splits), for the small embedded sets.

A record that fails (undecodable image, label out of range) stops the iterator with
CorruptRecordError naming the file and record number (and the record's key or file name); it is
never skipped.
"""
import dataclasses
import functools
import math
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

from base import atomic
from base import shot_sampling
from data import config as data_config_lib
from data import ops
from data import sources

CHUNK = 64          # Records fetched per Python call into the reader.
PREFETCH = 2        # Batches prepared ahead of the consumer.
STATE_VERSION = 1
# Parallel map calls. Not tf.data.AUTOTUNE: autotuning runs a model thread that an iterator's
# destructor joins, and that thread can sit out its optimisation period (tens of seconds) before
# it sees the cancellation, while the destructor holds the GIL. Measured on 2026-11-23 (tiny
# config, 2 concurrent runs): 4 of 12 runs stalled 35-50 s at exit in
# RootDataset::Iterator::~Iterator -> Model::OptimizeLoop (gdb), and the stall freezes every
# Python thread, asynchronous checkpoint saves included. Eval iterators are dropped mid-run too.
PARALLEL_CALLS = max(1, min(8, os.cpu_count() or 1))


def _finish(ds: tf.data.Dataset) -> tf.data.Dataset:
  """Prefetches PREFETCH batches, with tf.data autotuning off (see PARALLEL_CALLS)."""
  options = tf.data.Options()
  options.autotune.enabled = False
  return ds.prefetch(PREFETCH).with_options(options)


class CorruptRecordError(ValueError):
  """A record that cannot be read, parsed or preprocessed; the message says where it is."""


# ---------------------------------------------------------------------------------------------
# Public API.


def make_train_iterator(data_config: data_config_lib.DataConfig, *, batch_size: int, seed: int,
                        process_index: int = 0, process_count: int = 1) -> 'TrainIterator':
  """Infinite, seeded, resumable iterator over this host's shard of data_config.train_split.

  Yields {key: numpy array} batches of batch_size // process_count examples as the pp string
  data_config.pp_train makes them (the trainer expects 'image' float32 (B, H, W, C) and 'labels'
  float32 (B, num_classes)). get_state() / set_state() save and restore the position.
  """
  local = _local_batch_size(batch_size, process_count, 'batch_size')
  if not isinstance(seed, int) or seed < 0:
    raise ValueError(f'seed must be a non-negative int, got {seed!r}')
  reader = _reader(data_config, data_config.train_split, data_config.pp_train)
  start, stop = _host_range(reader.records.num_examples, process_index, process_count)
  if stop == start:
    raise ValueError(f'{reader.records.description} has {reader.records.num_examples} records, '
                     f'none for host {process_index} of {process_count}.')
  order = EpochOrder(start, stop, seed, process_index, data_config.shuffle_buffer)
  state = {'version': STATE_VERSION, 'seed': seed, 'batch_size': batch_size,
           'process_count': process_count, 'num_examples': reader.records.num_examples}
  return TrainIterator(reader, local, order, np.array([seed, process_index], np.int64), state)


def make_eval_iterator(data_config: data_config_lib.DataSource, split: str, *, batch_size: int,
                       pp: str | None = None, process_index: int = 0,
                       process_count: int = 1) -> 'Batches':
  """One pass over this host's shard of `split`, batches of batch_size // process_count with a
  float32 'mask' (1 real, 0 padding). data_config: a data section, or a few-shot set's source;
  pp: a pp string (None: the data section's pp_eval)."""
  local = _local_batch_size(batch_size, process_count, 'batch_size')
  reader = _reader(data_config, split, data_config.pp_eval if pp is None else pp)
  num_examples = reader.records.num_examples
  start, stop = _host_range(num_examples, process_index, process_count)
  num_batches = math.ceil(math.ceil(num_examples / process_count) / local)
  return Batches(reader, local, _padded(np.arange(start, stop), num_batches * local))


def fewshot_batches(data_config: data_config_lib.DataSource, split: str, *, shots: int, seed: int,
                    pp: str, batch_size: int) -> 'Batches':
  """Batches (with 'mask') of exactly `shots` examples per class of `split`, drawn with `seed`.

  The same seed gives the same examples. All classes of the source count; one with fewer than
  `shots` examples in the split fails naming it. The pp string decides the keys (few-shot
  evaluators keep the int 'label').
  """
  reader = _reader(data_config, split, pp)
  if reader.records.num_classes is None:
    raise ValueError(f'few-shot needs a single-label source (an int "label"); '
                     f'{reader.records.description} is multi-label.')
  labels = split_labels(data_config, split)
  chosen = shot_sampling.sample_shots(labels, reader.records.num_classes, shots, seed,
                                      reader.records.description)
  return Batches(reader, batch_size, _padded(chosen, math.ceil(len(chosen) / batch_size) *
                                             batch_size))


def split_labels(data_config: data_config_lib.DataSource, split: str) -> np.ndarray:
  """The int 'label' of every record of `split`: read once (no image decoding), then kept in
  memory and, for a prepared TFDS data set, in a label index file beside its data."""
  return _labels(data_config.source, split)


# ---------------------------------------------------------------------------------------------
# Reading examples by index.


@dataclasses.dataclass(frozen=True)
class Reader:
  """A split's examples by index: parsed records, or decoded arrays when the split is cached.

  steps: the pp steps still to run (all of them, or those after the cached `decode`).
  """
  records: sources.Records
  steps: list
  pp: str
  cached: dict | None

  def examples(self, chunks: tf.data.Dataset) -> tf.data.Dataset:
    """(positions, indices) chunks -> (position, example before `steps`) elements."""
    if self.cached is not None:
      arrays = {k: tf.constant(v) for k, v in self.cached.items()}
      return chunks.unbatch().map(
          lambda t, i: (t, {k: tf.gather(a, i) for k, a in arrays.items()}))

    def fetch(indices):
      return np.array(self.records.read(indices), dtype=object)

    def read(t, i):
      serialized = tf.numpy_function(fetch, [i], tf.string, stateful=False)
      return t, tf.ensure_shape(serialized, [None])
    return chunks.map(read).unbatch().map(lambda t, s: (t, self.records.parse(s)),
                                          num_parallel_calls=PARALLEL_CALLS)

  def example(self, index: int) -> dict:
    """One example before `steps`, computed eagerly (for error reports)."""
    if self.cached is not None:
      return {k: tf.constant(v[index]) for k, v in self.cached.items()}
    return self.records.parse(tf.constant(self.records.read([index])[0]))


def _reader(data_config: data_config_lib.DataSource, split: str, pp: str) -> Reader:
  records = sources.open_split(data_config, split)
  steps = ops.build(pp)
  if not data_config.cache:
    return Reader(records, steps, pp, None)
  decoded = 1 if steps[0].name == 'decode' else 0   # The cache holds examples after `decode`.
  prefix = tuple(s.spec for s in steps[:decoded])
  return Reader(records, steps[decoded:], pp, _cached(data_config.source, split, prefix))


def _index_chunks(indices: np.ndarray, positions: np.ndarray) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (np.asarray(positions, np.int64), np.asarray(indices, np.int64))).batch(CHUNK)


@functools.lru_cache(maxsize=4)
def _cached(source: data_config_lib.DataSource, split: str, prefix: tuple) -> dict:
  """{key: numpy array over all records} of `split` after the pp ops `prefix` (e.g. decode).

  For a prepared TFDS data set the arrays are also kept in a file beside its data (next to the
  label index), so that later processes load them instead of decoding the split again
  (Fashion-MNIST's 60,000 training images: 21 s to decode, well under 1 s to load).
  """
  records = sources.open_split(source, split)
  path = _decoded_file(records, prefix)
  if path and os.path.exists(path):
    with np.load(path) as stored:
      arrays = dict(stored)
    if arrays and all(len(a) == records.num_examples for a in arrays.values()):
      return arrays
  steps = ops.build('|'.join(prefix)) if prefix else []
  arrays = _collect(Reader(records, steps, '|'.join(prefix), None), lambda example: example)
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


@functools.lru_cache(maxsize=8)
def _labels(source: data_config_lib.DataSource, split: str) -> np.ndarray:
  """The split's labels: from its label index file if there is one, else read (and saved to the
  index: reading ImageNet's 1.28M training records for their labels is a pass over 140 GB)."""
  records = sources.open_split(source, split)
  path = records.label_index
  if path and os.path.exists(path):
    labels = np.load(path)
    if labels.shape == (records.num_examples,):
      return labels
  reader = Reader(records, [], '', None)
  labels = _collect(reader, lambda example: {'label': example['label']})['label']
  if path and os.path.isdir(os.path.dirname(path)):
    _keep(path, labels, 'the label index')
  return labels


def _save_atomically(path: str, value) -> None:
  """Writes an array (.npy) or a dict of arrays (.npz) to path (base.atomic: readable by other
  users of a shared data_dir, never seen half-written)."""
  with atomic.writing(path) as f:
    if isinstance(value, dict):
      np.savez(f, **value)
    else:
      np.save(f, value)


def _keep(path: str, value, what: str) -> None:
  """Saves `value` for later processes; on a read-only data_dir only warns (it stays in memory)."""
  try:
    _save_atomically(path, value)
  except OSError as e:
    logging.warning('Cannot save %s %s: %s', what, path, e)


def _collect(reader: Reader, select) -> dict:
  """Runs reader.steps over every record and stacks select(example) into numpy arrays."""
  n = reader.records.num_examples
  batches = Batches(reader, 1024, _padded(np.arange(n), n), select=select, add_mask=False)
  parts = list(batches)
  try:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  except ValueError as e:
    raise ValueError(f'data.cache=True needs every example of {reader.records.description} to '
                     f'have the same shape after "{reader.pp}" ({e}); set data.cache=False.'
                     ) from None


# ---------------------------------------------------------------------------------------------
# Orders and iterators.


def _local_batch_size(batch_size: int, process_count: int, key: str) -> int:
  if process_count < 1 or batch_size < 1 or batch_size % process_count:
    raise ValueError(f'{key}={batch_size} does not split over {process_count} processes; use a '
                     f'positive multiple of {process_count}.')
  return batch_size // process_count


def _host_range(num_examples: int, process_index: int, process_count: int) -> tuple[int, int]:
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index={process_index} not in [0, {process_count})')
  return (num_examples * process_index // process_count,
          num_examples * (process_index + 1) // process_count)


def _padded(indices: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
  """(indices, mask) padded to `size` by repeating a record (the first, or record 0) with mask 0."""
  pad = size - len(indices)
  filler = indices[0] if len(indices) else 0
  return (np.concatenate([indices, np.full(pad, filler)]).astype(np.int64),
          np.concatenate([np.ones(len(indices)), np.zeros(pad)]).astype(np.float32))


class EpochOrder:
  """Stream position t (0, 1, ...) -> record index, over endless epochs of a shard [start, stop)."""

  def __init__(self, start: int, stop: int, seed: int, process_index: int, shuffle_buffer: int):
    self.start, self.size = start, stop - start
    self.seed, self.process_index, self.shuffle_buffer = seed, process_index, shuffle_buffer
    self._last = (-1, None)   # (epoch, order): one tuple, so concurrent readers see a pair.

  def epoch(self, epoch: int) -> np.ndarray:
    """The shard's record indices in the order epoch `epoch` visits them."""
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

  def index(self, t: int) -> int:
    return int(self.epoch(t // self.size)[t % self.size])

  def chunks(self, t: int) -> tf.data.Dataset:
    """(positions, indices) chunks from stream position t on, forever."""
    first_epoch, offset = divmod(t, self.size)

    def epoch_chunks(epoch):
      order = tf.numpy_function(lambda e: self.epoch(int(e)), [epoch], tf.int64, stateful=False)
      order = tf.ensure_shape(order, [self.size])
      skip = tf.where(epoch == first_epoch, tf.constant(offset, tf.int64), 0)
      positions = epoch * self.size + tf.range(skip, self.size)
      return tf.data.Dataset.from_tensor_slices((positions, order[skip:])).batch(CHUNK)
    return tf.data.Dataset.range(first_epoch, 2**62).flat_map(epoch_chunks)


class Batches:
  """Iterator of numpy batches over a fixed list of record indices (eval, few-shot).

  indices_mask: (indices, mask) from _padded; the pp seed of each example is base_seed folded
  with its record index.
  """

  def __init__(self, reader: Reader, batch_size: int, indices_mask: tuple, *, select=None,
               add_mask: bool = True, base_seed=(0, 0)):
    self.reader, self.batch_size = reader, batch_size
    self.indices, self.mask = indices_mask
    self._select, self._add_mask = select, add_mask
    self._base_seed = np.asarray(base_seed, np.int64)
    self._batches = 0
    self._iterator = None
    self._dataset(0)   # Builds (traces) the pipeline now: bad pp strings fail here.

  def __iter__(self):
    return self

  def _process(self):
    steps, base, select = self.reader.steps, tf.constant(self._base_seed), self._select

    def fn(t, example):
      example = ops.apply(steps, example, tf.random.experimental.stateless_fold_in(base, t))
      return select(example) if select else example
    return fn

  def _dataset(self, start_batch: int) -> tf.data.Dataset:
    begin = start_batch * self.batch_size
    indices = self.indices[begin:]
    chunks = _index_chunks(indices, positions=indices)   # Seeds follow the record index.
    ds = self.reader.examples(chunks).map(self._process(), num_parallel_calls=PARALLEL_CALLS)
    if self._add_mask:
      masks = tf.data.Dataset.from_tensor_slices(self.mask[begin:])
      ds = tf.data.Dataset.zip(ds, masks).map(lambda ex, m: {**ex, 'mask': m})
    return _finish(ds.batch(self.batch_size))

  def _slot(self, k: int):
    """(seed position, record index) of the k-th example of the stream, or None past the end."""
    if k >= len(self.indices):
      return None
    return int(self.indices[k]), int(self.indices[k])

  def __next__(self) -> dict:
    if self._iterator is None:
      self._iterator = self._dataset(self._batches).as_numpy_iterator()
    try:
      batch = next(self._iterator)
    except tf.errors.OpError as e:
      report = self._diagnose()
      if report is None:
        raise
      raise CorruptRecordError(report) from e
    self._batches += 1
    return batch

  def _diagnose(self) -> str | None:
    """Re-runs the examples of the failing batch (and the prefetched ones) one by one, eagerly;
    returns a report on the first that fails, or None."""
    process = self._process()
    first = self._batches * self.batch_size
    for k in range(first, first + (1 + PREFETCH) * self.batch_size):
      slot = self._slot(k)
      if slot is None:
        break
      position, index = slot
      example = {}
      try:
        example = self.reader.example(index)
        process(tf.constant(position, tf.int64), example)
      except Exception as e:  # Any failure of this record is what we report.
        name = ''
        for key in ('file_name', 'key'):
          if key in example and example[key].dtype == tf.string:
            name = f' ({key} {example[key].numpy().decode(errors="replace")!r})'
        message = _short(e)
        return (f'{self.reader.records.locate(index)}{name} of {self.reader.records.description} '
                f'failed in pp "{self.reader.pp}": {message}. Fix or remove this record.')
    return None


def _short(error: Exception) -> str:
  """The first line of an error, without TF's '{{function_node ...}}' and '[Op:...]' wrappers."""
  text = re.sub(r'\{\{function_node [^}]*\}\}|\[Op:[^\]]*\].*', '', str(error)).strip()
  return text.splitlines()[0].strip() if text else type(error).__name__


class TrainIterator(Batches):
  """Endless training batches; get_state() / set_state() save and restore the position."""

  def __init__(self, reader: Reader, batch_size: int, order: EpochOrder, base_seed: np.ndarray,
               state: dict):
    self.order, self._state = order, state
    super().__init__(reader, batch_size, (np.zeros(0, np.int64), np.zeros(0, np.float32)),
                     add_mask=False, base_seed=base_seed)

  def _dataset(self, start_batch: int) -> tf.data.Dataset:
    chunks = self.order.chunks(start_batch * self.batch_size)
    ds = self.reader.examples(chunks).map(self._process(), num_parallel_calls=PARALLEL_CALLS)
    return _finish(ds.batch(self.batch_size, drop_remainder=True))

  def _slot(self, k: int):
    return k, self.order.index(k)

  def get_state(self) -> dict:
    """A small JSON-serialisable dict: the batches yielded so far and what they depend on."""
    return {**self._state, 'batches': self._batches}

  def set_state(self, state: dict) -> None:
    """Continues exactly where the iterator that produced `state` stopped."""
    for key, value in self._state.items():
      if state.get(key) != value:
        raise ValueError(
            f'data iterator state has {key}={state.get(key)!r} but this run has {value!r}: the '
            'saved position does not identify the same batches. Resume with the same seed, '
            'batch_size, number of processes and data, or start a new workdir.')
    if not isinstance(state.get('batches'), int) or state['batches'] < 0:
      raise ValueError(f'data iterator state has no valid "batches" count: {state!r}')
    self._batches = state['batches']
    self._iterator = None
