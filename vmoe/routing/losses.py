"""Auxiliary expert-balancing losses of the paper's Appendix A, for one routing group.

Axis letters: t = token, e = expert. Both losses are the squared coefficient of variation of a
per-expert quantity, so they vanish when every expert gets the same share.
"""
import jax
import jax.numpy as jnp


def cv_squared(values: jax.Array, eps: float = 1e-10) -> jax.Array:
  """Squared empirical coefficient of variation: Var(v) / (mean(v)^2 + eps), over the last axis."""
  mean = jnp.mean(values, axis=-1)
  return jnp.var(values, axis=-1) / (mean**2 + eps)


def importance_loss(gates: jax.Array) -> jax.Array:
  """CV^2 of each expert's summed gate probabilities: gates (T, E) -> scalar.

  The gates are the clean routing probabilities softmax(X W) (Appendix A; V-MoE computes the
  importance before it adds the noise), not the noisy ones token choice allocates with.
  """
  return cv_squared(jnp.sum(gates, axis=0))


def load_loss(logits: jax.Array, noisy_logits: jax.Array, noise_std: float, k: int) -> jax.Array:
  """CV^2 of each expert's expected token count under the routing noise: (T, E) -> scalar.

  load_e(x) = P(logit_e + delta > k-th largest noisy logit) = Phi((logit_e - threshold) / std),
  with delta ~ N(0, std^2) the same noise the router adds (std = noise / E in the V-MoE recipe;
  the paper writes the variance as N(0, 1/E)). Summed over tokens this is each expert's expected
  load. The threshold is the k-th largest noisy logit, and the gradient flows through it as well
  as through logit_e: V-MoE (vmoe/nn/routing.py, _load_auxiliary_loss) picks it from the noisy
  logits without a stop_gradient, and Appendix A's max_k(W x + eps) is a function of W too.
  """
  if noise_std <= 0:
    raise ValueError('the load loss needs router noise (noise_std > 0); set its weight to 0 '
                     'or turn the noise on.')
  threshold = jax.lax.top_k(noisy_logits, k)[0][:, -1:]                         # (T, 1)
  probability = jax.scipy.stats.norm.cdf((logits - threshold) / noise_std)      # (T, E)
  return cv_squared(jnp.sum(probability, axis=0))
