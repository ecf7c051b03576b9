"""Tests of top-p (dynamic) routing: choices, slots, losses and metrics."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import allocation
from vmoe.routing import top_p


def test_num_choices_hand_worked():
  probs = jnp.array([
      [0.5, 0.3, 0.2, 0.0],       # 0.5 > 0.4 at once: 1 expert.
      [0.3, 0.25, 0.25, 0.2],     # 0.3, then 0.55 > 0.4: 2 experts.
      [0.25, 0.25, 0.25, 0.25],   # 0.25, 0.5: 2 experts.
      [0.1, 0.15, 0.05, 0.7],     # Sorted 0.7: 1 expert.
  ])
  np.testing.assert_array_equal(top_p.num_choices(probs, 0.4, 3), [1, 2, 2, 1])
  # p = 0.6: 0.5, 0.8 -> 2; 0.3, 0.55, 0.8 -> 3; 0.25, 0.5, 0.75 -> 3; 0.7 -> 1; then k_max = 2.
  np.testing.assert_array_equal(top_p.num_choices(probs, 0.6, 3), [2, 3, 3, 1])
  np.testing.assert_array_equal(top_p.num_choices(probs, 0.6, 2), [2, 2, 2, 1])


def test_uniform_router_is_capped_at_k_max():
  # E = 32 uniform: 13 experts (13 / 32 = 0.406) pass p = 0.4; k_max = 2 caps it.
  uniform = jnp.full((5, 32), 1 / 32)
  np.testing.assert_array_equal(top_p.num_choices(uniform, 0.4, 32), 13)
  np.testing.assert_array_equal(top_p.num_choices(uniform, 0.4, 2), 2)


def test_slots_combine_and_metrics_hand_worked():
  # T = 4, E = 2, k_max = 2 and C = 2 (smaller than round(k_max T / E) = 4, to see drops).
  probs = jnp.array([[0.9, 0.1], [0.35, 0.65], [0.38, 0.62], [0.2, 0.8]])
  choices = jnp.array([1, 2, 1, 2])
  # First choices in token order: t0 -> e0, t1 -> e1, t2 -> e1, t3 -> e1 (full, dropped).
  # Second choices: t1 -> e0 (slot 1); t3 -> e0 (full, dropped). t0 and t2 make none.
  slot_token = allocation.token_choice_slots(probs, 2, 2, choices)
  np.testing.assert_array_equal(slot_token, [[0, 1], [1, 2]])
  # Combine: the probabilities themselves, unnormalised.
  np.testing.assert_allclose(allocation.slot_weights(slot_token, probs),
                             [[0.9, 0.35], [0.65, 0.62]])
  # 6 requests from 4 tokens (1.5 each); 4 placed, so 2 / 6 dropped.
  metrics = top_p.routing_metrics(choices, slot_token, 4)
  np.testing.assert_allclose(metrics['experts_per_token'], 1.5)
  np.testing.assert_allclose(metrics['dropped_share'], 1 / 3, rtol=1e-6)


def test_dynamic_loss_is_the_mean_entropy():
  # Uniform over 4: ln 4 = 1.386294; one-hot (up to e^-200): 0; their mean: 0.693147.
  logits = jnp.array([[0.0] * 4, [200.0, 0.0, 0.0, 0.0]])
  np.testing.assert_allclose(top_p.dynamic_loss(logits), math.log(4) / 2, rtol=1e-6)
  # Its gradient is finite where a probability underflows to 0.
  assert np.isfinite(jax.grad(top_p.dynamic_loss)(logits)).all()
  # Two experts, logits [ln 3, 0]: P = [3/4, 1/4], H = ln 4 - (3/4) ln 3 = 0.562335;
  # dH/dl0 = -P0 P1 (log P0 - log P1) = -(3/16) ln 3 = -0.205991.
  logits = jnp.array([[math.log(3.0), 0.0]])
  np.testing.assert_allclose(top_p.dynamic_loss(logits), 0.562335, rtol=1e-5)
  np.testing.assert_allclose(jax.grad(top_p.dynamic_loss)(logits)[0, 0], -0.205991, rtol=1e-5)


def test_balance_loss_hand_worked():
  # Both tokens choose e0 only (0.7 and 0.6 > 0.4): f = [1, 0]; Q = [0.65, 0.35];
  # E sum f Q = 2 * 0.65 = 1.3. Uniform f and Q with 2 experts per token give 2 (the mean count).
  probs = jnp.array([[0.7, 0.3], [0.6, 0.4]])
  chosen = top_p.chosen_experts(probs, top_p.num_choices(probs, 0.4, 2), 2)
  np.testing.assert_array_equal(chosen, [[1, 0], [1, 0]])
  np.testing.assert_allclose(top_p.balance_loss(probs, chosen), 1.3, rtol=1e-6)
  uniform = jnp.full((3, 4), 0.25)
  np.testing.assert_allclose(
      top_p.balance_loss(uniform, top_p.chosen_experts(uniform, jnp.full((3,), 2), 2)), 2.0,
      rtol=1e-6)


def test_vmap_jit_and_errors():
  probs = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(0), (3, 16, 8)), axis=-1)

  def route(p):
    choices = top_p.num_choices(p, top_p.TOP_P, 2)
    return allocation.token_choice_slots(p, 4, 2, choices), choices

  slot_token, choices = jax.jit(jax.vmap(route))(probs)
  assert slot_token.shape == (3, 8, 4) and choices.shape == (3, 16)
  metrics = top_p.routing_metrics(choices, slot_token, 16)
  assert 1.0 <= float(metrics['experts_per_token']) <= 2.0
  assert 0.0 <= float(metrics['dropped_share']) < 1.0
  with pytest.raises(ValueError, match='0 < p <= 1'):
    top_p.num_choices(probs[0], 0.0, 2)
  with pytest.raises(ValueError, match='k_max <= E=8'):
    top_p.num_choices(probs[0], 0.4, 9)
