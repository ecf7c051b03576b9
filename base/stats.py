"""Mean and spread over repetitions (seeds): the one definition tables, claims and few-shot use."""
import dataclasses
import math
from typing import Iterable


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
