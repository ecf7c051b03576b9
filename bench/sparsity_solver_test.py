"""The sparsity-solver benchmark writes one row per line search and step count (no timing)."""
import json

import pytest

from bench import sparsity_solver


def test_grid_rows_report_the_solver_quality(tmp_path, capsys):
  out = tmp_path / 'sparsity_solver.json'
  sparsity_solver.main(['--shapes', 'tiny', '--capacities', '1', '--steps', '3', '--warmup', '0',
                        '--repeats', '1', '--out', str(out)])
  capsys.readouterr()
  result = json.loads(out.read_text())
  assert set(result) == {'machine', 'method', 'rows'}
  start, unit_steps, backtracking, zoom = result['rows']
  assert [(r['linesearch'], r['memory_size'], r['steps']) for r in result['rows']] == [
      ('none', 3, 0), ('none', 3, 3), ('backtracking', 3, 3), ('zoom', 10, 3)]
  for row in result['rows']:
    assert (row['tokens'], row['experts'], row['capacity']) == (272, 8, 34)   # round(272 / 8).
    assert row['ms'] > 0 and 0 <= row['dropped'] <= 1
  # Steps = 0 is expert choice on the scores; the solver's steps balance the rows.
  assert unit_steps['row_error'] < start['row_error']
  assert backtracking['row_error'] < start['row_error']
  assert zoom['row_error'] < start['row_error']


def test_unknown_shape_fails_naming_the_valid_ones(capsys):
  with pytest.raises(SystemExit):
    sparsity_solver.main(['--shapes', 'b64'])
  assert 'valid: tiny, b32' in capsys.readouterr().err
