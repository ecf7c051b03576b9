"""The config-load benchmark's programs and arithmetic (no timed assertions)."""
import pathlib

import pytest

from bench import config_load

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_it_loads_every_paper_config_file():
  on_disk = {p.stem for p in (REPO / 'configs').glob('[bl][0-9][0-9]_*.py')
             if not p.stem.endswith('_test')}
  assert set(config_load.PAPER_CONFIGS) == on_disk and len(on_disk) == 21


def test_medians_and_ratios_over_the_rounds(monkeypatch):
  # Stand-in seconds a program, three rounds: bare 1, 2, 3 (median 2), configs 3, 3, 9 (3),
  # import jax 10, 12, 14 (12).
  runs = {'pass': iter([1, 2, 3]), config_load.LOAD_CONFIGS: iter([3, 3, 9]),
          'import jax': iter([10, 12, 14])}
  monkeypatch.setattr(config_load, 'seconds', lambda code: float(next(runs[code])))
  result = config_load.measure(rounds=3)
  rows = {row['program']: row for row in result['rows']}
  assert rows['paper configs'] == {'program': 'paper configs', 'median_s': 3.0,
                                   'above_bare_s': 1.0, 'min_s': 3.0, 'max_s': 9.0}
  assert result['ratios'] == {'paper_configs_over_import_jax': pytest.approx(0.25),
                              'above_bare': pytest.approx(0.1)}
  assert result['calls'] == 63
