"""Routing fixed at initialisation, after Hash layers (Roller et al. 2021, arXiv 2106.04426):
the `random_tc` router.

Axis letters: t = token (T per routing group), e = expert (E).

Hash layers route each token by a fixed function of its content, never learned, and weight the
chosen expert's output by 1: there is no gate. `random_tc` takes for that function token choice
on x W0, with W0 drawn once at initialisation and never trained: like a hash, it depends on the
token's content, not on its position, and similar tokens go to the same experts. It is the floor
that learned routing must beat.

What the Router module does with it: it draws W0 with the router's usual initialiser, keeps it
out of the optimizer and the gradient (a frozen parameter, or a non-gradient collection), routes
with allocation.token_choice_slots(x W0, C, k), and combines with `uniform_combine_scores`.
"""
import jax
import jax.numpy as jnp


def uniform_combine_scores(logits: jax.Array, k: int) -> jax.Array:
  """Combine weights 1/k for every token and expert: (T, E) -> (T, E), constant, no gradient.

  A hash layer has no gate, so at k = 1 the expert's output enters with weight 1, as in Roller et
  al.; at k >= 2 the k experts' outputs are averaged, so the block's output keeps the scale of one
  expert's, as the gated routers' normalised weights do. The weights do not depend on the logits:
  nothing about the routing is learned.
  """
  if not 1 <= k <= logits.shape[-1]:
    raise ValueError(f'fixed routing needs 1 <= k <= E={logits.shape[-1]} experts per token, '
                     f'got k={k}.')
  return jnp.full(logits.shape, 1.0 / k, jnp.float32)
