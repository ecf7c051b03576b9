"""The MoE layer equals the paper's eq. (minibatch-moe) evaluated with dense routing tensors."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.model import moe
from vmoe.model import moe_config
from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import declarations
from vmoe.routing import paper_routers
from vmoe.routing import registry
from vmoe.routing import router as router_lib
from vmoe.routing import router_config as router_config_lib
from vmoe.routing import router_spec
from vmoe.routing import soft

NUM_EXPERTS, MLP_DIM, GROUP_SIZE = 4, 32, 2
X = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 16))          # 4 images of 8 tokens, D=16.


def dense_routing_tensors(variables, group, config):
  """The paper's (D, C) for one group through the dense allocation API (not the layer's index
  path) for the paper's allocations, through allocation.to_dense of the spec's slots for the
  others; the affinity and combine are the registry's, which the router tests check on their
  own."""
  params, spec = variables['params'], registry.get(config.name)
  if spec.allocation.kind == declarations.SOFT_ALLOCATION:
    return soft.soft_routing(group, params['router']['phi'], params['router']['scale'])
  capacity = config.capacity(group.shape[0], NUM_EXPERTS)
  state = variables.get(router_lib.ROUTER_STATE, {}).get('router', {})
  kernel = state['kernel'] if 'kernel' in state else params['router']['kernel']
  logits = group @ kernel
  inputs = router_spec.GroupInputs(logits, logits, affinity.softmax(logits), capacity, config,
                                state.get('state', {}), False)
  scores, _ = spec.affinity(inputs)
  combine_scores = spec.combine_fn(inputs, scores)
  if spec.allocation_at(train=False) is paper_routers.TOKEN_CHOICE:
    return allocation.token_choice(scores, capacity, int(config.capacity_factor), combine_scores)
  if spec.allocation_at(train=False) is paper_routers.EXPERT_CHOICE:
    return allocation.expert_choice(scores, capacity, combine_scores)
  slot_token = spec.allocation_at(train=False).slots(scores, capacity, config)
  return allocation.to_dense(slot_token, allocation.slot_weights(slot_token, combine_scores),
                             group.shape[0])


def reference_moe(variables, x, config):
  """eq. (minibatch-moe): MoE(X)[t] = sum_{r,c} C[t,r,c] MLP_r(X^T D[:, r, c]), one expert at a
  time."""
  experts = variables['params']['experts']
  soft = declarations.get(config.name).allocation == declarations.SOFT_ALLOCATION
  images_per_group = 1 if soft else GROUP_SIZE
  groups = x.reshape(x.shape[0] // images_per_group, -1, x.shape[-1])

  def one_group(group):   # vmapped over groups: one traced copy of the formula, not one per group.
    dispatch, combine = dense_routing_tensors(variables, group, config)
    y = jnp.zeros_like(group)
    for r in range(NUM_EXPERTS):
      expert_inputs = dispatch[:, r, :].T @ group                 # (C, D): row c is X^T D[:, r, c].
      hidden = nn.gelu(expert_inputs @ experts['wi'][r] + experts['bi'][r])
      y = y + combine[:, r, :] @ (hidden @ experts['wo'][r] + experts['bo'][r])
    return y
  return jax.vmap(one_group)(groups).reshape(x.shape)


def make_layer(config, dispatch='indices'):
  return moe.moe_mlp(NUM_EXPERTS, MLP_DIM, config, group_size=GROUP_SIZE, dispatch=dispatch)


def init_variables(layer):
  """The layer's variables for X, from a jitted init: run eagerly, init compiles every operation
  of the router (the sparsity solver's too) on its own, which costs seconds."""
  return jax.jit(layer.init)(jax.random.PRNGKey(1), X)


ROUTER_CASES = [(name, c) for name in sorted(router_lib.ROUTERS) for c in (1, 2)] + [
    ('sinkhorn_tc_no_softmax_combine', 1), ('sparsity_ec_no_softmax_combine', 2),
    # Outside the paper's grid: c = 1.25 (C = round(1.25 x 16 / 4) = 5 slots) and k = 3 of E = 4.
    ('softmax_ec', 1.25), ('soft_moe', 1.25), ('softmax_tc', 3)]


def router_config(case, capacity_factor):
  name = case.replace('_no_softmax_combine', '')
  return router_config_lib.RouterConfig(name=name, capacity_factor=capacity_factor,
                              softmax_combine=not case.endswith('_no_softmax_combine'))


@pytest.mark.per_router('case')
@pytest.mark.parametrize('case,capacity_factor', ROUTER_CASES)
def test_layer_output_and_gradients_equal_the_dense_formula(case, capacity_factor):
  config = router_config(case, capacity_factor)
  layer = make_layer(config)
  variables = init_variables(layer)
  probe = jax.random.normal(jax.random.PRNGKey(2), X.shape)      # A random output cotangent.

  def with_probe(apply):  # One compilation gives the output and the gradients w.r.t. params and x.
    def loss(v, x):
      y = apply(v, x)
      return jnp.sum(y * probe), y
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))

  (_, y), got = with_probe(lambda v, x: layer.apply(v, x)[0])(variables, X)
  (_, y_ref), want = with_probe(lambda v, x: reference_moe(v, x, config))(variables, X)
  np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
  for path, g, w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(got),
                        jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5, err_msg=jax.tree_util.keystr(path[0]))
  # The router is trained through the combine weights (and Soft MoE's dispatch), unless it is
  # fixed at initialisation.
  router_grads = jax.tree.leaves(got[0]['params'].get('router', {}))
  state = registry.get(config.name).state
  frozen = state is not None and state.frozen
  assert frozen or sum(float(jnp.abs(g).sum()) for g in router_grads) > 0


