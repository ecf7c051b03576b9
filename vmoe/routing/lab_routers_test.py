"""The five routers after the paper (lab_routers.py) by value, through the public path: their
combine with a bias and with DeepSeek-V3's groups (route_group), and the values of their hooks as
the Router module reports them: top-p's losses and metrics, BASE's `assignment_unfilled`, a
router state's range. Each expected value is computed here in float64 NumPy from the router's
definition, not from the project's functions."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from testing import reference_routers as ref
from vmoe.routing import router as router_lib
from vmoe.routing import router_config

route_group = jax.jit(router_lib.route_group, static_argnums=(1, 2), static_argnames='train')


def _dense_weights(slot_token, slot_weight, num_tokens: int) -> np.ndarray:
  """(T, E) combine weight of each token at each expert it was dispatched to, 0 elsewhere."""
  slot_token, slot_weight = np.asarray(slot_token), np.asarray(slot_weight)
  out = np.zeros((num_tokens, slot_token.shape[0]))
  for e, c in zip(*np.nonzero(slot_token < num_tokens)):
    out[slot_token[e, c], e] = slot_weight[e, c]
  return out


def test_lossfree_combine_weighs_the_experts_its_bias_chose():
  # logits (0, ln 3, -ln 3): s = (0.5, 0.75, 0.25). Bias (0, 0, 0.3): choice scores (0.5, 0.75,
  # 0.55), so k = 2 takes experts 1 and 2, weighed by their unbiased s over its sum 1.0: 0.75 and
  # 0.25, as DeepSeek-V3's Gate (the bug weighed them over the unbiased top 2: 0.6 and 0.2).
  logits = jnp.array([[0.0, math.log(3.0), -math.log(3.0)]])
  config = router_config.RouterConfig('lossfree_tc', 2)
  slot_token, slot_weight, _ = route_group(logits, config, 1,
                                           state={'bias': jnp.array([0.0, 0.0, 0.3])})
  np.testing.assert_allclose(_dense_weights(slot_token, slot_weight, 1), [[0.0, 0.75, 0.25]],
                             rtol=1e-6)
  # Without the bias: experts 1 and 0, 0.75 / 1.25 and 0.5 / 1.25.
  slot_token, slot_weight, _ = route_group(logits, config, 1,
                                           state={'bias': jnp.zeros(3)})
  np.testing.assert_allclose(_dense_weights(slot_token, slot_weight, 1), [[0.4, 0.6, 0.0]],
                             rtol=1e-6)


def numpy_gate(logits, k, bias=None, **options):
  """(T, E) weights of the float64 DeepSeek-V3 `Gate` (testing/reference_routers.py), 0 at the
  experts not chosen: its combine with room for every request (C = T), summed over slots."""
  return ref.sigmoid_gate(np.asarray(logits, np.float64), logits.shape[0], k, bias,
                          **options).combine.sum(axis=2)


@pytest.mark.parametrize('name,k', [('sigmoid_tc', 4), ('lossfree_tc', 4), ('lossfree_tc', 1)])
def test_grouped_gate_equals_deepseek_v3s(name, k):
  # E = 16 experts in 4 groups of 4, 2 kept per token, scale 2.5 (the published configs' kind:
  # 8 groups, 4 kept, 2.5). C = T: no request is dropped, so every token's slots carry its Gate
  # weights. The bias (lossfree_tc's state) changes choices: sd 0.2 against s's spread.
  num_tokens, num_experts = 48, 16
  rng = np.random.default_rng(7)
  logits = rng.normal(size=(num_tokens, num_experts))
  bias = 0.2 * rng.normal(size=num_experts) if name == 'lossfree_tc' else None
  options = {'n_groups': 4, 'topk_groups': 2, 'route_scale': 2.5}
  config = router_config.RouterConfig(name, k, options=options)
  state = None if bias is None else {'bias': jnp.asarray(bias, jnp.float32)}
  slot_token, slot_weight, _ = route_group(jnp.asarray(logits, jnp.float32), config, num_tokens,
                                           state=state)
  expected = numpy_gate(logits, k, bias, **options)
  # The choices: float64 score gaps here exceed 1e-4, far above float32 rounding (~6e-8).
  got = _dense_weights(slot_token, slot_weight, num_tokens)
  np.testing.assert_array_equal(got > 0, expected > 0)
  # A sigmoid, a sum of k terms, a division and a scale: a few float32 roundings.
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  if k > 1:
    np.testing.assert_allclose(got.sum(axis=1), 2.5, rtol=1e-6)
  # The group limit matters here: without it the chosen sets differ for some tokens.
  ungrouped = numpy_gate(logits, k, bias, route_scale=2.5)
  assert np.any((ungrouped > 0) != (expected > 0))


@pytest.mark.parametrize('options,message', [
    ({'n_groups': 3}, 'must divide the E=8'),
    ({'n_groups': 8}, 'a group needs at least 2'),
    ({'n_groups': 4, 'topk_groups': 5}, r'topk_groups=5 must be in 1..n_groups=4'),
    ({'n_groups': 4, 'topk_groups': 1}, r'k=4 choices do not fit in topk_groups=1 groups of 2'),
    ({'route_scale': 0.0}, 'route_scale must be > 0'),
])
def test_gate_options_are_checked_saying_what_to_change(options, message):
  config = router_config.RouterConfig('sigmoid_tc', 4, options=options)
  with pytest.raises(ValueError, match=message):
    router_lib.check_allocations(config, 32, 8)


def _router_outputs(config, num_experts, x, state=None):
  """(route, metrics, logits (G, S, E) float64 of the router's own kernel), in training mode
  without noise."""
  module = router_lib.Router(config, num_experts)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  if state is not None:
    variables = {**variables, router_lib.ROUTER_STATE: {'state': state}}
  (route, metrics), _ = module.apply(variables, x, train=True, mutable=[router_lib.ROUTER_STATE])
  logits = np.einsum('gsd,de->gse', np.asarray(x, np.float64),
                     np.asarray(variables['params']['kernel'], np.float64))
  return route, metrics, logits


def _softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  return np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)


def test_top_p_losses_and_metrics_by_value():
  # G = 2 groups of 16 tokens, E = 4, k_max = 2, p = 0.4. Huang et al.: the dynamic loss is the
  # mean entropy of softmax(logits); the balance loss E sum_e f_e Q_e, f_e the share of tokens
  # choosing e (their fewest experts past p), Q_e the mean probability. Weights 1e-4 and 1e-2.
  config = router_config.RouterConfig('topp_tc', 2)
  x = 2.0 * jax.random.normal(jax.random.PRNGKey(0), (2, 16, 8))
  route, metrics, logits = _router_outputs(config, 4, x)
  probs = _softmax(logits)
  entropy = -np.sum(probs * np.log(probs), axis=-1).mean(axis=-1)               # (G,)
  ranked = np.sort(probs, axis=-1)[..., ::-1][..., :2]
  choices = np.minimum(1 + np.sum(np.cumsum(ranked, axis=-1) <= 0.4, axis=-1), 2)   # (G, S)
  order = np.argsort(-probs, axis=-1, kind='stable')[..., :2]
  chosen = np.zeros_like(probs)
  for rank in range(2):
    made = (choices > rank)[..., None]
    chosen += made * (np.arange(4) == order[..., rank:rank + 1])
  balance = 4 * np.sum(chosen.mean(axis=1) * probs.mean(axis=1), axis=-1)         # (G,)
  # Both sides read softmax of an 8-term dot product: float32 relative error ~1e-6.
  np.testing.assert_allclose(metrics['aux_loss'], 1e-4 * entropy.mean() + 1e-2 * balance.mean(),
                             rtol=1e-5)
  assert 1 < choices.mean() < 2     # Both one and two experts occur: the test sees p act.
  np.testing.assert_allclose(metrics['experts_per_token'], choices.mean(), rtol=1e-6)
  placed = np.sum(np.asarray(route.slot_token) < 16)
  np.testing.assert_allclose(metrics['dropped_share'], 1 - placed / choices.sum(), rtol=1e-6)


@pytest.mark.parametrize('max_iters', [1, 3, 50_000])
def test_assignment_unfilled_counts_the_missing_placements(max_iters):
  # T = 16 tokens, E = 4 experts, c = 1: C = 4, E C = T, so a full assignment places all 16.
  # An auction stopped after max_iters bids has placed fewer: the metric is the share missing.
  config = router_config.RouterConfig('base', 1, options={'auction_max_iters': max_iters})
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 8))
  route, metrics, _ = _router_outputs(config, 4, x)
  placed = np.sum(np.asarray(route.slot_token) < 16, axis=(1, 2))                 # (G,)
  np.testing.assert_allclose(metrics['assignment_unfilled'], 1 - placed.mean() / 16, rtol=1e-6)
  if max_iters == 50_000:
    assert float(metrics['assignment_unfilled']) == 0.0
  else:   # One bid a round places at most one slot a bid: max_iters of 16.
    assert placed.max() <= max_iters
    np.testing.assert_allclose(metrics['assignment_unfilled'], 1 - placed.mean() / 16)
    assert float(metrics['assignment_unfilled']) > 0.5


def test_a_router_state_reports_its_range():
  config = router_config.RouterConfig('lossfree_tc', 1)
  bias = jnp.array([0.02, -0.01, 0.005, 0.0])
  _, metrics, _ = _router_outputs(config, 4, jax.random.normal(jax.random.PRNGKey(0),
                                                               (2, 8, 8)), {'bias': bias})
  np.testing.assert_allclose(metrics['state_bias_range'], 0.03, rtol=1e-6)
