"""Tests of Batches over in-memory arrays: composition with either order, seeds, resume, state."""
import numpy as np
import pytest

from data.pp import ops
from data.stream import batches
from data.stream import orders
from data.stream import reader as reader_lib

PP = 'keep("x")'


def array_reader(n: int) -> reader_lib.Reader:
  """A reader of n records held as arrays, as a cached split is (record i: x = 10 i)."""
  return reader_lib.Reader(records=None, steps=ops.build(PP), pp=PP,
                           cached={'x': np.arange(n) * 10})


def test_one_pass_yields_its_records_with_their_mask():
  # 5 records padded to 6 = 2 batches of 3; the padding repeats record 0 with mask 0.
  iterator = batches.Batches(array_reader(5), orders.padded(np.arange(5), 6), 3)
  got = list(iterator)
  assert [b['x'].tolist() for b in got] == [[0, 10, 20], [30, 40, 0]]
  assert [b['mask'].tolist() for b in got] == [[1, 1, 1], [1, 1, 0]]


def test_epoch_order_batches_follow_its_slots_and_resume():
  order = orders.EpochOrder(0, 7, seed=2, process_index=0, shuffle_buffer=7)
  iterator = batches.Batches(array_reader(7), order, 4, base_seed=(2, 0), identity={'seed': 2})
  first = [next(iterator)['x'].tolist() for _ in range(3)]
  # 12 examples from epochs of 7: batch 1 spans epochs 0 and 1.
  assert sum(first, []) == [10 * order.slot(k)[1] for k in range(12)]
  assert 'mask' not in next(iterator)
  state = iterator.get_state()
  assert state == {'seed': 2, 'batches': 4}
  resumed = batches.Batches(array_reader(7), order, 4, base_seed=(2, 0), identity={'seed': 2})
  resumed.set_state({**state, 'batches': 1})
  assert next(resumed)['x'].tolist() == first[1]


def test_a_state_of_other_batches_is_refused():
  assert batches.resume_position({'seed': 1}, {'seed': 1, 'batches': 3}) == 3
  with pytest.raises(ValueError, match='has seed=2 but this run has 1'):
    batches.resume_position({'seed': 1}, {'seed': 2, 'batches': 3})
  with pytest.raises(ValueError, match='no valid "batches" count'):
    batches.resume_position({}, {'batches': -1})


def test_pp_seeds_follow_the_seed_position():
  # A random pp op: an example's draw follows its seed position (its record index in a pass),
  # not the batch it falls in.
  images = np.arange(64 * 4).reshape(64, 2, 2, 1)
  reader = reader_lib.Reader(records=None, steps=ops.build('flip_lr|keep("image")'),
                             pp='flip_lr|keep("image")', cached={'image': images})
  one_pass = orders.OnePass(np.arange(64))
  whole = np.concatenate([b['image'] for b in batches.Batches(reader, one_pass, 16)])
  halves = np.concatenate([b['image'] for b in batches.Batches(reader, one_pass, 32)])
  np.testing.assert_array_equal(whole, halves)
  flipped = [not np.array_equal(whole[i], images[i]) for i in range(64)]
  assert 0 < sum(flipped) < 64   # Each example flips with probability 1/2.
