"""Which discrete routing choices a golden decides beyond rounding, for tests that compare the
project's dispatch with a reference's exactly."""
import numpy as np


def deciding_gaps(scores: np.ndarray, depth: int) -> np.ndarray:
  """Each row's smallest gap between consecutive sorted scores down to rank depth + 1: the
  choices that rank the row's top `depth` entries, and the first entry left out. (..., N) ->
  (...)."""
  top = -np.sort(-np.asarray(scores, np.float64), axis=-1)
  return np.min(top[..., :depth] - top[..., 1:depth + 1], axis=-1)
