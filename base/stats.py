"""Mean and spread over repetitions (seeds): the one definition tables, claims and few-shot use."""
import dataclasses
import math
from typing import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Stat:
  """Mean and sample standard deviation (ddof=1; 0 for one value) of n values."""
  mean: float
  std: float
  n: int


def stat(values: Iterable[float | None]) -> Stat | None:
  """Stat of the non-None values; None if there are none."""
  present = [float(v) for v in values if v is not None]
  if not present:
    return None
  mean = math.fsum(present) / len(present)
  # ddof=1: the seeds are a sample of the runs one could make, and its spread estimates theirs.
  squares = math.fsum((v - mean) ** 2 for v in present)
  var = squares / (len(present) - 1) if len(present) > 1 else 0.0
  return Stat(mean, math.sqrt(var), len(present))


@dataclasses.dataclass(frozen=True)
class Pooled:
  """The pooled sample standard deviation of several groups (configurations) of repetitions.

  std estimates the one seed spread all groups share: sqrt(sum (n_i - 1) s_i^2 / df), with
  df = sum (n_i - 1) degrees of freedom. A difference between groups then has the standard
  error std * sqrt(sum c_i^2 / n_i) for the contrast sum c_i mean_i.
  """
  std: float
  df: int

  def stderr(self, units: float) -> float:
    """The standard error of a contrast whose sum c_i^2 / n_i is `units`."""
    return self.std * math.sqrt(units)


def pooled(groups: Iterable[Stat | None]) -> Pooled | None:
  """Pooled of the groups' Stats (None entries and single values add no degrees of freedom);
  None when no group has two values."""
  present = [g for g in groups if g is not None and g.n > 1]
  df = sum(g.n - 1 for g in present)
  if df == 0:
    return None
  return Pooled(math.sqrt(math.fsum((g.n - 1) * g.std ** 2 for g in present) / df), df)


def t_quantile(probability: float, df: int) -> float:
  """The Student t quantile with df degrees of freedom (scipy's ppf)."""
  from scipy import stats as scipy_stats   # Only the verdicts need scipy; imported on use.
  return float(scipy_stats.t.ppf(probability, df))


def two_sided_p(t: float, df: int) -> float:
  """The two-sided p-value of a t statistic with df degrees of freedom."""
  from scipy import stats as scipy_stats
  return float(2 * scipy_stats.t.sf(abs(t), df))


def holm(p_values: Sequence[float]) -> list[float]:
  """Holm's step-down adjusted p-values, in the input's order.

  Sorted ascending, the i-th smallest (i from 0) of m is multiplied by m - i, and the adjusted
  values are made non-decreasing along that order and capped at 1. Rejecting where the adjusted
  value is below alpha controls the family-wise error rate at alpha for any dependence.
  """
  m = len(p_values)
  order = sorted(range(m), key=lambda i: p_values[i])
  adjusted, running = [0.0] * m, 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (m - rank) * p_values[i]))
    adjusted[i] = running
  return adjusted
