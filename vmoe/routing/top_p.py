"""Top-p (dynamic) routing (Huang et al. 2024, arXiv 2403.07652): the `topp_tc` router.

Axis letters: t = token (T per routing group), e = expert (E), c = buffer slot (C), k = choice
rank (at most k_max per token).

Each token takes the fewest of its most probable experts whose softmax probabilities add up past
a threshold p: one expert when the router is confident, more when it is not. The MoE output is
the sum of those experts' outputs weighted by their probabilities, unnormalised. Two auxiliary
losses train it: a dynamic loss, the entropy of the router distribution, which rewards confidence
and so fewer experts, and a load-balance loss on the experts' shares of the requests.

Here a token takes at most k_max experts: near initialisation the router is near uniform and p =
0.4 of E = 32 experts would need 13 of them, filling 13 buffers per token. Buffers are sized as
token choice's with k = k_max (C = round(k_max T / E)) and filled in Algorithm 1's order
(allocation.token_choice_slots with the per-token number of choices). The combine is
softmax(logits) itself, gathered at the dispatched slots (allocation.slot_weights).
"""
import jax
import jax.numpy as jnp

from vmoe.routing import declarations

TOP_P = declarations.TOP_P     # The authors' threshold (the router's option's default).


def num_choices(probs: jax.Array, p: float, k_max: int) -> jax.Array:
  """Experts per token: the fewest whose sorted probabilities sum past p, at most k_max. (T,) int32.

  With the probabilities sorted in decreasing order, n = min(k_max, 1 + #{j : P_(1) + ... + P_(j)
  <= p}): the expert whose cumulative sum first exceeds p is included. The authors' code tests
  `cumulative > p` as here; the paper's "reaches p" (>=) differs only where a sum equals p exactly.
  """
  if not 0 < p <= 1:
    raise ValueError(f'top-p routing needs 0 < p <= 1, got p={p}.')
  if not 1 <= k_max <= probs.shape[-1]:
    raise ValueError(f'top-p routing needs 1 <= k_max <= E={probs.shape[-1]}, got {k_max}.')
  top, _ = jax.lax.top_k(probs, k_max)                             # (T, k)
  below = jnp.sum(jnp.cumsum(top, axis=-1) <= p, axis=-1)          # (T,)
  return jnp.minimum(below + 1, k_max).astype(jnp.int32)


def chosen_experts(probs: jax.Array, choices: jax.Array, k_max: int) -> jax.Array:
  """(T, E) float mask of each token's chosen experts: its first choices[t] by probability."""
  _, expert = jax.lax.top_k(probs, k_max)                          # (T, k)
  made = jnp.arange(k_max)[None, :] < choices[:, None]             # (T, k)
  return jnp.sum(jax.nn.one_hot(expert, probs.shape[-1]) * made[..., None], axis=1)


def dynamic_loss(logits: jax.Array) -> jax.Array:
  """Huang et al.'s dynamic loss: the entropy -sum_e P_e log P_e of each token's router
  distribution P = softmax(logits), averaged over tokens. (T, E) logits -> scalar.

  It takes the logits so that log P is log_softmax, finite where P underflows to 0; P log P on the
  probabilities has an infinite derivative there and its gradient turns to nan.
  """
  logits = logits.astype(jnp.float32)
  return jnp.mean(-jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), axis=-1))


def balance_loss(probs: jax.Array, chosen: jax.Array) -> jax.Array:
  """Huang et al.'s load-balance loss E sum_e f_e Q_e: (T, E) probs and chosen mask -> scalar.

  f_e is the fraction of tokens that choose expert e (from `chosen_experts`, before any buffer
  drops; no gradient) and Q_e the mean probability of e. When both are uniform it equals the mean
  number of experts per token; it grows as the choices and the probability gather on few experts.
  """
  share = jnp.mean(jax.lax.stop_gradient(chosen), axis=0)          # f, (E,)
  return probs.shape[-1] * jnp.sum(share * jnp.mean(probs, axis=0))


def routing_metrics(choices: jax.Array, slot_token: jax.Array, num_tokens: int) -> dict:
  """The router's metrics over any groups: the mean number of experts a token asks for, and the
  share of those requests that found a full buffer. choices (..., T), slot_token (..., E, C)."""
  requested = jnp.sum(choices)
  placed = jnp.sum(slot_token < num_tokens)
  return {'experts_per_token': requested / choices.size,
          'dropped_share': 1.0 - placed / requested}
