"""The auction benchmark: its rows, a baseline timed beside the current module, its flags (no
timed assertions)."""
import json

import pytest

from bench import auction
from vmoe.routing import balanced_assignment


def test_shapes_are_the_recipes_groups():
  # B/32: 8 images x 50 tokens, C = round(400 / 32) = round(12.5) = 12 (halves to even); tiny: 16
  # images x 17 tokens, C = 272 / 8 = 34.
  assert auction.SHAPES['b32'] == (8 * 50, 32, 12)
  assert auction.SHAPES['tiny'] == (16 * 17, 8, 34)
  assert auction.SHAPES['b32_c2'] == (400, 32, 25)     # round(2 x 400 / 32) = 25: E C > T.


def test_baseline_rows_beside_the_current_ones(tmp_path):
  # The module's own file as the baseline: the same auction, so the same bids.
  out = tmp_path / 'auction.json'
  auction.main(['--shapes', 'tiny', '--groups', '2', '--repeats', '2', '--baseline',
                balanced_assignment.__file__, '--out', str(out)])
  result = json.loads(out.read_text())
  baseline, current = result['rows']
  assert (baseline['version'], current['version']) == ('baseline', 'current')
  assert (current['tokens'], current['experts'], current['capacity']) == (272, 8, 34)
  assert current['epsilon'] == balanced_assignment.EPSILON
  assert current['max_iters'] == balanced_assignment.MAX_ITERS
  assert current['unfilled'] == 0 and len(current['rounds_ms']) == 2
  # At least one bid per slot: 272 of them.
  assert current['iterations_max'] >= current['iterations_median'] >= 272
  assert {k: baseline[k] for k in ('iterations_median', 'iterations_max', 'unfilled')} == {
      k: current[k] for k in ('iterations_median', 'iterations_max', 'unfilled')}


@pytest.mark.parametrize('flag, message', [('--shapes=b16', 'valid values are b32'),
                                           ('--baseline=/nonexistent.py', 'file not found'),
                                           ('--groups=0', '--groups and --repeats must be >= 1')])
def test_bad_flags_exit_2(flag, message, capsys):
  with pytest.raises(SystemExit) as exit_info:
    auction.main([flag])
  assert exit_info.value.code == 2 and message in capsys.readouterr().err
