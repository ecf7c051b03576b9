"""The layer benchmark runs at tiny shapes and computes its target ratios correctly (no timing)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench import moe_layer
from vmoe import moe
from vmoe.routing import router as router_lib


@pytest.mark.parametrize('dispatch_dtype', ['float32', 'bfloat16'])
def test_one_row_at_a_tiny_shape(capsys, dispatch_dtype):
  router, dispatch = 'soft_moe', 'indices'
  moe_layer.main(['--router', router, '--dispatch', dispatch, '--groups', '2', '--group-size',
                  '16', '--dim', '8', '--experts', '4', '--repeats', '1', '--warmup', '1', '--json',
                  '--dispatch-dtype', dispatch_dtype])
  row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert row['router'] == router and row['forward_ms'] > 0 and row['forward_backward_ms'] > 0
  assert row['dispatch_dtype'] == dispatch_dtype


def test_shapes_are_the_models_token_counts():
  # 224 px: B/32 has 7 x 7 patches + the class token = 50 tokens, B/16 14 x 14 + 1 = 197; a
  # routing group is 8 images.
  assert moe_layer.GROUP_SIZES == (8 * 50, 8 * 197) == (400, 1576)


def test_grid_has_both_dispatches_of_every_router_and_the_baselines():
  args = moe_layer.argparse.Namespace(routers=list(router_lib.PAPER_ROUTERS))
  rows = moe_layer.grid_rows(args, group_size=400, capacity=2)
  # 6 routers with index dispatch, 5 with einsum (not Soft MoE), and the 3 baselines.
  assert len(rows) == 14 and all((r.group_size, r.capacity) == (400, 2) for r in rows)
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
  # E = 4 experts of C = round(16 / 4) = 4 slots in each of the 2 groups: 32 of 32 tokens.
  assert [r['expert_tokens'] for r in result['rows']] == [32, 32, 32, 32]
  flops = {r['router'] + '/' + r['dispatch']: r['xla_flops'] for r in result['rows']}
  # The dense MLP's forward+backward: 3 passes of 2 matmuls of 32 tokens x 8 x 32 at 2 FLOPs a
  # multiply-add, plus elementwise work.
  assert flops['dense_mlp/indices'] >= 3 * 2 * 2 * 32 * 8 * 32
  xla_ratio = flops['softmax_ec/indices'] / flops['dense_mlp/indices']
  assert result['ratios'] == [{
      'group_size': 16, 'capacity': 1.0, 'expert_shards': 1, 'router': 'softmax_ec',
      'vs_dense_mlp': round(fb['softmax_ec/indices'] / fb['dense_mlp/indices'], 3),
      'flops_ratio': 1.0,
      'vs_flops_scaled_dense': round(fb['softmax_ec/indices'] / fb['dense_mlp/indices'], 3),
      'vs_round_robin': round(fb['softmax_ec/indices'] / fb['round_robin/indices'], 3),
      'xla_flops_ratio': round(xla_ratio, 3),
      'vs_xla_flops_scaled_dense': round(
          fb['softmax_ec/indices'] / (fb['dense_mlp/indices'] * xla_ratio), 3),
      'einsum_over_indices': round(fb['softmax_ec/einsum'] / fb['softmax_ec/indices'], 3)}]


def test_ratios_hand_worked():
  row = lambda name, ms, tokens, dispatch='indices': {
      'router': name, 'dispatch': dispatch, 'group_size': 400, 'capacity': 1,
      'forward_backward_ms': ms, 'expert_tokens': tokens}
  rows = [{**row('dense_mlp', 100.0, 6400), 'xla_flops': 1e9}, row('round_robin', 125.0, 6144),
          row('softmax_ec', 150.0, 6144), row('softmax_ec', 300.0, 6144, 'einsum'),
          {**row('soft_moe', 192.0, 8192), 'xla_flops': 1.6e9}, row('soft_moe_experts', 160.0, 8192)]
  assert moe_layer.ratios(rows) == [
      {'group_size': 400, 'capacity': 1, 'expert_shards': 1, 'router': 'soft_moe',
       'vs_dense_mlp': 1.92,
       'flops_ratio': 1.28, 'vs_flops_scaled_dense': 1.5, 'vs_round_robin': 1.536,
       'vs_own_experts': 1.2, 'own_experts_vs_flops_scaled_dense': 1.25,
       'xla_flops_ratio': 1.6, 'vs_xla_flops_scaled_dense': 1.2},
      {'group_size': 400, 'capacity': 1, 'expert_shards': 1, 'router': 'softmax_ec',
       'vs_dense_mlp': 1.5,
       'flops_ratio': 0.96, 'vs_flops_scaled_dense': 1.562, 'vs_round_robin': 1.2,
       'einsum_over_indices': 2.0}]


def test_expert_tokens_at_the_b32_recipe_shape():
  # 16 groups of 8 images of 50 tokens, E = 32. Sparse routers: C = round(c 400 / 32) with halves
  # to even (12.5 -> 12, 25) per group; Soft MoE: C = round(c 50 / 32) (1.5625 -> 2, 3.125 -> 3)
  # per image; the dense MLP: every token.
  args = lambda router, c=1.0: moe_layer.argparse.Namespace(
      router=router, capacity=c, groups=16, group_size=400, experts=32)
  assert moe_layer.expert_tokens(args('dense_mlp')) == 16 * 400
  assert moe_layer.expert_tokens(args('round_robin', 2.0)) == 16 * 32 * 12
  assert moe_layer.expert_tokens(args('softmax_ec')) == 16 * 32 * 12
  assert moe_layer.expert_tokens(args('sinkhorn_ec', 2.0)) == 16 * 32 * 25
  assert moe_layer.expert_tokens(args('soft_moe')) == 128 * 32 * 2
  assert moe_layer.expert_tokens(args('soft_moe_experts', 2.0)) == 128 * 32 * 3


def test_soft_moe_experts_floor_runs_at_a_tiny_shape(capsys):
  moe_layer.main(['--router', 'soft_moe_experts', '--groups', '2', '--group-size', '16', '--dim',
                  '8', '--experts', '4', '--repeats', '1', '--warmup', '1', '--json'])
  row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  # 2 groups of 8 images of 2 tokens; C = round(2 / 4) = 0.5 -> at least 1 slot per expert.
  assert row['expert_tokens'] == 16 * 4 * 1 and row['forward_backward_ms'] > 0


@pytest.mark.parametrize('flags', [['--router', 'hash'],
                                   ['--all', '--routers', 'softmax_ec', 'hash']])
def test_unknown_router_fails_listing_valid_ones(flags):
  with pytest.raises(ValueError, match='unknown router .*valid routers'):
    moe_layer.main(flags)


def test_expert_shard_runs_each_slot_through_its_devices_local_expert():
  # E = 4 experts on 2 expert devices: the device holds 2 experts, and global expert e's slots
  # (from the other device's groups in the real mesh) go to its local expert e mod 2.
  buffers = jax.random.normal(jax.random.PRNGKey(0), (4, 3, 2, 8))     # (E, G, C, D)
  shard = moe_layer.ExpertShard(4, 16, expert_init='independent', shards=2)
  params = shard.init(jax.random.PRNGKey(1), buffers, train=False)
  local = params['params']['experts']
  assert local['wi'].shape == (2, 8, 16)
  one_expert = moe.Experts(1, 16)
  expected = jnp.stack([
      one_expert.apply({'params': jax.tree.map(lambda p: p[e % 2][None], local)},
                       buffers[e][None], train=False)[0] for e in range(4)])
  got = shard.apply(params, buffers, train=False)
  # Same float32 products per slot; only the order of the sums may differ. An output sums D = 8
  # products into each of H = 16 hidden units, then 16 products: two orders differ by at most
  # (8 + 16) ulps of the largest partial sum, below 8 here (checked).
  scale = 8.0
  assert float(jnp.max(jnp.abs(expected))) < scale
  np.testing.assert_allclose(got, expected, rtol=0, atol=24 * scale * np.finfo(np.float32).eps)


def test_expert_shard_runs_local_experts_on_every_devices_groups():
  # One expert a device on 4 devices: one (4 x G x C, D) matmul, the shape the all-to-all gives.
  buffers = jnp.zeros((4, 3, 2, 8))
  shard = moe_layer.ExpertShard(4, 16, shards=4)
  params = shard.init(jax.random.PRNGKey(1), buffers, train=False)
  jaxpr = jax.make_jaxpr(lambda p, b: shard.apply(p, b, train=False))(params, buffers)
  dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == 'dot_general']
  assert [tuple(d.invars[0].aval.shape) for d in dots] == [(1, 24, 8), (1, 24, 16)]


def test_expert_shards_must_divide_the_experts(capsys):
  with pytest.raises(SystemExit) as exit_info:
    moe_layer.main(['--experts', '4', '--expert-shards', '3'])
  assert exit_info.value.code == 2 and 'divide --experts 4' in capsys.readouterr().err
