"""Soft MoE routing (Puigcerver et al. 2023; the paper's subsection "Soft MoE").

Axis letters: t = token (T tokens of ONE image), d = model dim, e = expert, c = slot of an expert.

Every slot (e, c) has a learned vector Phi[:, e, c]. Slot--token affinities Z = X Phi (T, E, C) are
normalised two ways (eq. routing-tensors-soft-moe): the dispatch over tokens (each slot's input is
a convex combination of tokens) and the combine over all slots (each output token is a convex
combination of slot outputs). No token is dropped and nothing is discrete.
"""
import jax
import jax.numpy as jnp


def l2_normalize(x: jax.Array, axis: int, eps: float = 1e-6) -> jax.Array:
  """x / sqrt(||x||^2 + eps) along `axis`, safe at zero; eps as the reference Soft MoE router's
  normalize (vmoe/projects/soft_moe/router.py)."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=axis, keepdims=True) + eps)


def soft_routing(x: jax.Array, phi: jax.Array, scale=None):
  """Soft MoE routing tensors for one image.

  Args:
    x: (T, D) tokens of one image.
    phi: (D, E, C) slot parameters.
    scale: None for the paper's plain Z = X Phi; a scalar to L2-normalise x and Phi along D and
      multiply Z by it, as the Soft MoE paper does for stable training at scale (the MoE layer
      passes a learned scale, initialised to 1).
  Returns:
    dispatch (T, E, C), summing to 1 over t; combine (T, E, C), summing to 1 over (e, c).
  """
  if x.ndim != 2 or phi.ndim != 3 or x.shape[1] != phi.shape[0]:
    raise ValueError(f'soft_routing needs x (T, D) and phi (D, E, C), got {x.shape} and '
                     f'{phi.shape}.')
  x = x.astype(jnp.float32)
  phi = phi.astype(jnp.float32)
  if scale is not None:
    x = l2_normalize(x, axis=1)
    phi = scale * l2_normalize(phi, axis=0)
  logits = jnp.einsum('td,dec->tec', x, phi)
  num_tokens, num_experts, num_slots = logits.shape
  dispatch = jax.nn.softmax(logits, axis=0)
  combine = jax.nn.softmax(logits.reshape(num_tokens, -1), axis=1)
  return dispatch, combine.reshape(num_tokens, num_experts, num_slots)
