"""Tests of the router registry, its configuration checks and the Router module."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import declarations
from vmoe.routing import paper_routers
from vmoe.routing import registry
from vmoe.routing import router as router_lib
from vmoe.routing import router_config
from vmoe.routing import router_spec

# Jitted (a RouterConfig is hashable): run eagerly, every operation of a router compiles on its own.
route_group = jax.jit(router_lib.route_group, static_argnums=(1, 2))


def test_registry_has_the_paper_routers_and_rejects_unknown_names():
  assert set(router_lib.PAPER_ROUTERS) <= set(router_lib.ROUTERS)
  with pytest.raises(ValueError, match='unknown router .*valid routers: .*sinkhorn_ec, '
                                       'sinkhorn_tc.*router_module=PATH'):
    registry.get('sinkhorn')
  with pytest.raises(ValueError, match='unknown router'):
    router_config.RouterConfig(name='top2', capacity_factor=1)


def test_paper_specs_compose_an_affinity_and_an_allocation_of_their_declared_kind():
  affinities = {'softmax': paper_routers.softmax_scores, 'sinkhorn': paper_routers.sinkhorn_scores,
                'sparsity': paper_routers.sparsity_constrained_scores, 'soft': None}
  allocations = {a.kind: a for a in (paper_routers.TOKEN_CHOICE, paper_routers.EXPERT_CHOICE,
                                     paper_routers.SOFT)}
  assert set(router_lib.PAPER_ROUTERS) | {'sparsity_tc'} == set(paper_routers.ROUTERS)
  for name, spec in paper_routers.ROUTERS.items():
    assert spec is router_lib.ROUTERS[name]
    assert spec.affinity is affinities[name.split('_')[0]]
    assert spec.allocation is allocations[declarations.get(name).allocation]
  # Every built-in router is declared once and implemented once, of the declared kind.
  assert registry.BUILT_IN == set(declarations.BUILT_IN)
  for name, spec in registry.ROUTERS.items():
    assert spec.allocation.kind == declarations.get(name).allocation
  # Presets are the declaration's (docs/fidelity.md traces each).
  assert declarations.get('softmax_tc').presets == {
      'noise_std': 1.0, 'importance_loss_weight': 0.005, 'load_loss_weight': 0.005}
  assert declarations.get('sinkhorn_tc').presets == {'noise_std': 1.0, 'noisy_combine': False}
  assert declarations.get('sparsity_ec').presets == {} == declarations.get('soft_moe').presets
  with pytest.raises(ValueError, match='affinity exactly when its allocation has slots'):
    router_spec.RouterSpec(None, paper_routers.EXPERT_CHOICE)
  with pytest.raises(ValueError, match='affinity exactly when'):
    router_spec.RouterSpec(paper_routers.softmax_scores, paper_routers.SOFT)
  with pytest.raises(ValueError, match='taken by this repository'):
    registry.register('softmax_tc', router_spec.RouterSpec(paper_routers.sinkhorn_scores,
                                                           paper_routers.TOKEN_CHOICE))
  with pytest.raises(ValueError, match='taken by this repository'):
    declarations.declare(declarations.RouterDeclaration('dense', 'Mine', 'token_choice'))


def test_a_spec_must_allocate_by_its_declared_kind(monkeypatch):
  monkeypatch.setitem(declarations.DECLARED, 'mine_ec', declarations.RouterDeclaration(
      'mine_ec', 'Mine', declarations.EXPERT_CHOICE))
  with pytest.raises(ValueError, match="declared with allocation 'expert_choice' but its spec "
                                       "allocates by 'token_choice'"):
    registry.register('mine_ec', router_spec.RouterSpec(paper_routers.softmax_scores,
                                                        paper_routers.TOKEN_CHOICE))
  with pytest.raises(ValueError, match='unknown router'):   # Registered only once declared.
    registry.register('undeclared', router_spec.RouterSpec(paper_routers.softmax_scores,
                                                           paper_routers.TOKEN_CHOICE))


@pytest.mark.parametrize('field,replacement', [
    ('eval_allocation', 'in_evaluation'), ('loss', 'extras='), ('metrics', 'extras='),
    ('frozen_kernel', "RouterState\\(init returning {'kernel'"),
    ('presets', "presets in the router's declaration"), ('title', "title in the router's")])
def test_a_spec_of_the_old_form_names_the_field_to_change(field, replacement):
  with pytest.raises(ValueError, match=f"no field '{field}' any more: give .*{replacement}"):
    router_spec.RouterSpec(paper_routers.softmax_scores, paper_routers.TOKEN_CHOICE,
                           **{field: None})


def _inputs(logits, config, capacity=2, state=None):
  return router_spec.GroupInputs(logits, logits, affinity.softmax(logits), capacity, config,
                              state or {}, True)


def test_registry_entries_compute_their_affinity():
  # logits (3 tokens, 2 experts); softmax rows: [e^1, 1] / (e + 1) = [0.731059, 0.268941], ...
  logits = jnp.array([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]])
  config = router_config.RouterConfig(name='sinkhorn_ec', capacity_factor=1, sinkhorn_iters=3)
  scores, report = paper_routers.softmax_scores(_inputs(logits, config))
  np.testing.assert_allclose(scores[0], [0.731059, 0.268941], rtol=1e-5)
  assert report is None
  scores, _ = paper_routers.sinkhorn_scores(_inputs(logits, config))
  np.testing.assert_array_equal(scores, affinity.sinkhorn(logits, 3))


def test_a_new_router_is_one_declaration_and_one_registry_entry(monkeypatch):
  # 'reversed' prefers the experts softmax ranks last; expert choice then takes, per expert, the
  # C = round(4 / 2) = 2 tokens with the LOWEST softmax score for it.
  monkeypatch.setitem(declarations.DECLARED, 'reversed_ec', declarations.RouterDeclaration(
      'reversed_ec', 'Reversed Expert Choice', declarations.EXPERT_CHOICE))
  monkeypatch.setitem(router_lib.ROUTERS, 'reversed_ec', router_spec.RouterSpec(
      lambda inputs: (1.0 - inputs.probs, None), paper_routers.EXPERT_CHOICE))
  config = router_config.RouterConfig(name='reversed_ec', capacity_factor=1)
  logits = jnp.array([[3.0, 0.0], [2.0, 0.0], [1.0, 0.0], [0.0, 0.0]])  # Expert 0 prob falls.
  slot_token, _, _ = router_lib.route_group(logits, config, capacity=2)
  assert sorted(slot_token[0].tolist()) == [2, 3] and sorted(slot_token[1].tolist()) == [0, 1]


@pytest.mark.parametrize('kwargs,message', [
    (dict(name='softmax_ec', capacity_factor=0), 'capacity factor must be > 0'),
    (dict(name='softmax_tc', capacity_factor=1, load_loss_weight=0.01),
     'needs? .*noise|router noise'),
    (dict(name='softmax_ec', capacity_factor=1, noise_std=1, load_loss_weight=0.01),
     'token choice'),
    (dict(name='sinkhorn_tc', capacity_factor=1, sinkhorn_iters=0), 'sinkhorn_iters'),
    (dict(name='sparsity_ec', capacity_factor=1, sparsity_warm_start=-1), 'sparsity_warm_start'),
    (dict(name='softmax_ec', capacity_factor=1, num_selected_experts=2),
     'num_selected_experts=2 is token choice'),
    (dict(name='softmax_tc', capacity_factor=1, num_selected_experts=0), 'an integer >= 1'),
    (dict(name='soft_moe', capacity_factor=1, eval_capacity_factor=2), "Soft MoE's slots"),
    (dict(name='softmax_tc', capacity_factor=1, eval_capacity_factor=4),
     'set moe.router.num_selected_experts too'),
    (dict(name='softmax_ec', capacity_factor=1, eval_capacity_factor=0), 'must be > 0 or None'),
    (dict(name='softmax_ec', capacity_factor=1, capacity_rounding='floor'),
     'unknown capacity_rounding .*valid: round_half_even, round_half_up, ceil, ceil_multiple_of_4'),
])
def test_config_errors(kwargs, message):
  with pytest.raises(ValueError, match=message):
    router_config.RouterConfig(**kwargs)


def test_sparsity_solver_defaults_follow_the_capacity():
  # 5 steps from 10 Sinkhorn iterations at c <= 1, 10 steps from 0 above (configs use these).
  assert router_config.sparsity_solver_defaults(1) == (5, 10)
  assert router_config.sparsity_solver_defaults(2) == (10, 0)
  config = router_config.RouterConfig(name='sparsity_ec', capacity_factor=2)
  assert (config.sparsity_steps, config.sparsity_warm_start, config.sparsity_memory) == (10, 0, 3)
  with pytest.raises(ValueError, match='sparsity_memory must be >= 1'):
    router_config.RouterConfig(name='sparsity_ec', capacity_factor=1, sparsity_memory=0)


def test_each_allocation_owns_its_checks():
  # Checked where the experiment is parsed (the config alone holds no implementation).
  with pytest.raises(ValueError, match='must be an integer'):
    router_lib.check_allocations(router_config.RouterConfig('softmax_tc', 1.5), None, None)
  config = router_config.RouterConfig(name='sinkhorn_tc', capacity_factor=3)
  with pytest.raises(ValueError, match='k=3 experts per token but only E=2'):
    router_lib.check_allocations(config, None, num_experts=2)
  # Expert choice: C = round(3 x 4 / 2) = 6 > T = 4 tokens to choose from.
  with pytest.raises(ValueError, match='capacity'):
    router_lib.check_allocations(router_config.RouterConfig('softmax_ec', capacity_factor=3), 4, 2)
  router_lib.check_allocations(router_config.RouterConfig('softmax_ec', capacity_factor=1), 4, 2)
  with pytest.raises(ValueError, match="has no option top_q; its options: balance_loss_weight"):
    router_config.RouterConfig(name='topp_tc', capacity_factor=2, options={'top_q': 0.5})
  topp = router_config.RouterConfig(name='topp_tc', capacity_factor=2, options={'top_p': 0.5})
  assert dict(topp.options) == {'top_p': 0.5, 'dynamic_loss_weight': 1e-4,
                                'balance_loss_weight': 1e-2}
  assert hash(topp) == hash(router_config.RouterConfig('topp_tc', 2, options={'top_p': 0.5}))


@pytest.mark.per_router('name')
@pytest.mark.parametrize('name', sorted(router_lib.ROUTERS))
def test_router_parameters_and_outputs(name):
  config = router_config.RouterConfig(name=name, capacity_factor=2)
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 8))        # G=3 groups of S=16 tokens.
  module = router_lib.Router(config, num_experts=4)

  @jax.jit   # The init and the routing in one program: one compilation.
  def init_and_route():
    variables = module.init(jax.random.PRNGKey(1), x, train=False)
    return variables, *module.apply(variables, x, train=False)
  variables, route, aux = init_and_route()
  params = variables.get('params', {})
  capacity = 8                                                     # round(2 * 16 / 4).
  spec = router_lib.ROUTERS[name]
  if spec.state is not None and spec.state.frozen:   # A kernel drawn once, out of the params.
    assert params == {} and variables[router_lib.ROUTER_STATE]['kernel'].shape == (8, 4)
  elif name == 'soft_moe':
    assert params['phi'].shape == (8, 4, capacity) and params['scale'].shape == ()
    assert route.dispatch.shape == route.combine.shape == (3, 16, 4, capacity)
  else:
    assert set(params) == {'kernel'} and params['kernel'].shape == (8, 4)
    assert route.slot_token.shape == route.slot_weight.shape == (3, 4, capacity)
    assert route.slot_token.dtype == jnp.int32
  assert aux['aux_loss'].shape == () and all(jnp.ndim(v) == 0 for v in aux.values())
  if name not in registry.BUILT_IN:   # A user's router: its metrics are its own.
    return
  own = {'sparsity_ec': {'solver_row_error', 'solver_fallbacks'},
         'sparsity_tc': {'solver_row_error', 'solver_fallbacks'},
         'topp_tc': {'experts_per_token', 'dropped_share'},
         'base': {'assignment_unfilled'},
         'lossfree_tc': {'state_bias_range'}}.get(name, set())
  assert set(aux) == {'aux_loss'} | own


@pytest.mark.parametrize('name', ['softmax_tc', 'sinkhorn_tc', 'sinkhorn_ec'])
def test_noise_is_used_in_training_only(name):
  # The Sinkhorn routers too: the reference adds the noise to the logits Sinkhorn transports
  # (kl_projection_routing.py), where the paper's Sinkhorn objective has plain X W (fidelity
  # D17). Their dispatch comes from the plan alone, so a dispatch that moves with the noise
  # draw is a plan of the noisy logits.
  config = router_config.RouterConfig(name=name, capacity_factor=1, noise_std=50.0)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 8))
  module = router_lib.Router(config, num_experts=4)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  run = lambda train, seed: module.apply(variables, x, train=train,
                                         rngs={'gating': jax.random.PRNGKey(seed)})[0]
  np.testing.assert_array_equal(run(False, 0).slot_token, run(False, 1).slot_token)
  assert (run(True, 0).slot_token != run(True, 1).slot_token).any()


def test_softmax_combine_switches_only_the_combine_weights():
  logits = jax.random.normal(jax.random.PRNGKey(2), (16, 4))
  with_trick = router_config.RouterConfig(name='sinkhorn_ec', capacity_factor=1)
  without = router_config.RouterConfig(name='sinkhorn_ec', capacity_factor=1, softmax_combine=False)
  tokens_a, weights_a, _ = router_lib.route_group(logits, with_trick, 4)
  tokens_b, weights_b, _ = router_lib.route_group(logits, without, 4)
  np.testing.assert_array_equal(tokens_a, tokens_b)               # Same dispatch (Pi_ent).
  expert = jnp.arange(4)[:, None]
  np.testing.assert_allclose(weights_a, affinity.softmax(logits)[tokens_a, expert], rtol=1e-6)
  np.testing.assert_allclose(weights_b, affinity.sinkhorn(logits, 20)[tokens_b, expert], rtol=1e-5)


def test_every_affinity_composes_with_every_allocation():
  logits = jax.random.normal(jax.random.PRNGKey(3), (16, 4))
  for name in sorted(registry.BUILT_IN):
    if router_lib.ROUTERS[name].affinity is None:
      continue
    tokens, weights, _ = route_group(logits, router_config.RouterConfig(name, 1), 4)
    assert tokens.shape == weights.shape == (4, 4), name


def test_sinkhorn_balances_token_choice():
  # Every token prefers expert 0. Softmax token choice fills its buffer and drops the rest;
  # Sinkhorn's column constraint spreads the first choices over all experts (section 3.2).
  logits = jax.random.normal(jax.random.PRNGKey(4), (64, 4)) + jnp.array([4.0, 0.0, 0.0, 0.0])
  dropped = {}
  for name in ('softmax_tc', 'sinkhorn_tc'):
    tokens, _, _ = route_group(logits, router_config.RouterConfig(name, 1), 16)
    dropped[name] = 1 - int((tokens < 64).sum()) / 64
  assert dropped['softmax_tc'] >= 0.7                              # 48 of 64 tokens lose out.
  assert dropped['sinkhorn_tc'] <= 0.2


def test_balance_losses_are_weighted_and_averaged():
  config = router_config.RouterConfig(name='softmax_tc', capacity_factor=1, noise_std=1.0,
                                importance_loss_weight=0.5, load_loss_weight=0.0)
  logits = jnp.zeros((2, 8, 4)).at[:, :, 0].set(10.0)           # Collapsed on expert 0.
  # softmax(10, 0, 0, 0) puts 0.99864 on expert 0, so importance CV^2 is close to E - 1 = 3.
  loss = router_lib.auxiliary_loss(logits, logits, config)
  np.testing.assert_allclose(loss, 0.5 * 3 * 0.99, rtol=0.02)


def test_importance_loss_takes_the_clean_probabilities():
  # Appendix A and V-MoE: importance = CV^2 of sum_t softmax(X W)[t], before the noise. Clean
  # logits all 0 (uniform: loss 0) with noisy logits collapsed on expert 0 (loss ~3) give 0.
  config = router_config.RouterConfig(name='softmax_tc', capacity_factor=1, noise_std=1.0,
                                importance_loss_weight=1.0)
  clean = jnp.zeros((2, 8, 4))
  noisy = clean.at[:, :, 0].set(10.0)
  assert float(router_lib.auxiliary_loss(clean, noisy, config)) == pytest.approx(0.0, abs=1e-7)
  np.testing.assert_allclose(router_lib.auxiliary_loss(noisy, clean, config), 3 * 0.99, rtol=0.02)


def test_soft_moe_phi_has_the_reference_fan_in():
  # lecun_normal on (D, E, C) with default axes: fan-in E * D (in_axis E, receptive field D), so
  # Var(Phi) = 1 / (E D) = 1 / 512 here, E = 8 times smaller than with fan-in D. The sample
  # variance of n = 64 * 8 * 4 = 2048 draws has relative std sqrt(2 / n) = 0.031; 5 of those
  # (0.16) separate 1 / 512 from 1 / 64 by far.
  config = router_config.RouterConfig(name='soft_moe', capacity_factor=1)
  x = jnp.zeros((1, 32, 64))                                       # S = 32, D = 64, E = 8: C = 4.
  phi = router_lib.Router(config, num_experts=8).init(jax.random.PRNGKey(0), x, train=False)[
      'params']['phi']
  assert phi.shape == (64, 8, 4)
  np.testing.assert_allclose(float(jnp.var(phi)), 1 / (8 * 64), rtol=5 * np.sqrt(2 / phi.size))


def test_sparse_router_kernel_is_bias_free_lecun_normal():
  # V-MoE's routers (vmoe/nn/routing.py): a bias-free Dense with flax's default kernel_init,
  # lecun_normal = variance_scaling(1, fan_in, truncated_normal): draws z ~ N(0, 1) cut at |z| < 2,
  # scaled by s = sqrt(1 / D) / 0.87962566 (the std of the cut normal), so Var(W) = 1 / D exactly
  # and |W| < 2 s = 2.27 / sqrt(D). With D = 64, E = 32: n = 2048 draws, Var 1 / 64; the sample
  # variance errs by less than sqrt(2 / n) = 0.031 relative (the cut normal's kurtosis is below
  # 3), so 5 of those (0.16) exclude Xavier (2 / (D + E) = 1 / 48, 33% more) and He (1 / 32).
  # The bound 2.27 / sqrt(D) excludes an uncut normal (2.3% of its draws lie beyond it, about 47
  # of 2048); reaching past sqrt(3 / D) excludes lecun_uniform (8.6% of the cut normal's draws do).
  # Every sparse router shares this parameter (test_router_parameters_and_outputs: tree
  # {'kernel'} for each).
  config = router_config.RouterConfig(name='softmax_tc', capacity_factor=1)
  x = jnp.zeros((1, 32, 64))                                       # S = 32, D = 64.
  params = router_lib.Router(config, num_experts=32).init(jax.random.PRNGKey(0), x, train=False)[
      'params']
  assert set(params) == {'kernel'}                                  # No bias.
  kernel = np.asarray(params['kernel'])
  assert kernel.shape == (64, 32)
  np.testing.assert_allclose(kernel.var(), 1 / 64, rtol=5 * np.sqrt(2 / kernel.size))
  assert np.sqrt(3 / 64) < np.abs(kernel).max() < 2 / 0.87962566 / np.sqrt(64)


def solver_metrics(x_by_token, kernel_row, steps=5):
  """The sparsity_ec Router's solver metrics on G = 3 groups of 4 tokens whose logits are
  x_by_token[t] * kernel_row (D = 8, only feature 0 nonzero), E = 2, c = 1 (C = 2)."""
  metrics = _solver_metrics(jnp.asarray(x_by_token, jnp.float32),
                            jnp.asarray(kernel_row, jnp.float32), steps)
  return float(metrics['solver_fallbacks']), float(metrics['solver_row_error'])


@functools.partial(jax.jit, static_argnums=(2,))   # One compilation per step count.
def _solver_metrics(x_by_token, kernel_row, steps):
  config = router_config.RouterConfig(name='sparsity_ec', capacity_factor=1, sparsity_steps=steps,
                                sparsity_warm_start=0)   # The cases below reason from alpha = 0.
  x = jnp.zeros((3, 4, 8)).at[:, :, 0].set(x_by_token)
  kernel = jnp.zeros((8, 2)).at[0].set(kernel_row)
  _, metrics = router_lib.Router(config, num_experts=2).apply({'params': {'kernel': kernel}}, x,
                                                           train=False)
  return metrics


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


def test_training_noise_has_std_noise_std_over_e_and_feeds_the_combine_weights():
  # Two experts at c = 2: each expert's buffer holds every token (C = 2 * 256 / 2 = 256), so no
  # selection biases the sample. A slot's combine weight w = softmax(noisy logits)[token, 0]
  # gives back the routed logit difference log(w / (1 - w)) = (l0 - l1) + (n0 - n1); with std
  # noise_std / E per logit, n0 - n1 has std sqrt(2) * noise_std / E = 0.7071 for noise_std = 1.
  config = router_config.RouterConfig(name='softmax_ec', capacity_factor=2, noise_std=1.0)
  x = jax.random.normal(jax.random.PRNGKey(0), (8, 256, 16))
  module = router_lib.Router(config, num_experts=2)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  clean = jnp.einsum('gsd,de->gse', x, variables['params']['kernel'])

  def routed_differences(train):
    routing, _ = module.apply(variables, x, train=train, rngs={'gating': jax.random.PRNGKey(2)})
    w = routing.slot_weight[:, 0]                                # (G, C): expert 0's slots.
    diff = jnp.take_along_axis(clean[..., 0] - clean[..., 1], routing.slot_token[:, 0], axis=1)
    return np.asarray(jnp.log(w / (1 - w)) - diff).ravel()
  # Evaluation: no noise, the combine weights are the clean softmax (float32 rounding of w near
  # 1 bounds the recovered difference's error; |l0 - l1| < 4 here, so w <= 0.98 and the error is
  # a few ulps of 1 / (1 - w) ~ 50: < 1e-4).
  assert np.abs(routed_differences(False)).max() < 1e-4
  noise = routed_differences(True)
  # 8 groups x 256 slots = 2048 samples: the sample std's relative error is about
  # 1 / sqrt(2 * 2048) = 1.6%, 5 sigma 7.8%. Without the / E the std would be twice as large.
  assert noise.size == 2048 and abs(noise.std() / (np.sqrt(2) * 1.0 / 2) - 1) < 0.078


@pytest.mark.parametrize('name,noisy_combine', [('sinkhorn_tc', False), ('softmax_tc', True),
                                                ('softmax_ec', True), ('sinkhorn_ec', True)])
@pytest.mark.parametrize('override', [False, True])
def test_training_combine_takes_the_reference_routers_noisy_or_clean_softmax(
    name, noisy_combine, override):
  # The reference's token-choice Sinkhorn router combines with the clean softmax, its others with
  # the noisy one (D5); noisy_combine overrides that choice.
  if override:
    noisy_combine = not noisy_combine
    config = router_config.RouterConfig(name, 1, noise_std=1.0, noisy_combine=noisy_combine)
  else:
    config = router_config.RouterConfig(name, 1, noise_std=1.0)
  assert config.noisy_combine is noisy_combine
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 16))
  module = router_lib.Router(config, num_experts=4)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  routing, _ = module.apply(variables, x, train=True, rngs={'gating': jax.random.PRNGKey(2)})
  clean = jnp.einsum('gsd,de->gse', x, variables['params']['kernel'])
  expected = jax.vmap(allocation.slot_weights)(routing.slot_token,
                                                affinity.softmax(clean))
  # The same float32 softmax of the same logits: equal up to the einsum's summation order, a few
  # ulps of logits of order 1 (1e-6 covers 8 ulps). The noise (std 1/4 a logit) moves the noisy
  # combine weights by ~10% of their size, far above that.
  error = np.abs(np.asarray(routing.slot_weight - expected)).max()
  if noisy_combine:
    assert error > 1e-2
  else:
    np.testing.assert_allclose(routing.slot_weight, expected, atol=1e-6)


def test_a_router_with_state_updates_it_once_per_training_call_and_never_in_evaluation():
  # lossfree_tc at k = 1, E = 4, G = 2 groups of 8 tokens: after one training call the bias is
  # 0 + u sign(mean load - load), the loads counted from both groups' top-1 requests together.
  config = router_config.RouterConfig(name='lossfree_tc', capacity_factor=1)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8))
  module = router_lib.Router(config, num_experts=4)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  assert variables[router_lib.ROUTER_STATE]['state']['bias'].tolist() == [0.0] * 4
  _, updated = module.apply(variables, x, train=True, mutable=[router_lib.ROUTER_STATE])
  logits = np.einsum('gsd,de->gse', np.asarray(x, np.float64),
                     np.asarray(variables['params']['kernel'], np.float64))
  top2 = np.sort(logits, axis=-1)[..., -2:]
  # The router's float32 logits pick the same top expert as these float64 ones: every token's
  # top-1 margin is far above float32's rounding of an 8-term dot product (~1e-6 here).
  assert np.min(top2[..., 1] - top2[..., 0]) > 1e-4
  load = np.bincount(np.argmax(logits, axis=-1).ravel(), minlength=4)   # sigmoid is monotone.
  expected = 1e-3 * np.sign(load.mean() - load)
  np.testing.assert_array_equal(updated[router_lib.ROUTER_STATE]['state']['bias'],
                                expected.astype(np.float32))
  assert load.sum() == 16 and np.any(expected != 0)
  # Evaluation: the collection passed immutable, or mutable with train=False, never changes.
  module.apply(variables, x, train=False)
  _, same = module.apply(variables, x, train=False, mutable=[router_lib.ROUTER_STATE])
  assert same[router_lib.ROUTER_STATE]['state']['bias'].tolist() == [0.0] * 4


def test_routers_after_the_paper_pin_their_defaults():
  # docs/fidelity.md, "Routers after the paper": no router noise or paper losses for any of the
  # five; their options at the sources' values.
  lab = ('sigmoid_tc', 'lossfree_tc', 'base', 'topp_tc', 'random_tc')
  assert declarations.LAB_ROUTERS == lab
  specs = {name: router_lib.ROUTERS[name] for name in lab}
  declared = {name: declarations.get(name) for name in lab}
  assert all(d.presets == {} for d in declared.values())
  gate = {'n_groups': 1, 'topk_groups': 1, 'route_scale': 1.0}   # DeepSeek-V3's gate, ungrouped.
  assert declared['sigmoid_tc'].options == gate
  assert declared['lossfree_tc'].options == {**gate, 'bias_update_rate': 1e-3}
  assert declared['base'].options == {'auction_epsilon': 1e-4, 'auction_max_iters': 50_000}
  assert declared['topp_tc'].options == {'top_p': 0.4, 'dynamic_loss_weight': 1e-4,
                                         'balance_loss_weight': 1e-2}
  assert specs['random_tc'].state.frozen and not specs['lossfree_tc'].state.frozen
  assert specs['sigmoid_tc'].state is None
  # BASE: the balanced assignment in training, greedy top-1 token choice in evaluation.
  assert specs['base'].allocation.kind == 'balanced_assignment'
  assert specs['base'].allocation_at(train=False).kind == declarations.TOKEN_CHOICE
  config = router_config.RouterConfig('sigmoid_tc', 1)
  assert config.noise_std == 0 and config.importance_loss_weight == config.load_loss_weight == 0


def test_k_apart_from_c_is_vmoes_capacity_and_its_evaluation_capacity():
  # V-MoE's S/32 on ImageNet-1k: groups of 8 images x 50 tokens = T = 400, E = 8, K = 2 and
  # c = 1.05; its compute_capacity(num_tokens=K*T, ...): ceil(1.05 x 800 / 8) = 105, up to a
  # multiple of 4: 108. Evaluation at c = 4.0: ceil(4 x 800 / 8) = 400 = T.
  config = router_config.RouterConfig('softmax_tc', 1.05, num_selected_experts=2,
                                   eval_capacity_factor=4.0,
                                   capacity_rounding='ceil_multiple_of_4')
  assert config.experts_per_token == 2
  assert config.capacity(400, 8) == 108 and config.capacity(400, 8, train=False) == 400
  # An expert choice router takes an evaluation capacity too: round(2 x 16 / 4) = 8 slots.
  ec = router_config.RouterConfig('softmax_ec', 1, eval_capacity_factor=2)
  assert (ec.capacity(16, 4), ec.capacity(16, 4, train=False)) == (4, 8)
  with pytest.raises(ValueError, match='k=3 experts per token but only E=2 .*num_selected_experts'):
    router_lib.check_allocations(
        router_config.RouterConfig('softmax_tc', 1.05, num_selected_experts=3), None, 2)
  # Expert choice refuses an evaluation C = round(8 x 4 / 2) = 16 > T = 4.
  with pytest.raises(ValueError, match='capacity <= T=4 tokens per group, got C=16'):
    router_lib.check_allocations(
        router_config.RouterConfig('softmax_ec', 1, eval_capacity_factor=8), 4, 2)


@pytest.mark.parametrize('name', ['softmax_tc', 'sinkhorn_tc', 'sigmoid_tc', 'topp_tc'])
def test_defaults_keep_k_the_capacity_factor_and_evaluation_at_trainings_capacity(name):
  # num_selected_experts = None and eval_capacity_factor = None are the code before the keys: k is
  # c, C = round(c T / E) in training and evaluation. And k = 2 set apart with c = 1 routes as
  # k = c = 2 does: C = round(1 x 2T / E) = round(2 x T / E) (2.0 T is exact), the same top-2.
  default = router_config.RouterConfig(name, 2, noise_std=1.0)
  apart = router_config.RouterConfig(name, 1, noise_std=1.0, num_selected_experts=2)
  assert default.experts_per_token == apart.experts_per_token == 2
  for num_tokens in (16, 50, 400):
    assert (default.capacity(num_tokens, 8) == default.capacity(num_tokens, 8, train=False)
            == apart.capacity(num_tokens, 8) == round(2 * num_tokens / 8))
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 8))
  variables = router_lib.Router(default, 4).init(jax.random.PRNGKey(1), x, train=False)
  for train in (False, True):
    rngs = {'gating': jax.random.PRNGKey(2)}
    outputs = [router_lib.Router(config, 4).apply(variables, x, train=train, rngs=rngs,
                                                  mutable=[router_lib.ROUTER_STATE])[0]
               for config in (default, apart)]
    jax.tree.map(np.testing.assert_array_equal, outputs[0], outputs[1])


def test_evaluation_routes_with_the_evaluation_capacity():
  # T = 16, E = 4, k = 2: training C = round(1 x 32 / 4) = 8, evaluation round(2 x 32 / 4) = 16.
  config = router_config.RouterConfig('softmax_tc', 1, num_selected_experts=2,
                                   eval_capacity_factor=2)
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 8))
  module = router_lib.Router(config, 4)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  route_train, _ = module.apply(variables, x, train=True, rngs={'gating': jax.random.PRNGKey(2)})
  route_eval, _ = module.apply(variables, x, train=False)
  assert route_train.slot_token.shape == (3, 4, 8) and route_eval.slot_token.shape == (3, 4, 16)
  # At 16 slots per expert no request is dropped: every token holds its k = 2 slots.
  held = jax.vmap(lambda t: jnp.bincount(t.ravel(), length=17))(route_eval.slot_token)
  np.testing.assert_array_equal(held[:, :16], 2)


# Every built-in router's variables by path and shape (D = 6, E = 4, groups of 8 tokens, c = 1):
# checkpoints key on these paths, so a spec's refactoring must leave them where they are.
VARIABLE_TREES = {
    'base': {'params/kernel': (6, 4)},
    'lossfree_tc': {'params/kernel': (6, 4), 'router_state/state/bias': (4,)},
    'random_tc': {'router_state/kernel': (6, 4)},
    'sigmoid_tc': {'params/kernel': (6, 4)},
    'sinkhorn_ec': {'params/kernel': (6, 4)},
    'sinkhorn_tc': {'params/kernel': (6, 4)},
    'soft_moe': {'params/phi': (6, 4, 2), 'params/scale': ()},
    'softmax_ec': {'params/kernel': (6, 4)},
    'softmax_tc': {'params/kernel': (6, 4)},
    'sparsity_ec': {'params/kernel': (6, 4)},
    'sparsity_tc': {'params/kernel': (6, 4)},
    'topp_tc': {'params/kernel': (6, 4)},
}


def test_variable_trees_of_the_built_in_routers_are_pinned():
  assert set(VARIABLE_TREES) == registry.BUILT_IN
  x = jnp.zeros((2, 8, 6))
  for name, expected in VARIABLE_TREES.items():
    module = router_lib.Router(router_config.RouterConfig(name, 1), 4)
    shapes = jax.eval_shape(lambda m=module: m.init(jax.random.PRNGKey(0), x, train=False))
    found = {jax.tree_util.keystr(path, simple=True, separator='/'): leaf.shape
             for path, leaf in jax.tree_util.tree_leaves_with_path(dict(shapes))}
    assert found == expected, name
