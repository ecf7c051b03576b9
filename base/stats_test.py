"""Tests of the mean and sample standard deviation over seeds."""
import numpy as np
import pytest

from base import stats


def test_stat_hand_worked():
  # 0.8, 0.6, 0.7: mean 0.7, squared deviations 0.01, 0.01, 0 -> var 0.02 / 2, std 0.1.
  s = stats.stat([0.8, 0.6, 0.7])
  assert (s.mean, s.std, s.n) == (pytest.approx(0.7), pytest.approx(0.1), 3)


def test_missing_values_are_skipped_and_one_value_has_no_spread():
  assert stats.stat([None, 2.0, None]) == stats.Stat(2.0, 0.0, 1)
  assert stats.stat([None]) is None and stats.stat([]) is None


def test_numpy_values_agree_with_numpys_sample_std():
  values = np.array([0.5, 0.8, 0.6, 0.75])
  s = stats.stat(values)
  assert s.mean == pytest.approx(values.mean(), abs=1e-15)
  assert s.std == pytest.approx(values.std(ddof=1), abs=1e-15)