@pytest.mark.parametrize('name', ['softmax_tc', 'sinkhorn_ec'])
def test_index_and_einsum_paths_agree_in_training_with_noise(name):
  config = router_config_lib.RouterConfig(name=name, capacity_factor=1, noise_std=1.0)
  rngs = {'gating': jax.random.PRNGKey(3)}

  @jax.jit   # Init and both paths in one program: one compilation.
  def both_paths():
    variables = make_layer(config).init(jax.random.PRNGKey(1), X)
    return [make_layer(config, dispatch).apply(variables, X, train=True, rngs=rngs)[0]
            for dispatch in ('indices', 'einsum')]
  by_index, by_einsum = both_paths()
  np.testing.assert_allclose(by_index, by_einsum, rtol=1e-5, atol=1e-6)


def test_metrics_of_expert_choice_token_choice_and_soft_moe():
  def metrics(name, capacity_factor):
    layer = make_layer(router_config_lib.RouterConfig(name=name, capacity_factor=capacity_factor))
    return jax.jit(lambda: layer.apply(layer.init(jax.random.PRNGKey(1), X), X)[1])()
  ec = metrics('softmax_ec', 1)
  # S = 16 tokens, E = 4, C = 4: the 16 slots are all filled, so 1 expert per token on average.
  np.testing.assert_allclose(ec['expert_load'], np.ones(4))
  np.testing.assert_allclose(ec['experts_per_token_mean'], 1.0)
  assert 0 <= float(ec['dropped_tokens']) < 1 and float(ec['experts_per_token_max']) <= 4
  tc = metrics('softmax_tc', 2)
  assert float(tc['experts_per_token_max']) <= 2 and (tc['expert_load'] <= 1).all()
  # Every kept request fills one slot: S * mean experts per token = C * sum of loads (S=16, C=8).
  np.testing.assert_allclose(16 * tc['experts_per_token_mean'], 8 * tc['expert_load'].sum(),
                             rtol=1e-6)
  soft_metrics = metrics('soft_moe', 1)
  assert float(soft_metrics['dropped_tokens']) == 0.0
  np.testing.assert_allclose(soft_metrics['experts_per_token_mean'], NUM_EXPERTS)
  np.testing.assert_allclose(soft_metrics['expert_load'], np.ones(4), rtol=1e-5)
  # Unfilled slots are 1 - mean load: none for expert choice, S k = 32 requests of E C = 32 slots
  # less the drops for token choice.
  np.testing.assert_allclose(ec['unfilled_slots'], 0.0, atol=1e-7)
  np.testing.assert_allclose(tc['unfilled_slots'], 1 - tc['expert_load'].mean(), atol=1e-7)
  np.testing.assert_allclose(tc['unfilled_slots'], 1 - 16 * tc['experts_per_token_mean'] / 32,
                             atol=1e-6)
  assert set(ec) == {'dropped_tokens', 'experts_per_token_mean', 'experts_per_token_min',
                     'experts_per_token_max', 'expert_load', 'unfilled_slots', 'aux_loss'}


def test_evaluation_is_deterministic():
  config = router_config_lib.RouterConfig(name='softmax_tc', capacity_factor=1, noise_std=1.0)
  layer = make_layer(config)
  variables = init_variables(layer)
  evaluate = jax.jit(lambda gating_rng: layer.apply(variables, X, rngs={'gating': gating_rng})[0])
  a, b = evaluate(jax.random.PRNGKey(0)), evaluate(jax.random.PRNGKey(1))
  np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('expert_init', moe_config.EXPERT_INITS)
def test_experts_start_shared_or_independent(expert_init):
  # 'shared' (V-MoE i21k, split_rngs=False): all E experts equal one draw of a single expert's
  # Xavier-uniform initialiser, bound sqrt(6 / (D + F)); 'independent': E different draws.
  layer = moe.Experts(NUM_EXPERTS, MLP_DIM, expert_init=expert_init)
  buffers = jnp.zeros((NUM_EXPERTS, 2, 3, 16))                     # (E, G, C, D), D = 16.
  params = jax.jit(functools.partial(layer.init, train=False))(jax.random.PRNGKey(0),
                                                               buffers)['params']
  wi = params['wi']
  assert wi.shape == (NUM_EXPERTS, 16, MLP_DIM)
  assert float(jnp.max(jnp.abs(wi))) <= np.sqrt(6 / (16 + MLP_DIM))
  same = [bool(jnp.all(wi[e] == wi[0])) for e in range(NUM_EXPERTS)]
  assert all(same) == (expert_init == 'shared') and any(same[1:]) == (expert_init == 'shared')
