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
    (dict(name='softmax_ec', capacity_factor=1, capacity_rounding='floor'),
     'unknown capacity_rounding .*valid: round_half_even, round_half_up, ceil, ceil_multiple_of_4'),
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
  solver = {'solver_row_error', 'solver_fallbacks'} if name.startswith('sparsity') else set()
  assert set(aux) == {'aux_loss'} | solver and aux['aux_loss'].shape == ()


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
  tokens_a, weights_a, _ = routing.route_group(logits, with_trick, 4)
  tokens_b, weights_b, _ = routing.route_group(logits, without, 4)
  np.testing.assert_array_equal(tokens_a, tokens_b)               # Same dispatch (Pi_ent).
  expert = jnp.arange(4)[:, None]
  np.testing.assert_allclose(weights_a, affinity.softmax(logits)[tokens_a, expert], rtol=1e-6)
  np.testing.assert_allclose(weights_b, affinity.sinkhorn(logits, 20)[tokens_b, expert], rtol=1e-5)


def test_every_affinity_composes_with_every_allocation():
  logits = jax.random.normal(jax.random.PRNGKey(3), (16, 4))
  for name, spec in routing.ROUTERS.items():
    if spec.affinity is None:
      continue
    tokens, weights, _ = routing.route_group(logits, routing.RouterConfig(name, 1), 4)
    assert tokens.shape == weights.shape == (4, 4), name


def test_sinkhorn_balances_token_choice():
  # Every token prefers expert 0. Softmax token choice fills its buffer and drops the rest;
  # Sinkhorn's column constraint spreads the first choices over all experts (section 3.2).
  logits = jax.random.normal(jax.random.PRNGKey(4), (64, 4)) + jnp.array([4.0, 0.0, 0.0, 0.0])
  dropped = {}
  for name in ('softmax_tc', 'sinkhorn_tc'):
    tokens, _, _ = routing.route_group(logits, routing.RouterConfig(name, 1), 16)
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


def test_importance_loss_takes_the_clean_probabilities():
  # Appendix A and V-MoE: importance = CV^2 of sum_t softmax(X W)[t], before the noise. Clean
  # logits all 0 (uniform: loss 0) with noisy logits collapsed on expert 0 (loss ~3) give 0.
  config = routing.RouterConfig(name='softmax_tc', capacity_factor=1, noise_std=1.0,
                                importance_loss_weight=1.0)
  clean = jnp.zeros((2, 8, 4))
  noisy = clean.at[:, :, 0].set(10.0)
  assert float(routing.auxiliary_loss(clean, noisy, config)) == pytest.approx(0.0, abs=1e-7)
  np.testing.assert_allclose(routing.auxiliary_loss(noisy, clean, config), 3 * 0.99, rtol=0.02)


def test_soft_moe_phi_has_the_reference_fan_in():
  # lecun_normal on (D, E, C) with default axes: fan-in E * D (in_axis E, receptive field D), so
  # Var(Phi) = 1 / (E D) = 1 / 512 here, E = 8 times smaller than with fan-in D. The sample
  # variance of n = 64 * 8 * 4 = 2048 draws has relative std sqrt(2 / n) = 0.031; 5 of those
  # (0.16) separate 1 / 512 from 1 / 64 by far.
  config = routing.RouterConfig(name='soft_moe', capacity_factor=1)
  x = jnp.zeros((1, 32, 64))                                       # S = 32, D = 64, E = 8: C = 4.
  phi = routing.Router(config, num_experts=8).init(jax.random.PRNGKey(0), x, train=False)[
      'params']['phi']
  assert phi.shape == (64, 8, 4)
  np.testing.assert_allclose(float(jnp.var(phi)), 1 / (8 * 64), rtol=5 * np.sqrt(2 / phi.size))


def solver_metrics(x_by_token, kernel_row, steps=5):
  """The sparsity_ec Router's solver metrics on G = 3 groups of 4 tokens whose logits are
  x_by_token[t] * kernel_row (D = 8, only feature 0 nonzero), E = 2, c = 1 (C = 2)."""
  config = routing.RouterConfig(name='sparsity_ec', capacity_factor=1, sparsity_steps=steps)
  x = jnp.zeros((3, 4, 8)).at[:, :, 0].set(jnp.asarray(x_by_token, jnp.float32))
  kernel = jnp.zeros((8, 2)).at[0].set(jnp.asarray(kernel_row, jnp.float32))
  _, metrics = routing.Router(config, num_experts=2).apply({'params': {'kernel': kernel}}, x,
                                                           train=False)
  return float(metrics['solver_fallbacks']), float(metrics['solver_row_error'])


def test_sparsity_router_reports_the_solver_health():
  half = 0.5 * np.log(7 / 3)   # Logits +-half: softmax rows [0.7, 0.3] or [0.3, 0.7].
  # Tokens 0, 1 prefer expert 0 and tokens 2, 3 expert 1: expert choice from alpha = 0 gives
  # each expert its 2 tokens with weight 1 (the projection of (0.7, 0.7) on mass T/E = 2), rows
  # sum to 1, F's gradient 1 - row sums is 0 and no step lowers F. The solver returns its start
  # in all 3 groups, counted as fallbacks although the start is optimal here.
  assert solver_metrics([1, 1, -1, -1], [half, -half]) == (3.0, pytest.approx(0.0, abs=1e-6))
  # Identical experts (every row [0.5, 0.5]): both take tokens 0 and 1 (top_k breaks ties by
  # index), rows sum to [2, 2, 0, 0] (error 1), and moving the potentials moves both experts
  # alike, so no step helps: a real fallback, with its row error 1 on record.
  assert solver_metrics([1, 1, -1, -1], [0.0, 0.0]) == (3.0, pytest.approx(1.0, abs=1e-6))
  # Expert choice overfills tokens 0 and 1 (both experts rank them first), and the steps
  # rebalance: no fallback.
  fallbacks, row_error = solver_metrics([3, 2, 1, -2], [1.0, 0.5])
  assert fallbacks == 0.0 and row_error < solver_metrics([3, 2, 1, -2], [1.0, 0.5], steps=0)[1]
