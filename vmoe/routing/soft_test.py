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
  b = soft.soft_routing(5.0 * x, 0.1 * phi, scale=2.0)
  np.testing.assert_allclose(a[0], b[0], rtol=1e-5)
  np.testing.assert_allclose(a[1], b[1], rtol=1e-5)


def test_shape_errors():
  x, phi = inputs()
  with pytest.raises(ValueError, match=r'x \(T, D\) and phi \(D, E, C\)'):
    soft.soft_routing(x[:, :4], phi)
