"""Tests of Soft MoE routing tensors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import soft


def inputs(seed=0, tokens=6, dim=5, experts=3, slots=2):
  kx, kp = jax.random.split(jax.random.PRNGKey(seed))
  return (jax.random.normal(kx, (tokens, dim)), jax.random.normal(kp, (dim, experts, slots)))


@pytest.mark.parametrize('scale', [None, 1.7])
def test_normalisations(scale):
  x, phi = inputs()
  dispatch, combine = soft.soft_routing(x, phi, scale)
  assert dispatch.shape == combine.shape == (6, 3, 2)
  np.testing.assert_allclose(dispatch.sum(axis=0), 1.0, rtol=1e-5)      # Over tokens, per slot.
  np.testing.assert_allclose(combine.sum(axis=(1, 2)), 1.0, rtol=1e-5)  # Over slots, per token.
  assert (dispatch > 0).all() and (combine > 0).all()


def test_matches_the_paper_formula():
  # Z = X Phi; D = softmax over t; C = softmax over (e, c).
  x, phi = inputs(1)
  z = np.einsum('td,dec->tec', np.asarray(x), np.asarray(phi))
  expected_d = np.exp(z) / np.exp(z).sum(axis=0, keepdims=True)
  expected_c = np.exp(z) / np.exp(z).sum(axis=(1, 2), keepdims=True)
  dispatch, combine = soft.soft_routing(x, phi)
  np.testing.assert_allclose(dispatch, expected_d, rtol=1e-5)
  np.testing.assert_allclose(combine, expected_c, rtol=1e-5)


def test_zero_slots_route_uniformly():
  # Phi = 0 gives Z = 0: every slot averages all T=6 tokens, every token averages E*C=6 slots.
  x, phi = inputs(2)
  dispatch, combine = soft.soft_routing(x, jnp.zeros_like(phi))
  np.testing.assert_allclose(dispatch, 1 / 6, rtol=1e-6)
  np.testing.assert_allclose(combine, 1 / 6, rtol=1e-6)


def test_normalised_routing_ignores_input_and_slot_norms():
  x, phi = inputs(3)
  a = soft.soft_routing(x, phi, scale=2.0)
  b = soft.soft_routing(5.0 * x, 3.0 * phi, scale=2.0)
  # Up to the epsilon: v * rsqrt(|v|^2 + eps) is v/|v| times (1 - eps / (2 |v|^2)), so each
  # normalised vector moves by at most eps / (2 min |v|^2) relatively; a logit (|z| <= scale)
  # by scale * 2 * that, and a softmax output relatively by twice the largest logit change;
  # plus float32 rounding of the exps and sums (a few ulps).
  min_sq = min(float(jnp.min(jnp.sum(x * x, axis=1))), float(jnp.min(jnp.sum(phi * phi, axis=0))))
  rtol = 2 * (2.0 * 2 * 1e-6 / (2 * min_sq)) + 8 * np.finfo(np.float32).eps
  np.testing.assert_allclose(a[0], b[0], rtol=rtol)
  np.testing.assert_allclose(a[1], b[1], rtol=rtol)


def test_normalisation_epsilon_is_the_references():
  # The reference's normalize: x * rsqrt(sum x^2 + 1e-6). For x = (3e-3, 4e-3), |x|^2 = 2.5e-5,
  # so the result is x / sqrt(2.6e-5) = (0.58835, 0.78446), not the unit vector (0.6, 0.8).
  out = soft.l2_normalize(jnp.array([3e-3, 4e-3]), axis=0)
  np.testing.assert_allclose(out, np.array([3e-3, 4e-3]) / np.sqrt(2.6e-5), rtol=1e-6)


def test_shape_errors():
  x, phi = inputs()
  with pytest.raises(ValueError, match=r'x \(T, D\) and phi \(D, E, C\)'):
    soft.soft_routing(x[:, :4], phi)
