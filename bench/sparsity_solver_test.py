"""The sparsity-solver benchmark writes one row per start and step count (no timed assertions)."""
import json

import numpy as np
import pytest

from bench import sparsity_solver


def test_grid_rows_report_the_solver_quality(tmp_path):
  out = tmp_path / 'sparsity_solver.json'
  sparsity_solver.main(['--shapes', 'tiny', '--logit-stds', '1', '--capacities', '1',
                        '--steps', '3', '--warm-steps', '3', '--warm-start', '5', '--warmup', '0',
                        '--repeats', '1', '--out', str(out)])
  result = json.loads(out.read_text())
  assert set(result) == {'machine', 'method', 'rows'}
  start, unit_steps, warm = result['rows']
  assert [(r['start'], r['warm_start_iters'], r['steps']) for r in result['rows']] == [
      ('zero', 0, 0), ('zero', 0, 3), ('entropic', 5, 3)]
  for row in result['rows']:
    assert row['source'] == 'tiny N(0, 1^2)'
    assert (row['tokens'], row['experts'], row['capacity']) == (272, 8, 34)   # round(272 / 8).
    assert row['ms'] > 0 and 0 <= row['dropped'] <= 1
  # Steps = 0 is expert choice on the scores; the solver's steps balance the rows.
  assert unit_steps['row_error'] < start['row_error'] and warm['row_error'] < start['row_error']


def test_recorded_logits_are_a_source(tmp_path):
  logits = tmp_path / 'logits.npz'
  np.savez(logits, logits=np.random.RandomState(0).normal(size=(2, 40, 4)).astype(np.float16),
           run='tiny_run', step=7)
  out = tmp_path / 'sparsity_solver.json'
  sparsity_solver.main(['--shapes', '', '--logits', str(logits), '--capacities', '1', '--steps',
                        '2', '--warm-steps', '2', '--warmup', '0', '--repeats', '1',
                        '--out', str(out)])
  rows = json.loads(out.read_text())['rows']
  assert [(r['start'], r['steps']) for r in rows] == [('zero', 0), ('zero', 2), ('entropic', 2)]
  assert {(r['source'], r['groups'], r['tokens'], r['experts'], r['capacity']) for r in rows} == {
      ('tiny_run step 7 (logits.npz)', 2, 40, 4, 10)}


@pytest.mark.parametrize('flag, message', [('--shapes=b64', 'valid values are tiny, b32'),
                                           ('--logits=/nonexistent.npz', 'not found'),
                                           ('--repeats=0', '--repeats must be >= 1')])
def test_bad_flags_exit_2(flag, message, capsys):
  with pytest.raises(SystemExit) as exit_info:
    sparsity_solver.main([flag])
  assert exit_info.value.code == 2 and message in capsys.readouterr().err
