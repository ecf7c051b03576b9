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
          (a permutation of the shard, no reading) and starts reading at position n * B_local:
          no decoding, augmenting or reading of earlier examples.
  eval    one pass over the split in stored order; each host reads its shard; every host yields
          the same number of batches (ceil(ceil(N / P) / B_local)); padding repeats a record with
          'mask' 0, so each example counts exactly once.
  fewshot exactly `shots` records per class, drawn with `seed`, in index order, padded like eval.
data.cache=True decodes the split once (the pp's leading `decode`) and keeps the arrays in memory
(per process, the 4 most recent splits), for the small embedded sets.

A record that fails (undecodable image, label out of range) stops the iterator with
CorruptRecordError, a UserError (main.py: exit status 2) of one line naming the data set, the split,
the record's index, its file and number (and key or file name), and the `data.prepare check`
command that lists every bad record of the split. Finding it costs nothing until a batch fails:
the failing batch's examples are then re-run one by one. A bad record is never skipped (as tf.data's
ignore_errors would): every later example would shift, and a resumed run would not see the batches
the interrupted one would have.

The pieces, each composable on its own: data/stream/reader.py reads examples by index,
data/stream/orders.py says which index comes next (the epoch orders above), data/stream/batches.py
batches a reader in an order's sequence and keeps the position, data/stream/split_cache.py keeps
labels and decoded splits. This module assembles them from a data section.
"""
import math
from typing import Callable

import numpy as np

from base import errors
from base import shot_sampling
from data.stream import batches
from data import config as data_config_lib
from data.pp import device_split
from data.pp import ops
from data.stream import orders
from data.stream import reader as reader_lib
from data.stream import shipping
from data.datasets import sources
from data.stream import split_cache

STATE_VERSION = 1
PROCESS_COUNT = 'process_count'    # The training iterator's state key for its process count.
# What the iterators raise for a record that fails; callers catch it from here.
CorruptRecordError = batches.CorruptRecordError


def make_train_iterator(data_config: data_config_lib.DataConfig, *, batch_size: int, seed: int,
                        process_index: int = 0, process_count: int = 1,
                        cut: device_split.Split | None = None) -> batches.Batches:
  """Infinite, seeded, resumable iterator over this host's shard of data_config.train_split.

  Yields {key: numpy array} batches of batch_size // process_count examples as the pp string
  data_config.pp_train makes them (the trainer expects 'image' float32 (B, H, W, C) and 'labels'
  float32 (B, num_classes)); with `cut`, pp_train's Split (vmoe/train/experiment.py
  Experiment.pp_splits), as the host ships them for the accelerator to run cut's tail
  (data/pp/device_split.py). get_state() / set_state() save and restore the position.
  """
  local = _local_batch_size(batch_size, process_count)
  if not isinstance(seed, int) or seed < 0:
    raise ValueError(f'seed must be a non-negative int, got {seed!r}')
  reader, select = _open_reader(data_config, data_config.train_split, data_config.pp_train, cut)
  num_examples = reader.records.num_examples
  start, stop = orders.host_range(num_examples, process_index, process_count)
  if stop == start:
    raise ValueError(f'{reader.records.description} has {num_examples} records, '
                     f'none for host {process_index} of {process_count}.')
  order = orders.EpochOrder(start, stop, seed, process_index, data_config.shuffle_buffer)
  identity = {'version': STATE_VERSION, 'seed': seed, 'batch_size': batch_size,
              PROCESS_COUNT: process_count, 'num_examples': num_examples}
  return batches.Batches(reader, order, local, base_seed=(seed, process_index), select=select,
                         identity=identity)


def make_eval_iterator(data_config: data_config_lib.DataSource, split: str, *, batch_size: int,
                       pp: str | None = None, process_index: int = 0, process_count: int = 1,
                       cut: device_split.Split | None = None) -> batches.Batches:
  """One pass over this host's shard of `split`, batches of batch_size // process_count with a
  float32 'mask' (1 real, 0 padding). data_config: a data section, or a few-shot set's source;
  pp: a pp string (None: the data section's pp_eval); cut: the pp's Split, to ship what its tail
  needs (data/pp/device_split.py) rather than run it; None runs the whole pp."""
  local = _local_batch_size(batch_size, process_count)
  reader, select = _open_reader(data_config, split, data_config.pp_eval if pp is None else pp,
                                cut)
  num_examples = reader.records.num_examples
  start, stop = orders.host_range(num_examples, process_index, process_count)
  num_batches = math.ceil(math.ceil(num_examples / process_count) / local)
  return batches.Batches(reader, orders.padded(np.arange(start, stop), num_batches * local), local,
                         select=select)


def fewshot_batches(data_config: data_config_lib.DataSource, split: str, *, shots: int, seed: int,
                    pp: str, batch_size: int,
                    cut: device_split.Split | None = None) -> batches.Batches:
  """Batches (with 'mask') of exactly `shots` examples per class of `split`, drawn with `seed`.

  The same seed gives the same examples. All classes of the source count; one with fewer than
  `shots` examples in the split fails naming it. The pp string decides the keys (few-shot
  evaluators keep the int 'label'); cut as make_eval_iterator's.
  """
  reader, select = _open_reader(data_config, split, pp, cut)
  if reader.records.num_classes is None:
    raise ValueError(f'few-shot needs a single-label source (an int "label"); '
                     f'{reader.records.description} is multi-label.')
  chosen = shot_sampling.sample_shots(split_labels(data_config, split),
                                      reader.records.num_classes, shots, seed,
                                      reader.records.description)
  size = math.ceil(len(chosen) / batch_size) * batch_size
  return batches.Batches(reader, orders.padded(chosen, size), batch_size, select=select)


def split_labels(data_config: data_config_lib.DataSource, split: str) -> np.ndarray:
  """The int 'label' of every record of `split`: read once (no image decoding), then kept in
  memory and, for a prepared TFDS data set, in a label index file beside its data."""
  return split_cache.labels(data_config.source, split)


def _open_reader(data_config: data_config_lib.DataSource, split: str, pp: str,
                 cut: device_split.Split | None) -> tuple[reader_lib.Reader, Callable | None]:
  """A reader of `split` before pp's steps (with data.cache, of its cached arrays after `decode`),
  and the batches' `select`: with `cut` (pp's Split), the reader runs its head only and `select`
  is the host's shipping of what the tail needs (data/stream/shipping.py); else None."""
  records = sources.open_split(data_config, split)
  steps, select = ops.build(pp), None
  if cut is not None:
    steps, select = steps[:cut.head_length], shipping.shipper(cut)
  if not data_config.cache:
    return reader_lib.Reader(records, steps, pp, None), select
  # The cache holds examples after `decode`.
  decoded = 1 if steps and steps[0].name == 'decode' else 0
  prefix = tuple(s.spec for s in steps[:decoded])
  return reader_lib.Reader(records, steps[decoded:], pp,
                           split_cache.decoded(data_config.source, split, prefix)), select


def check_process_count(state: dict | None, process_count: int, where: str) -> None:
  """A UserError, before anything reads, if the training iterator's saved `state` (get_state) was
  written by another number of processes: each host's shard and epoch order depend on it (the
  module docstring), so that run's data order cannot go on with another."""
  saved = (state or {}).get(PROCESS_COUNT, process_count)
  if saved != process_count:
    raise errors.UserError(
        f'{where} was written by {saved} processes and this run has {process_count}: each host '
        'reads its own shard of the data in its own order (data/stream/pipeline.py), so it resumes '
        f'only on {saved} processes. Rerun it on {saved} processes, or use a new --workdir.')


def _local_batch_size(batch_size: int, process_count: int) -> int:
  if process_count < 1 or batch_size < 1 or batch_size % process_count:
    raise ValueError(f'batch_size={batch_size} does not split over {process_count} processes; use '
                     f'a positive multiple of {process_count}.')
  return batch_size // process_count
