"""The committed BASE c = 2 reruns beside the study, as results/tiny/README.md quotes them."""
import os

import pytest

from base import errors
from results import rerun_comparison

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_base_reruns_beside_the_study():
  lines = rerun_comparison.compare(os.path.join(REPO, 'results/tiny/runs'),
                                   os.path.join(REPO, 'results/tiny/base_c2_fixed/runs'),
                                   'base', 2)
  assert lines[0] == 'upstream prec@1: fixed 87.02 ± 0.33 (n = 5); study pooled sd 0.21 on 100 df'
  assert lines[2].startswith("  minus the study's base c = 2 (87.16): -0.14 (95% interval -0.40 "
                             'to +0.12)')


def test_missing_runs_say_what_is_needed(tmp_path):
  with pytest.raises(errors.MissingInput, match='lossfree_tc c = 2 in .* are needed'):
    rerun_comparison.compare(os.path.join(REPO, 'results/tiny/runs'), str(tmp_path),
                             'lossfree_tc', 2)
