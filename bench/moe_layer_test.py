"""The layer benchmark: its grid at tiny shapes, its ratios hand-worked, and its expert-sharded
layer against the library's (no timed assertions)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench import moe_layer
from vmoe.model import moe
from vmoe.model import moe_config
from vmoe.routing import router as router_lib

TINY = ['--groups', '2', '--group-sizes', '16', '--capacities', '1', '--dim', '8', '--experts',
        '4', '--repeats', '2', '--warmup', '1']


def test_shapes_are_the_models_token_counts():
  # 224 px: B/32 has 7 x 7 patches + the class token = 50 tokens, B/16 14 x 14 + 1 = 197; a
  # routing group is 8 images.
  assert moe_layer.GROUP_SIZES == (8 * 50, 8 * 197) == (400, 1576)


def test_grid_rows_are_the_routers_then_the_baselines():
  args = moe_layer.parse_args(['--routers', 'softmax_tc,soft_moe'])
  rows = moe_layer.grid_rows(args, group_size=400, capacity=2)
  assert all((r.group_size, r.capacity) == (400, 2) for r in rows)
  assert [r.router for r in rows] == ['softmax_tc', 'soft_moe', *moe_layer.BASELINES]
  # Soft MoE's experts alone only beside Soft MoE.
  args = moe_layer.parse_args(['--routers', 'softmax_tc'])
  assert [r.router for r in moe_layer.grid_rows(args, 400, 1)] == [
      'softmax_tc', 'round_robin', 'dense_mlp']


@pytest.mark.parametrize('dispatch_dtype', ['float32', 'bfloat16'])
def test_grid_times_its_rows_interleaved(tmp_path, dispatch_dtype):
  out = tmp_path / 'moe_layer.json'
  moe_layer.main(TINY + ['--routers', 'softmax_ec', '--dispatch-dtype', dispatch_dtype,
                         '--out', str(out)])
  result = json.loads(out.read_text())
  assert {'cpu_model', 'cpu_flags'} <= set(result['machine'])
  assert [(r['router'], r['dispatch_dtype']) for r in result['rows']] == [
      ('softmax_ec', dispatch_dtype), ('round_robin', None), ('dense_mlp', None)]
  assert all(len(row['rounds_forward_backward_ms']) == 2 for row in result['rows'])
  # E = 4 experts of C = round(16 / 4) = 4 slots in each of the 2 groups: 32 of 32 tokens.
  assert [r['expert_tokens'] for r in result['rows']] == [32, 32, 32]
  # The dense MLP's forward+backward: 3 passes of 2 matmuls of 32 tokens x 8 x 32 at 2 FLOPs a
  # multiply-add, plus elementwise work.
  assert result['rows'][-1]['xla_flops'] >= 3 * 2 * 2 * 32 * 8 * 32
  assert [r['router'] for r in result['ratios']] == ['softmax_ec']
  assert {'vs_dense_mlp', 'vs_round_robin', 'vs_xla_flops_scaled_dense'} <= set(result['ratios'][0])


def test_sharded_grid_runs_soft_moe_and_its_own_experts(tmp_path):
  out = tmp_path / 'moe_layer.json'
  moe_layer.main(TINY + ['--routers', 'soft_moe', '--expert-shards', '2', '--out', str(out)])
  result = json.loads(out.read_text())
  assert [r['router'] for r in result['rows']] == ['soft_moe'] + list(moe_layer.BASELINES)
  # 2 groups of 8 images of 2 tokens; C = round(2 / 4) = 0.5 -> at least 1 slot per expert.
  assert result['rows'][-1]['expert_tokens'] == 16 * 4 * 1
  assert result['ratios'][0]['expert_shards'] == 2 and 'vs_own_experts' in result['ratios'][0]


def test_ratios_hand_worked():
  row = lambda name, ms, tokens, xla_flops: {
      'router': name, 'group_size': 400, 'capacity': 1, 'forward_backward_ms': ms,
      'expert_tokens': tokens, 'xla_flops': xla_flops}
  rows = [row('dense_mlp', 100.0, 6400, 1e9), row('round_robin', 125.0, 6144, 0.96e9),
          row('softmax_ec', 150.0, 6144, 1.25e9), row('soft_moe', 192.0, 8192, 1.6e9),
          row('soft_moe_experts', 160.0, 8192, 1.28e9)]
  # Soft MoE: 192 / 100 = 1.92 at 8192 / 6400 = 1.28 the token-slots: 1.5 FLOPs-scaled, 1.2 scaled
  # by XLA's 1.6; 192 / 160 = 1.2 over its experts, which take 160 / 128 = 1.25 of the
  # FLOPs-scaled dense MLP. softmax_ec: 150 / 100 at 0.96 the token-slots: 1.5625 -> 1.562.
  assert moe_layer.ratios(rows) == [
      {'group_size': 400, 'capacity': 1, 'expert_shards': 1, 'router': 'soft_moe',
       'vs_dense_mlp': 1.92, 'flops_ratio': 1.28, 'vs_flops_scaled_dense': 1.5,
       'vs_round_robin': 1.536, 'xla_flops_ratio': 1.6, 'vs_xla_flops_scaled_dense': 1.2,
       'vs_own_experts': 1.2, 'own_experts_vs_flops_scaled_dense': 1.25},
      {'group_size': 400, 'capacity': 1, 'expert_shards': 1, 'router': 'softmax_ec',
       'vs_dense_mlp': 1.5, 'flops_ratio': 0.96, 'vs_flops_scaled_dense': 1.562,
       'vs_round_robin': 1.2, 'xla_flops_ratio': 1.25, 'vs_xla_flops_scaled_dense': 1.2}]


def test_routers_after_the_paper_beside_round_robin(tmp_path):
  out = tmp_path / 'moe_layer.json'
  moe_layer.main(TINY + ['--routers', 'sigmoid_tc,lossfree_tc,topp_tc,random_tc,base',
                         '--capacities', '1,2', '--out', str(out)])
  result = json.loads(out.read_text())
  rows = {(r['router'], r['capacity']): r for r in result['rows']}
  # BASE's rows give the auction's bids per group on the row's logits: at c = 1, E C = 4 x 4 = 16
  # slots for T = 16 tokens, so at least 16 bids, and no slot left empty.
  base = rows[('base', 1.0)]
  assert base['auction_iterations_max'] >= base['auction_iterations_median'] >= 16
  assert base['auction_unfilled'] == 0 and base['auction_epsilon'] == 1e-4
  assert not any(key.startswith('auction') for key in rows[('sigmoid_tc', 1.0)])
  # Round robin's buffers follow the capacity: C = 4 at c = 1, 8 at c = 2, in 2 groups of E = 4.
  assert rows[('round_robin', 2.0)]['expert_tokens'] == 2 * 4 * 8 == rows[('topp_tc', 2.0)][
      'expert_tokens']
  ratios = {(r['router'], r['capacity']): r for r in result['ratios']}
  assert all('vs_round_robin' in r for r in ratios.values())
  targets = {key: r['routing_overhead_target'] for key, r in ratios.items()
             if 'routing_overhead_target' in r}
  assert targets == {('sigmoid_tc', 1): 1.05, ('lossfree_tc', 1): 1.05, ('random_tc', 1): 1.05,
                     ('topp_tc', 2): 1.05, ('base', 1): 1.3}
  assert all(r['meets_target'] == (r['vs_round_robin'] <= r['routing_overhead_target'])
             for r in ratios.values() if 'routing_overhead_target' in r)


def test_a_router_of_ones_own_by_its_module(tmp_path):
  out = tmp_path / 'moe_layer.json'
  moe_layer.main(TINY + ['--routers', 'ema_tc', '--router-module', 'docs/example_router.py',
                         '--out', str(out)])
  assert [r['router'] for r in json.loads(out.read_text())['rows']] == [
      'ema_tc', 'round_robin', 'dense_mlp']


def test_expert_tokens_at_the_b32_recipe_shape():
  # 16 groups of 8 images of 50 tokens, E = 32. Sparse routers: C = round(c 400 / 32) with halves
  # to even (12.5 -> 12, 25) per group; Soft MoE: C = round(c 50 / 32) (1.5625 -> 2, 3.125 -> 3)
  # per image; the dense MLP: every token.
  args = lambda router, c=1.0: moe_layer.argparse.Namespace(
      router=router, capacity=c, groups=16, group_size=400, experts=32, router_module='')
  assert moe_layer.expert_tokens(args('dense_mlp')) == 16 * 400
  assert moe_layer.expert_tokens(args('round_robin')) == 16 * 32 * 12
  assert moe_layer.expert_tokens(args('round_robin', 2.0)) == 16 * 32 * 25
  # topp_tc at its k_max = c = 2: token choice's buffers at k = 2.
  assert moe_layer.expert_tokens(args('topp_tc', 2.0)) == 16 * 32 * 25
  assert moe_layer.expert_tokens(args('softmax_ec')) == 16 * 32 * 12
  assert moe_layer.expert_tokens(args('sinkhorn_ec', 2.0)) == 16 * 32 * 25
  assert moe_layer.expert_tokens(args('soft_moe')) == 128 * 32 * 2
  assert moe_layer.expert_tokens(args('soft_moe_experts', 2.0)) == 128 * 32 * 3


def test_round_robin_fills_experts_in_turn():
  # 10 tokens over E = 4 experts at c = 1: C = round(10 / 4) = 2 (2.5 -> 2, halves to even);
  # slot c of expert e holds token c E + e, and tokens 8 and 9 find no slot.
  route = moe_layer.round_robin(1, 10, 4)
  np.testing.assert_array_equal(route.slot_token[0], [[0, 4], [1, 5], [2, 6], [3, 7]])
  np.testing.assert_array_equal(route.slot_weight, jnp.ones((1, 4, 2)))
  # 6 tokens: C = round(1.5) = 2; slots past the last token hold the empty index T = 6.
  np.testing.assert_array_equal(moe_layer.round_robin(1, 6, 4).slot_token[0],
                                [[0, 4], [1, 5], [2, 6], [3, 6]])
  # At c = 2, C = round(2 x 6 / 4) = 3 slots: the buffers of a c = 2 router, half of them empty.
  np.testing.assert_array_equal(moe_layer.round_robin(1, 6, 4, 2.0).slot_token[0],
                                [[0, 4, 6], [1, 5, 6], [2, 6, 6], [3, 6, 6]])


def test_expert_shard_runs_each_slot_through_its_devices_local_expert():
  # E = 4 experts on 2 expert devices: the device holds 2 experts, and global expert e's slots
  # (from the other device's groups in the real mesh) go to its local expert e mod 2.
  buffers = jax.random.normal(jax.random.PRNGKey(0), (4, 3, 2, 8))     # (E, G, C, D)
  shard = moe_layer.ExpertShard(2, 16, expert_init='independent', shards=2)
  one_expert = moe.Experts(1, 16)

  @jax.jit   # One compilation, not one per operation.
  def shard_and_experts():
    params = shard.init(jax.random.PRNGKey(1), buffers, train=False)
    local = params['params']
    expected = jnp.stack([
        one_expert.apply({'params': jax.tree.map(lambda p: p[e % 2][None], local)},
                         buffers[e][None], train=False)[0] for e in range(4)])
    return local, expected, shard.apply(params, buffers, train=False)
  local, expected, got = shard_and_experts()
  assert local['wi'].shape == (2, 8, 16)
  # Same float32 products per slot; only the order of the sums may differ. An output sums D = 8
  # products into each of H = 16 hidden units, then 16 products: two orders differ by at most
  # (8 + 16) ulps of the largest partial sum, below 8 here (checked).
  scale = 8.0
  assert float(jnp.max(jnp.abs(expected))) < scale
  np.testing.assert_allclose(got, expected, rtol=0, atol=24 * scale * np.finfo(np.float32).eps)


def test_expert_shard_runs_local_experts_on_every_devices_groups():
  # One expert a device on 4 devices: one (4 x G x C, D) matmul, the shape the all-to-all gives.
  buffers = jnp.zeros((4, 3, 2, 8))
  shard = moe_layer.ExpertShard(1, 16, shards=4)
  # Shapes only (the jaxpr needs no values): an eager init would compile each of its operations.
  params = jax.eval_shape(lambda key: shard.init(key, buffers, train=False), jax.random.PRNGKey(1))
  jaxpr = jax.make_jaxpr(lambda p, b: shard.apply(p, b, train=False))(params, buffers)
  dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == 'dot_general']
  assert [tuple(d.invars[0].aval.shape) for d in dots] == [(1, 24, 8), (1, 24, 16)]


@pytest.mark.parametrize('name, dispatch_dtype', [
    *((name, jnp.float32) for name in sorted(router_lib.ROUTERS)),
    ('softmax_tc', jnp.bfloat16), ('soft_moe', jnp.bfloat16)])   # Index and dense dispatch.
def test_sharded_layer_on_one_shard_is_the_librarys(name, dispatch_dtype):
  # Same parameters and state, same router noise: ExpertShard at shards = 1 runs moe.Experts'
  # arithmetic (the relayout moves bytes only), so outputs and auxiliary losses match exactly.
  config = moe_layer.router_config(name, 1.0, 4)
  x = jax.random.normal(jax.random.PRNGKey(0), (16, 6, 8))      # 2 groups of 8 images.
  library = moe.moe_mlp(4, 16, config, group_size=8, dispatch_dtype=dispatch_dtype)
  sharded = moe_layer.sharded_layer(router_lib.Router(config, 4),
                                     moe_config.images_per_routing_group(config, 8), 4, 16,
                                     shards=1, dispatch_dtype=dispatch_dtype)
  rngs = {'gating': jax.random.PRNGKey(2)}

  @jax.jit   # The init and both layers in one program: one compilation, not one per operation.
  def both_layers():
    params = library.init(jax.random.PRNGKey(1), x, train=False)
    return (library.apply(params, x, train=True, rngs=rngs),
            sharded.apply(params, x, train=True, rngs=rngs))
  (expected, metrics), (got, aux) = both_layers()
  np.testing.assert_array_equal(got, expected)
  assert float(aux['aux_loss']) == float(metrics['aux_loss'])


@pytest.mark.parametrize('flags, message', [
    (['--routers', 'hash'], '--routers: valid values'),
    (['--router-module', 'no_such_module'], '--router-module: router_module='),
    (['--experts', '4', '--expert-shards', '3'], 'divide --experts 4'),
    (['--group-sizes', '20'], 'must be 8 images of equal size'),
    (['--capacities', 'one'], "argument --capacities: invalid"),
    (['--repeats', '0'], '--repeats must be >= 1')])
def test_bad_flags_exit_2(flags, message, capsys):
  with pytest.raises(SystemExit) as exit_info:
    moe_layer.main(flags)
  assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_default_routers_are_the_repositorys():
  # The six paper routers, then the five after the paper, as registered.
  assert moe_layer.parse_args([]).routers == [
      'softmax_tc', 'sinkhorn_tc', 'softmax_ec', 'sinkhorn_ec', 'sparsity_ec', 'soft_moe',
      'sigmoid_tc', 'lossfree_tc', 'base', 'topp_tc', 'random_tc']
