"""Tests of the importance and load losses (Appendix A)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import losses


def test_cv_squared_hand_worked():
  assert float(losses.cv_squared(jnp.array([1.0, 1.0, 1.0]))) == 0.0
  # [0, 2]: mean 1, population variance 1 -> 1.
  np.testing.assert_allclose(losses.cv_squared(jnp.array([0.0, 2.0])), 1.0, rtol=1e-6)


def test_importance_loss_extremes():
  uniform = jnp.full((10, 4), 0.25)
  assert float(losses.importance_loss(uniform)) == pytest.approx(0.0, abs=1e-7)
  # All mass on expert 0: importance [T, 0, ..., 0], whose CV^2 is E - 1 = 3.
  collapsed = jnp.zeros((10, 4)).at[:, 0].set(1.0)
  np.testing.assert_allclose(losses.importance_loss(collapsed), 3.0, rtol=1e-6)


def test_load_loss_hand_worked():
  # One token, logits [1, 0], no noise realised, std 1, k = 1: threshold 1, so the loads are
  # [Phi(0), Phi(-1)] = [0.5, 0.158655]; mean 0.329328, variance 0.170672^2 = 0.029129,
  # mean^2 0.108457 -> CV^2 = 0.268581.
  logits = jnp.array([[1.0, 0.0]])
  phi = lambda v: 0.5 * (1 + math.erf(v / math.sqrt(2)))
  load = np.array([phi(0.0), phi(-1.0)])
  expected = load.var() / load.mean() ** 2
  np.testing.assert_allclose(losses.load_loss(logits, logits, 1.0, 1), expected, rtol=1e-5)
  np.testing.assert_allclose(expected, 0.268581, rtol=1e-4)


def test_load_loss_needs_noise():
  with pytest.raises(ValueError, match='needs router noise'):
    losses.load_loss(jnp.zeros((2, 2)), jnp.zeros((2, 2)), 0.0, 1)


def test_load_loss_gradient_flows_through_the_noisy_threshold():
  # V-MoE's threshold is the k-th largest noisy logit with no stop_gradient, so the loss depends
  # on the noisy logits too; the autodiff gradient equals central differences (h = 1e-2 on a
  # smooth function: error O(h^2) = 1e-4 of the derivative's scale).
  logits = jnp.array([[1.0, 0.0, -0.5], [0.2, 0.3, 0.1]])
  noisy = logits + jnp.array([[0.1, -0.2, 0.3], [-0.1, 0.2, 0.0]])
  loss = lambda n: losses.load_loss(logits, n, 0.5, 1)
  grad = jax.grad(loss)(noisy)
  assert float(jnp.abs(grad).sum()) > 0
  h = 1e-2
  bump = lambda i, j, d: noisy.at[i, j].add(d)
  numeric = np.array([[(loss(bump(i, j, h)) - loss(bump(i, j, -h))) / (2 * h) for j in range(3)]
                      for i in range(2)])
  np.testing.assert_allclose(grad, numeric, atol=1e-3 * np.abs(numeric).max())
