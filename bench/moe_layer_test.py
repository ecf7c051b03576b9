"""The layer benchmark runs at tiny shapes and computes its target ratios correctly (no timing)."""
import json

import pytest

from bench import moe_layer


@pytest.mark.parametrize('router,dispatch', [('round_robin', 'indices'), ('dense_mlp', 'indices'),
                                             ('sparsity_ec', 'einsum'), ('soft_moe', 'indices')])
def test_one_row_at_a_tiny_shape(router, dispatch, capsys):
  moe_layer.main(['--router', router, '--dispatch', dispatch, '--groups', '2', '--group-size',
                  '16', '--dim', '8', '--experts', '4', '--repeats', '1', '--warmup', '1', '--json'])
  row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert row['router'] == router and row['forward_ms'] > 0 and row['forward_backward_ms'] > 0


def test_ratios_hand_worked():
  row = lambda name, ms, dispatch='indices': {'router': name, 'dispatch': dispatch,
                                              'group_size': 392, 'capacity': 1,
                                              'forward_backward_ms': ms}
  rows = [row('dense_mlp', 100.0), row('round_robin', 125.0), row('softmax_ec', 150.0),
          row('softmax_ec', 300.0, 'einsum')]
  assert moe_layer.ratios(rows) == [{'group_size': 392, 'capacity': 1, 'router': 'softmax_ec',
                                     'vs_dense_mlp': 1.5, 'vs_round_robin': 1.2,
                                     'einsum_over_indices': 2.0}]


def test_unknown_router_fails_listing_valid_ones():
  with pytest.raises(ValueError, match='unknown router .*valid routers'):
    moe_layer.main(['--router', 'hash'])
