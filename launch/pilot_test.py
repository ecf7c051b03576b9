"""Tests of the pilot: its runs, and the arithmetic of its table."""
import json
import math
import os

import pytest

from base import stats
from launch import pilot
from launch import sweep
from vmoe.routing import declarations


def _write_run(root, regime, name, router, seed, prec1, wall=None):
  workdir = os.path.join(root, regime, 'tiny', name)
  os.makedirs(workdir)
  summary = {'arch': 'XS/7', 'dataset': 'fashion_mnist', 'router': router,
             'capacity': None if router == declarations.DENSE else 1.0, 'seed': seed,
             'upstream_prec1': prec1}
  with open(os.path.join(workdir, 'summary.json'), 'w') as f:
    json.dump(summary, f)
  if wall is not None:
    with open(os.path.join(workdir, sweep.LOG_FILE), 'w') as f:
      f.write('=== 2026-11-26 01:00:00 python main.py\n' +
              sweep.FINISHED_LINE.format(seconds=wall, jobs=2))


def test_every_regime_runs_dense_and_the_fixed_router_with_its_overrides():
  regime = pilot.REGIMES['crop_flip3000']
  assert regime.arguments()[:3] == ['--config.num_train_steps=3000',
                                    '--config.fewshot.every_steps=3000',
                                    '--config.eval.every_steps=1000']
  assert any('inception_crop(28, area_min=50)|flip_lr' in a for a in regime.arguments())
  assert pilot.MOE_ROUTER == 'softmax_tc'


def test_rows_hand_worked(tmp_path):
  root = str(tmp_path)
  # dense 0.80, 0.82, 0.84: mean 82, sd 2; MoE 0.85, 0.86, 0.87: mean 86, sd 1 (points).
  for seed, (d, m) in enumerate([(0.80, 0.85), (0.82, 0.86), (0.84, 0.87)]):
    _write_run(root, 'long3000', 'dense' + (f'_s{seed}' if seed else ''), 'dense', seed, d,
               wall=100 + seed)
    _write_run(root, 'long3000', 'softmax_tc_c1' + (f'_s{seed}' if seed else ''), 'softmax_tc',
               seed, m, wall=110)
  (row,), problems = pilot.rows(root)
  assert problems == []
  assert row.regime.name == 'long3000'
  assert row.dense.n == row.moe.n == 3
  assert row.margin == pytest.approx(4.0)
  # s.e. = sqrt(2^2/3 + 1^2/3) = sqrt(5/3); pooled sd = sqrt((2*4 + 2*1) / 4) = sqrt(2.5).
  assert row.stderr == pytest.approx(math.sqrt(5 / 3))
  assert row.seed_sd == pytest.approx(math.sqrt(2.5))
  # 2 s.e. of a difference of two N-seed means <= 0.5: N >= 2 (2 sd / 0.5)^2 = 2 * 40 = 80.
  assert row.seeds_needed() == 80
  assert row.wall_s == pytest.approx((100 + 101 + 102 + 3 * 110) / 6) and row.jobs == 2   # 105.5
  table = pilot.to_markdown([row])
  assert '| long3000 | no augmentation | 3000 | 106 (2) | 82.00 ± 2.00 (n=3) |' in table
  assert '| +4.00 | 1.29 | +3.1 | 1.58 | 80 |' in table


def test_a_regime_with_one_seed_has_no_standard_error(tmp_path):
  _write_run(str(tmp_path), 'base1500', 'dense', 'dense', 0, 0.85)
  _write_run(str(tmp_path), 'base1500', 'softmax_tc_c1', 'softmax_tc', 0, 0.86)
  (row,), _ = pilot.rows(str(tmp_path))
  assert row.margin == pytest.approx(1.0)
  assert row.stderr is None and row.seeds_needed() is None and row.wall_s is None
  assert '| +1.00 | — | — | — | — |' in pilot.to_markdown([row])


def test_unknown_regime_exits_2(capsys):
  with pytest.raises(SystemExit) as exit_info:
    pilot.main(['run', '--regimes', 'long9000', '--workdir-root', '/nonexistent'])
  assert exit_info.value.code == 2
  assert 'unknown regime(s) long9000; valid: base1500' in capsys.readouterr().err


def test_stat_is_the_shared_definition():
  assert stats.stat([0.80, 0.82, 0.84]).std == pytest.approx(0.02)


def _row(name, steps, dense, moe):
  regime = pilot.Regime(name, 'knobs', steps)
  return pilot.Row(regime, stats.stat(dense), stats.stat(moe), None, None)


def test_choose_takes_the_cheapest_regime_where_moe_clears_two_standard_errors():
  dense = [0.800, 0.801, 0.802]                                             # sd 0.1 points.
  flat = _row('flat', 1500, dense, dense)                                   # margin 0.
  clear = _row('clear', 3000, dense, [0.803, 0.804, 0.805])                 # +0.3, s.e. 0.08.
  clearer = _row('clearer', 3000, dense, [0.805, 0.806, 0.807])             # +0.5, same s.e.
  too_long = _row('too_long', 6000, dense, [0.90, 0.901, 0.902])            # Over budget.
  # +10 points, but seeds 3 points apart: 2 (2 x 4.0 / 0.5)^2 = 523 seeds > 63 / 15.
  noisy = _row('noisy', 1500, [0.70, 0.75, 0.78], [0.80, 0.85, 0.88])
  assert pilot.STUDY_MAX_RUNS == 63 and not pilot.affordable(noisy) and pilot.affordable(clear)
  best, why = pilot.choose([flat, clear, clearer, too_long, noisy])
  assert best is clearer and why.startswith('clearer: the cheapest affordable regime')
  # None clears 2 s.e.: the largest margin / s.e. among the affordable ones, said as such.
  best, why = pilot.choose([flat, _row('small', 3000, dense, [0.8008, 0.8018, 0.8028])])
  assert best.regime.name == 'small' and 'no affordable regime shows MoE above dense' in why
  # Fewer than 3 seeds do not count.
  assert pilot.choose([_row('two', 1500, [0.8, 0.801], [0.9, 0.901])])[0] is None


def test_a_regime_that_changes_only_the_moe_layers_shares_its_dense_runs(tmp_path):
  root = str(tmp_path)
  for seed, (d, m) in enumerate([(0.80, 0.85), (0.82, 0.86), (0.84, 0.87)]):
    suffix = f'_s{seed}' if seed else ''
    _write_run(root, 'long3000', 'dense' + suffix, 'dense', seed, d)
    _write_run(root, 'e32_3000', 'softmax_tc_c1' + suffix, 'softmax_tc', seed, m + 0.01)
  found, problems = pilot.rows(root)
  assert problems == []
  e32 = next(r for r in found if r.regime.name == 'e32_3000')
  assert e32.dense.mean == pytest.approx(0.82) and e32.moe.mean == pytest.approx(0.87)
  assert pilot.REGIMES['e32_3000'].dense_from == 'long3000'
