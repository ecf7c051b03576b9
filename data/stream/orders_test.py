"""Tests of the orders: host shards, epoch permutations and their locality, one padded pass."""
import numpy as np
import pytest

from data.stream import orders


def elements(dataset, n=None) -> list[tuple[int, int]]:
  return [(int(t), int(i)) for t, i in dataset.take(-1 if n is None else n)]


def test_host_ranges_tile_the_split():
  # 41 records over 2 hosts: 41 * 1 // 2 = 20.
  assert [orders.host_range(41, p, 2) for p in range(2)] == [(0, 20), (20, 41)]
  with pytest.raises(ValueError, match=r'process_index=2 not in \[0, 2\)'):
    orders.host_range(41, 2, 2)


def test_every_epoch_is_a_new_permutation_of_the_shard():
  order = orders.EpochOrder(10, 30, seed=0, process_index=0, shuffle_buffer=20)
  epochs = [order.epoch(e).tolist() for e in range(3)]
  assert all(sorted(e) == list(range(10, 30)) for e in epochs)
  assert epochs[0] != epochs[1] != epochs[2]
  assert epochs[0] == orders.EpochOrder(10, 30, 0, 0, 20).epoch(0).tolist()   # A pure function.
  assert epochs[0] != orders.EpochOrder(10, 30, 0, 1, 20).epoch(0).tolist()   # Another host.


def test_a_small_shuffle_buffer_moves_records_fewer_places_than_it_holds():
  # Record i sorts by i + W u with u in [0, 1): only records j with |i - j| < W can swap with it,
  # so it lands fewer than W places from where it is stored.
  order = orders.EpochOrder(0, 1000, seed=3, process_index=0, shuffle_buffer=8)
  for epoch in range(3):
    moved = np.abs(np.argsort(order.epoch(epoch)) - np.arange(1000))
    assert moved.max() < 8 and moved.mean() > 1
  stored = orders.EpochOrder(0, 1000, seed=3, process_index=0, shuffle_buffer=1)
  assert stored.epoch(0).tolist() == list(range(1000))


def test_slots_start_anywhere_and_run_on_across_epochs():
  order = orders.EpochOrder(5, 12, seed=1, process_index=0, shuffle_buffer=100)
  everything = [order.slot(k) for k in range(30)]
  # Positions are stream positions; each epoch of 7 is the shard once.
  assert [t for t, _ in everything] == list(range(30))
  assert sorted(i for _, i in everything[7:14]) == list(range(5, 12))
  for start in (0, 3, 7, 13):
    assert elements(order.slots(start), 30 - start) == everything[start:]
  assert order.masks(3) is None


def test_padded_pass_repeats_a_masked_record():
  one_pass = orders.padded(np.array([3, 5]), 5)
  assert one_pass.indices.tolist() == [3, 5, 3, 3, 3]
  assert one_pass.mask.tolist() == [1, 1, 0, 0, 0] and one_pass.mask.dtype == np.float32
  # Seed positions are the record indices; the pass ends after its last slot.
  assert elements(one_pass.slots(1)) == [(5, 5), (3, 3), (3, 3), (3, 3)]
  assert one_pass.slot(1) == (5, 5) and one_pass.slot(5) is None
  assert list(one_pass.masks(3).as_numpy_iterator()) == [0, 0]
  assert orders.padded(np.array([], np.int64), 2).indices.tolist() == [0, 0]
  assert orders.OnePass(np.arange(3)).masks(0) is None
