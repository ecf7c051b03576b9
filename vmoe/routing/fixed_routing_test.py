"""Tests of the fixed (hash-like) routing's combine weights."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import allocation
from vmoe.routing import fixed_routing


@pytest.mark.parametrize('k,weight', [(1, 1.0), (2, 0.5)])
def test_uniform_weights_at_every_dispatched_slot(k, weight):
  logits = jax.random.normal(jax.random.PRNGKey(0), (12, 4))
  slot_token = allocation.token_choice_slots(logits, 6, k)
  slot_weight = allocation.slot_weights(slot_token, fixed_routing.uniform_combine_scores(logits, k))
  filled = np.asarray(slot_token) < 12
  np.testing.assert_array_equal(np.asarray(slot_weight)[filled], weight)
  np.testing.assert_array_equal(np.asarray(slot_weight)[~filled], 0.0)


def test_no_gradient_reaches_the_logits():
  grad = jax.grad(lambda l: jnp.sum(fixed_routing.uniform_combine_scores(l, 2)))(jnp.ones((3, 4)))
  np.testing.assert_array_equal(grad, 0.0)
  with pytest.raises(ValueError, match=r'1 <= k <= E=4'):
    fixed_routing.uniform_combine_scores(jnp.ones((3, 4)), 5)
