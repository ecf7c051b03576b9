"""The sparsity-solver benchmark writes one row per line search and step count (no timing)."""
import json

import numpy as np
import pytest

from bench import sparsity_solver


def test_grid_rows_report_the_solver_quality(tmp_path, capsys):
  out = tmp_path / 'sparsity_solver.json'
  sparsity_solver.main(['--shapes', 'tiny', '--logit-stds', '1', '--capacities', '1',
                        '--steps', '3', '--warm-steps', '3', '--warm-start', '5', '--warmup', '0',
                        '--repeats', '1', '--linesearch-steps', '3', '--out', str(out)])
  capsys.readouterr()
  result = json.loads(out.read_text())
  assert set(result) == {'machine', 'method', 'rows'}
  start, unit_steps, warm, backtracking, zoom = result['rows']
  assert [(r['start'], r['warm_start_iters'], r['linesearch'], r['memory_size'], r['steps'])
          for r in result['rows']] == [
      ('zero', 0, 'none', 3, 0), ('zero', 0, 'none', 3, 3), ('entropic', 5, 'none', 3, 3),
      ('zero', 0, 'backtracking', 3, 3), ('zero', 0, 'zoom', 10, 3)]
  for row in result['rows']:
    assert row['source'] == 'tiny N(0, 1^2)'
    assert (row['tokens'], row['experts'], row['capacity']) == (272, 8, 34)   # round(272 / 8).
    assert row['ms'] > 0 and 0 <= row['dropped'] <= 1
  # Steps = 0 is expert choice on the scores; the solver's steps balance the rows.
  for solved in (unit_steps, warm, backtracking, zoom):
    assert solved['row_error'] < start['row_error']


def test_recorded_logits_are_a_source_without_line_searches(tmp_path, capsys):
  logits = tmp_path / 'logits.npz'
  np.savez(logits, logits=np.random.RandomState(0).normal(size=(2, 40, 4)).astype(np.float16),
           run='tiny_run', step=7)
  out = tmp_path / 'sparsity_solver.json'
  sparsity_solver.main(['--shapes', '', '--logits', str(logits), '--capacities', '1', '--steps',
                        '2', '--warm-steps', '2', '--warmup', '0', '--repeats', '1',
                        '--out', str(out)])
  capsys.readouterr()
  rows = json.loads(out.read_text())['rows']
  assert [(r['start'], r['steps']) for r in rows] == [('zero', 0), ('zero', 2), ('entropic', 2)]
  assert {(r['source'], r['groups'], r['tokens'], r['experts'], r['capacity']) for r in rows} == {
      ('tiny_run step 7 (logits.npz)', 2, 40, 4, 10)}


def test_missing_logits_file_says_how_to_make_it(tmp_path, capsys):
  with pytest.raises(SystemExit):
    sparsity_solver.main(['--logits', str(tmp_path / 'none.npz')])
  assert 'python -m bench.router_logits' in capsys.readouterr().err


def test_unknown_shape_fails_naming_the_valid_ones(capsys):
  with pytest.raises(SystemExit):
    sparsity_solver.main(['--shapes', 'b64'])
  assert 'valid: tiny, b32' in capsys.readouterr().err
