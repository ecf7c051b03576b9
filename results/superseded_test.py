"""Superseded rows are read from the runs directory and marked in tables and claims."""
import json

import pytest

from base import errors
from results import superseded


def test_load_and_which_verdicts_involve_a_superseded_row(tmp_path):
  assert superseded.load(str(tmp_path)) == {}
  (tmp_path / superseded.FILE).write_text(json.dumps([
      {'router': 'base', 'capacity': 2, 'reason': 'auction bug', 'rerun': 'results/x/'}]))
  rows = superseded.load(str(tmp_path))
  assert rows == {('base', 2.0): 'auction bug; rerun: results/x/'}
  assert superseded.involved(rows, 'base 87.16 vs dense 87.32', 2.0) == ['base c=2']
  assert superseded.involved(rows, 'base 86.87 vs dense 87.32', 1.0) == []
  assert superseded.involved(rows, 'baseline 1 vs dense 2', 2.0) == []   # Whole words only.
  # Across capacities (claim 6b), by the c its detail names.
  assert superseded.involved(rows, 'soft_moe vs best of 4 (base c=2, 87.1)', 1.0) == ['base c=2']


def test_a_malformed_file_is_one_clear_error(tmp_path):
  (tmp_path / superseded.FILE).write_text('[{"router": "base"}]')
  with pytest.raises(errors.UserError, match='superseded.json is not a list of .*fix or remove it'):
    superseded.load(str(tmp_path))
