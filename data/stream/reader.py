"""A split's examples by record index: parsed records, or the arrays of a split cached decoded.

The reader knows nothing of order, seeds or batching (data/stream/orders.py, of which it uses only
`without_autograph`, and data/stream/batches.py): it turns (seed position, record index) elements
into (seed position, example) elements, and reads one example eagerly when a failing record has to
be named.
"""
import dataclasses
import os
import re
from typing import Callable

import numpy as np
import tensorflow as tf

from base import errors
from base import host
from data.datasets import sources
from data.stream import orders

CHUNK = 64          # Records fetched per Python call into the records' reader.
# Parallel map calls, here and in data/stream/batches.py. Not tf.data.AUTOTUNE: autotuning runs a
# model thread that an iterator's destructor joins, and that thread can sit out its optimisation
# period before it sees the cancellation, while the destructor holds the GIL; that stall freezes
# every Python thread, asynchronous checkpoint saves included (vmoe/run/checkpointing_test.py's
# fifty-saves test guards it). Eval iterators are dropped mid-run too. By default each process
# takes its share of the cores it may use (default_parallel_calls); VMOE_DATA_PARALLEL_CALLS
# overrides it (docs/accelerators.md).
PARALLEL_CALLS_VARIABLE = 'VMOE_DATA_PARALLEL_CALLS'


def default_parallel_calls(environ=os.environ) -> int:
  """The usable cores (affinity mask, cgroup quota) divided among the run's processes that share
  them (base/host.py), at least 1."""
  return max(1, host.usable_cores() // host.processes_sharing_cores(environ))


def parallel_calls() -> int:
  """Parallel map calls of a process's input pipeline: $VMOE_DATA_PARALLEL_CALLS, else
  default_parallel_calls(). A value that is not a positive integer is a UserError."""
  text = os.environ.get(PARALLEL_CALLS_VARIABLE)
  if text is None:
    return default_parallel_calls()
  if not text.strip().isdigit() or int(text) < 1:
    raise errors.UserError(
        f'{PARALLEL_CALLS_VARIABLE}={text!r}: set it to a positive integer, the parallel '
        f'preprocessing calls of each process (default: its share of the usable cores, '
        f'{default_parallel_calls()} here), or unset it.')
  return int(text)


@dataclasses.dataclass(frozen=True)
class Reader:
  """A split's examples by index, before the pp steps still to run.

  steps: the pp steps still to run (all of pp's, or those after the cached `decode`). cached:
  {key: array over all records} of the split after the pp's leading steps, or None to parse
  records.
  """
  records: sources.Records
  steps: list
  pp: str
  cached: dict | None

  def examples(self, slots: tf.data.Dataset) -> tf.data.Dataset:
    """(position, index) int64 elements -> (position, example before `steps`) elements."""
    if self.cached is not None:
      arrays = {k: tf.constant(v) for k, v in self.cached.items()}
      return slots.map(orders.without_autograph(
          lambda t, i: (t, {k: tf.gather(a, i) for k, a in arrays.items()})))

    def fetch(indices):
      return np.array(self.records.read(indices), dtype=object)

    def read(t, i):
      serialized = tf.numpy_function(fetch, [i], tf.string, stateful=False)
      return t, tf.ensure_shape(serialized, [None])
    parse = orders.without_autograph(lambda t, s: (t, self.records.parse(s)))
    return slots.batch(CHUNK).map(orders.without_autograph(read)).unbatch().map(
        parse, num_parallel_calls=parallel_calls())

  def example(self, index: int) -> dict:
    """One example before `steps`, computed eagerly."""
    if self.cached is not None:
      return {k: tf.constant(v[index]) for k, v in self.cached.items()}
    return self.records.parse(tf.constant(self.records.read([index])[0]))

  def failure(self, index: int, process: Callable[[dict], dict]) -> str | None:
    """Reads record `index` and runs `process` (its pp steps) eagerly: if that fails, a one-line
    report naming the data set, the split, the record's index, where it is stored (file and
    number, and its key or file name) and the error; else None."""
    example = {}
    try:
      example = self.example(index)
      process(example)
    except Exception as e:  # Any failure of this record is what we report.
      name = ''
      for key in ('file_name', 'key'):
        if key in example and example[key].dtype == tf.string:
          name = f', {key} {example[key].numpy().decode(errors="replace")!r}'
      return (f'{self.records.description} record {index} ({self.records.locate(index)}{name}) '
              f'failed in pp "{self.pp}": {_short(e)}')
    return None


def _short(error: Exception) -> str:
  """The first line of an error, without TF's '{{function_node ...}}' and '[Op:...]' wrappers."""
  text = re.sub(r'\{\{function_node [^}]*\}\}|\[Op:[^\]]*\].*', '', str(error)).strip()
  return text.splitlines()[0].strip() if text else type(error).__name__
