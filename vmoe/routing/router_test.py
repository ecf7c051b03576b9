"""Tests of the router registry, its configuration checks and the Router module."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import affinity
from vmoe.routing import router as routing


def test_registry_has_the_paper_routers_and_rejects_unknown_names():
  assert set(routing.PAPER_ROUTERS) <= set(routing.ROUTERS)
  with pytest.raises(ValueError, match='unknown router .*valid routers: sinkhorn_ec, sinkhorn_tc'):
    routing.get_router_spec('sinkhorn')
  with pytest.raises(ValueError, match='unknown router'):
    routing.RouterConfig(name='top2', capacity_factor=1)


@pytest.mark.parametrize('kwargs,message', [
    (dict(name='softmax_ec', capacity_factor=0), 'capacity factor must be > 0'),
    (dict(name='softmax_tc', capacity_factor=1.5), 'must be an integer'),
    (dict(name='softmax_tc', capacity_factor=1, load_loss_weight=0.01), 'needs? .*noise|router noise'),
    (dict(name='softmax_ec', capacity_factor=1, noise_std=1, load_loss_weight=0.01), 'token choice'),
    (dict(name='sinkhorn_tc', capacity_factor=1, sinkhorn_iters=0), 'sinkhorn_iters'),
    (dict(name='sparsity_ec', capacity_factor=1, sparsity_warm_start=-1), 'sparsity_warm_start'),
])
def test_config_errors(kwargs, message):
  with pytest.raises(ValueError, match=message):
    routing.RouterConfig(**kwargs)


def test_more_experts_per_token_than_experts_fails():
  config = routing.RouterConfig(name='sinkhorn_tc', capacity_factor=3)
  with pytest.raises(ValueError, match='k=3 experts per token but only E=2'):
    config.capacity(num_tokens=16, num_experts=2)


@pytest.mark.parametrize('name', sorted(routing.ROUTERS))
def test_router_parameters_and_outputs(name):
  config = routing.RouterConfig(name=name, capacity_factor=2)
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 8))        # G=3 groups of S=16 tokens.
  module = routing.Router(config, num_experts=4)
  params = module.init(jax.random.PRNGKey(1), x, train=False)['params']
  route, aux = module.apply({'params': params}, x, train=False)
  capacity = 8                                                     # round(2 * 16 / 4).
  if name == 'soft_moe':
    assert params['phi'].shape == (8, 4, capacity) and params['scale'].shape == ()
    assert route.dispatch.shape == route.combine.shape == (3, 16, 4, capacity)
  else:
    assert set(params) == {'kernel'} and params['kernel'].shape == (8, 4)
    assert route.slot_token.shape == route.slot_weight.shape == (3, 4, capacity)
    assert route.slot_token.dtype == jnp.int32
  assert aux.shape == ()


def test_noise_is_used_in_training_only():
  config = routing.RouterConfig(name='softmax_tc', capacity_factor=1, noise_std=50.0)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 8))
  module = routing.Router(config, num_experts=4)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  run = lambda train, seed: module.apply(variables, x, train=train,
                                         rngs={'gating': jax.random.PRNGKey(seed)})[0]
  np.testing.assert_array_equal(run(False, 0).slot_token, run(False, 1).slot_token)
  assert (run(True, 0).slot_token != run(True, 1).slot_token).any()


def test_softmax_combine_switches_only_the_combine_weights():
  logits = jax.random.normal(jax.random.PRNGKey(2), (16, 4))
  with_trick = routing.RouterConfig(name='sinkhorn_ec', capacity_factor=1)
  without = routing.RouterConfig(name='sinkhorn_ec', capacity_factor=1, softmax_combine=False)
  tokens_a, weights_a = routing.route_group(logits, with_trick, 4)
  tokens_b, weights_b = routing.route_group(logits, without, 4)
  np.testing.assert_array_equal(tokens_a, tokens_b)               # Same dispatch (Pi_ent).
  expert = jnp.arange(4)[:, None]
  np.testing.assert_allclose(weights_a, affinity.softmax(logits)[tokens_a, expert], rtol=1e-6)
  np.testing.assert_allclose(weights_b, affinity.sinkhorn(logits, 20)[tokens_b, expert], rtol=1e-5)


def test_every_affinity_composes_with_every_allocation():
  logits = jax.random.normal(jax.random.PRNGKey(3), (16, 4))
  for name, spec in routing.ROUTERS.items():
    if spec.affinity is None:
      continue
    tokens, weights = routing.route_group(logits, routing.RouterConfig(name, 1), 4)
    assert tokens.shape == weights.shape == (4, 4), name


def test_sinkhorn_balances_token_choice():
  # Every token prefers expert 0. Softmax token choice fills its buffer and drops the rest;
  # Sinkhorn's column constraint spreads the first choices over all experts (section 3.2).
  logits = jax.random.normal(jax.random.PRNGKey(4), (64, 4)) + jnp.array([4.0, 0.0, 0.0, 0.0])
  dropped = {}
  for name in ('softmax_tc', 'sinkhorn_tc'):
    tokens, _ = routing.route_group(logits, routing.RouterConfig(name, 1), 16)
    dropped[name] = 1 - int((tokens < 64).sum()) / 64
  assert dropped['softmax_tc'] >= 0.7                              # 48 of 64 tokens lose out.
  assert dropped['sinkhorn_tc'] <= 0.2


def test_balance_losses_are_weighted_and_averaged():
  config = routing.RouterConfig(name='softmax_tc', capacity_factor=1, noise_std=1.0,
                                importance_loss_weight=0.5, load_loss_weight=0.0)
  logits = jnp.zeros((2, 8, 4)).at[:, :, 0].set(10.0)           # Collapsed on expert 0.
  # softmax(10, 0, 0, 0) puts 0.99864 on expert 0, so importance CV^2 is close to E - 1 = 3.
  loss = routing.auxiliary_loss(logits, logits, config)
  np.testing.assert_allclose(loss, 0.5 * 3 * 0.99, rtol=0.02)
