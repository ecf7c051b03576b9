"""Tests of the sigmoid gate and its loss-free balancing bias (sigmoid_tc, lossfree_tc)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from testing import reference_routers
from vmoe.routing import allocation
from vmoe.routing import sigmoid_gate

gate = jax.jit(sigmoid_gate.sigmoid_gate, static_argnums=(1,))


@pytest.mark.parametrize('k', [2, 4])
@pytest.mark.parametrize('with_bias', [False, True])
def test_equals_deepseek_v3_gate(k, with_bias):
  rng = np.random.default_rng(k + 10 * with_bias)
  num_tokens, dim, num_experts = 64, 16, 8
  x = rng.normal(size=(num_tokens, dim))
  weight = rng.normal(size=(num_experts, dim)) / math.sqrt(dim)   # The Gate's (E, D) weight.
  bias = 0.3 * rng.normal(size=num_experts) if with_bias else None
  # testing/reference_routers.py's float64 Gate (one group, route scale 1).
  expected_weights, expected_experts = reference_routers.gate(x @ weight.T, k, bias)
  logits = jnp.asarray(x @ weight.T, jnp.float32)
  choice, combine = gate(logits, k, None if bias is None else jnp.asarray(bias, jnp.float32))
  experts = np.asarray(jax.lax.top_k(choice, k)[1])
  np.testing.assert_array_equal(experts, expected_experts)
  # float32 sigmoid, a sum of k terms and a division: a few roundings of 2^-24 = 6e-8 each.
  np.testing.assert_allclose(np.take_along_axis(np.asarray(combine), experts, axis=1),
                             expected_weights, rtol=1e-6)
  # Through the house's token choice with room for every request (C = T): every token's slots
  # carry exactly the Gate's weights, summing to 1.
  slot_token = allocation.token_choice_slots(choice, num_tokens, k)
  slot_weight = allocation.slot_weights(slot_token, combine)
  per_token = np.zeros((num_tokens, num_experts))
  for e, c in zip(*np.nonzero(np.asarray(slot_token) < num_tokens)):
    per_token[slot_token[e, c], e] = slot_weight[e, c]
  expected = np.zeros_like(per_token)
  np.put_along_axis(expected, expected_experts, expected_weights, axis=1)
  np.testing.assert_allclose(per_token, expected, rtol=1e-6)


def test_hand_worked():
  # logits [0, ln 3, -ln 3] -> s = [1/2, 3/4, 1/4].
  logits = jnp.array([[0.0, math.log(3.0), -math.log(3.0)]])
  choice, combine = sigmoid_gate.sigmoid_gate(logits, 2)
  np.testing.assert_allclose(choice, [[0.5, 0.75, 0.25]], rtol=1e-6)
  # k = 2 chooses e1 and e0: weights 0.75 / 1.25 = 0.6 and 0.5 / 1.25 = 0.4.
  np.testing.assert_allclose(combine[0, :2], [0.4, 0.6], rtol=1e-6)
  # Bias [0, 0, 0.3]: choice scores [0.5, 0.75, 0.55] choose e1 and e2, whose unbiased scores
  # give 0.75 / 1.0 = 0.75 and 0.25 / 1.0 = 0.25.
  choice, combine = sigmoid_gate.sigmoid_gate(logits, 2, jnp.array([0.0, 0.0, 0.3]))
  np.testing.assert_allclose(choice, [[0.5, 0.75, 0.55]], rtol=1e-6)
  np.testing.assert_allclose(combine[0, 1:], [0.75, 0.25], rtol=1e-6)
  # k = 1: the combine is s itself, 0.75 at e1.
  _, combine = sigmoid_gate.sigmoid_gate(logits, 1)
  np.testing.assert_allclose(combine, [[0.5, 0.75, 0.25]], rtol=1e-6)


def test_k1_keeps_the_router_gradient():
  # The slot weight of e1 at k = 1 is sigmoid(l1): d/dl1 = s (1 - s) = 3/4 * 1/4 = 0.1875.
  # Normalised over the one choice it would be 1, with gradient 0.
  logits = jnp.array([[0.0, math.log(3.0), -math.log(3.0)]])

  def weight_of_e1(l):
    choice, combine = sigmoid_gate.sigmoid_gate(l, 1)
    slot_token = allocation.token_choice_slots(jax.lax.stop_gradient(choice), 1, 1)
    return allocation.slot_weights(slot_token, combine)[1, 0]

  np.testing.assert_allclose(jax.grad(weight_of_e1)(logits), [[0.0, 0.1875, 0.0]], rtol=1e-5)


def test_requested_load_counts_choices_before_drops():
  # Top-2 of each row: t0 -> {e0, e1}, t1 -> {e0, e2}, t2 -> {e0, e1}: loads [3, 2, 1], though a
  # buffer of C = 1 would keep only one token per expert.
  scores = jnp.array([[0.9, 0.8, 0.1], [0.7, 0.2, 0.6], [0.5, 0.4, 0.3]])
  np.testing.assert_array_equal(sigmoid_gate.requested_load(scores, 2), [3, 2, 1])
  # Summable over groups: two groups under vmap add up to the load of their concatenation.
  groups = jnp.stack([scores, scores[::-1]])
  per_group = jax.vmap(sigmoid_gate.requested_load, in_axes=(0, None))(groups, 2)
  np.testing.assert_array_equal(per_group.sum(axis=0), [6, 4, 2])


def test_update_bias_follows_algorithm_1():
  # load [4, 2, 0]: mean 2, so sign(mean - load) = [-1, 0, +1]; u = 1e-3.
  bias = jnp.array([0.1, 0.0, -0.2])
  new = sigmoid_gate.update_bias(bias, jnp.array([4, 2, 0]))
  np.testing.assert_allclose(new, [0.099, 0.0, -0.199], rtol=1e-6)
  np.testing.assert_allclose(sigmoid_gate.update_bias(bias, jnp.array([4, 2, 0]), rate=0.5),
                             [-0.4, 0.0, 0.3], rtol=1e-6)


def test_bias_balances_a_skewed_gate():
  # Logits that favour expert 0 for every token: repeated updates raise the idle experts' biases
  # until the requests spread; the load's spread (max - min) shrinks.
  logits = jax.random.normal(jax.random.PRNGKey(0), (256, 4)) + jnp.array([2.0, 0.0, 0.0, 0.0])

  def step(bias, _):
    choice, _ = sigmoid_gate.sigmoid_gate(logits, 1, bias)
    load = sigmoid_gate.requested_load(choice, 1)
    return sigmoid_gate.update_bias(bias, load, rate=1e-2), load

  _, loads = jax.lax.scan(step, jnp.zeros(4), None, length=200)
  assert int(loads[0].max() - loads[0].min()) > 150
  assert int(loads[-1].max() - loads[-1].min()) < 30


def test_vmap_jit_and_errors():
  logits = jax.random.normal(jax.random.PRNGKey(1), (3, 10, 4))
  choice, combine = jax.jit(jax.vmap(lambda l: sigmoid_gate.sigmoid_gate(l, 2)))(logits)
  assert choice.shape == combine.shape == (3, 10, 4) and combine.dtype == jnp.float32
  with pytest.raises(ValueError, match=r'1 <= k <= E=4'):
    sigmoid_gate.sigmoid_gate(logits[0], 5)
  with pytest.raises(ValueError, match=r'logits must be \(T, E\)'):
    sigmoid_gate.sigmoid_gate(logits, 2)
