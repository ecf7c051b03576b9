"""decided.deciding_gaps, hand-worked."""
import numpy as np

from testing.goldens import decided


def test_gaps_down_to_the_first_entry_left_out():
  # Sorted rows: [.5, .3, .2] and [.4, .35, .25]. Depth 1: the gap between ranks 1 and 2 (.2,
  # .05); depth 2 adds the gap to rank 3 (.1, .1).
  scores = np.array([[.2, .5, .3], [.25, .4, .35]])
  np.testing.assert_allclose(decided.deciding_gaps(scores, 1), [.2, .05])
  np.testing.assert_allclose(decided.deciding_gaps(scores, 2), [.1, .05])
