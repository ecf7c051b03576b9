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


def test_pooled_std_hand_worked():
  # Groups: std 0.1 with n = 3 (2 df) and std 0.2 with n = 3 (2 df); one value adds no df.
  # Pooled var = (2 * 0.01 + 2 * 0.04) / 4 = 0.025; std = 0.1581.
  p = stats.pooled([stats.Stat(1.0, 0.1, 3), stats.Stat(2.0, 0.2, 3), stats.Stat(5.0, 0.0, 1),
                    None])
  assert p.df == 4 and p.std == pytest.approx(np.sqrt(0.025), rel=1e-12)
  # A difference of two means of 3: units 1/3 + 1/3.
  assert p.stderr(2 / 3) == pytest.approx(np.sqrt(0.025 * 2 / 3), rel=1e-12)
  assert stats.pooled([stats.Stat(1.0, 0.0, 1)]) is None


def test_t_quantile_and_p_value_match_the_tables():
  # Printed t tables: t_{0.975} is 12.706 at 1 df, 2.042 at 30 df; p(|t| > 2.042 | 30) = 0.05.
  assert stats.t_quantile(0.975, 1) == pytest.approx(12.706, abs=5e-4)
  assert stats.t_quantile(0.975, 30) == pytest.approx(2.042, abs=5e-4)
  assert stats.two_sided_p(stats.t_quantile(0.975, 30), 30) == pytest.approx(0.05, abs=1e-9)


def test_holm_hand_worked():
  # m = 4, sorted 0.01, 0.02, 0.03, 0.5 -> x4, x3, x2, x1 = 0.04, 0.06, 0.06, 0.5 (the third,
  # 0.06, is already non-decreasing after the second's 0.06), back in the input's order.
  assert stats.holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
  assert stats.holm([0.6, 0.9]) == [1.0, 1.0]   # 2 x 0.6 capped at 1, then non-decreasing.
  assert stats.holm([]) == []
