"""The layer benchmark runs at tiny shapes and computes its target ratios correctly (no timing)."""
import json

import pytest

from bench import moe_layer
from vmoe.routing import router as router_lib


def test_one_row_at_a_tiny_shape(capsys):
  router, dispatch = 'soft_moe', 'indices'
  moe_layer.main(['--router', router, '--dispatch', dispatch, '--groups', '2', '--group-size',
                  '16', '--dim', '8', '--experts', '4', '--repeats', '1', '--warmup', '1', '--json'])
  row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert row['router'] == router and row['forward_ms'] > 0 and row['forward_backward_ms'] > 0


def test_shapes_are_the_models_token_counts():
  # 224 px: B/32 has 7 x 7 patches + the class token = 50 tokens, B/16 14 x 14 + 1 = 197; a
  # routing group is 8 images.
  assert moe_layer.GROUP_SIZES == (8 * 50, 8 * 197) == (400, 1576)


def test_grid_has_both_dispatches_of_every_router_and_the_baselines():
  args = moe_layer.argparse.Namespace(routers=list(router_lib.PAPER_ROUTERS))
  rows = moe_layer.grid_rows(args, group_size=400, capacity=2)
  # 6 routers with index dispatch, 5 with einsum (not Soft MoE), and the 2 baselines.
  assert len(rows) == 13 and all((r.group_size, r.capacity) == (400, 2) for r in rows)
  assert {(r.router, r.dispatch) for r in rows if r.dispatch == 'einsum'} == {
      (name, 'einsum') for name in router_lib.PAPER_ROUTERS if name != 'soft_moe'}
  assert [r.router for r in rows if r.router in moe_layer.BASELINES] == list(moe_layer.BASELINES)


def test_grid_times_its_rows_interleaved(tmp_path, capsys):
  out = tmp_path / 'moe_layer.json'
  moe_layer.main(['--all', '--routers', 'softmax_ec', '--groups', '2', '--group-sizes', '16',
                  '--capacities', '1', '--dim', '8', '--experts', '4', '--repeats', '2',
                  '--warmup', '1', '--out', str(out)])
  capsys.readouterr()
  result = json.loads(out.read_text())
  assert [(r['router'], r['dispatch']) for r in result['rows']] == [
      ('softmax_ec', 'indices'), ('softmax_ec', 'einsum'), ('round_robin', 'indices'),
      ('dense_mlp', 'indices')]
  assert all(len(row['rounds_forward_backward_ms']) == 2 for row in result['rows'])
  fb = {r['router'] + '/' + r['dispatch']: r['forward_backward_ms'] for r in result['rows']}
  assert result['ratios'] == [{
      'group_size': 16, 'capacity': 1.0, 'router': 'softmax_ec',
      'vs_dense_mlp': round(fb['softmax_ec/indices'] / fb['dense_mlp/indices'], 3),
      'vs_round_robin': round(fb['softmax_ec/indices'] / fb['round_robin/indices'], 3),
      'einsum_over_indices': round(fb['softmax_ec/einsum'] / fb['softmax_ec/indices'], 3)}]


def test_ratios_hand_worked():
  row = lambda name, ms, dispatch='indices': {'router': name, 'dispatch': dispatch,
                                              'group_size': 400, 'capacity': 1,
                                              'forward_backward_ms': ms}
  rows = [row('dense_mlp', 100.0), row('round_robin', 125.0), row('softmax_ec', 150.0),
          row('softmax_ec', 300.0, 'einsum')]
  assert moe_layer.ratios(rows) == [{'group_size': 400, 'capacity': 1, 'router': 'softmax_ec',
                                     'vs_dense_mlp': 1.5, 'vs_round_robin': 1.2,
                                     'einsum_over_indices': 2.0}]


@pytest.mark.parametrize('flags', [['--router', 'hash'],
                                   ['--all', '--routers', 'softmax_ec', 'hash']])
def test_unknown_router_fails_listing_valid_ones(flags):
  with pytest.raises(ValueError, match='unknown router .*valid routers'):
    moe_layer.main(flags)
