"""Tests of few-shot set sampling."""
import numpy as np
import pytest

from base import shot_sampling

LABELS = np.array([0] * 7 + [1] * 5 + [2] * 9)   # 7, 5 and 9 examples of classes 0, 1, 2.


def test_class_counts_hand_worked():
  np.testing.assert_array_equal(shot_sampling.class_counts(LABELS, 4), [7, 5, 9, 0])
  with pytest.raises(ValueError, match=r'labels must lie in \[0, 2\); got 0..2'):
    shot_sampling.class_counts(LABELS, 2)


def test_sample_shots_draws_exactly_k_distinct_examples_per_class():
  first = shot_sampling.sample_shots(LABELS, 3, 4, seed=0)
  assert len(np.unique(first)) == 12 and (np.diff(first) > 0).all()   # Sorted, distinct.
  np.testing.assert_array_equal(np.bincount(LABELS[first]), [4, 4, 4])
  np.testing.assert_array_equal(shot_sampling.sample_shots(LABELS, 3, 4, seed=0), first)
  assert not np.array_equal(shot_sampling.sample_shots(LABELS, 3, 4, seed=1), first)
  # All 5 examples of class 1 (indices 7..11) when shots is its whole count.
  all_of_one = shot_sampling.sample_shots(LABELS, 3, 5, seed=0)
  np.testing.assert_array_equal(all_of_one[LABELS[all_of_one] == 1], [7, 8, 9, 10, 11])


def test_too_many_or_too_few_shots_fail_clearly():
  with pytest.raises(ValueError, match='class 1 has 5 examples in the pool, fewer than shots=6'):
    shot_sampling.sample_shots(LABELS, 3, 6, seed=0)
  with pytest.raises(ValueError, match="class 1 has 5 examples in split 'x'"):
    shot_sampling.sample_shots(LABELS, 3, 6, seed=0, where="split 'x'")
  with pytest.raises(ValueError, match='shots must be >= 1, got 0'):
    shot_sampling.sample_shots(LABELS, 3, 0, seed=0)
