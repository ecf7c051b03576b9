"""Allocation: token--expert scores (T, E) and a buffer capacity C -> routing tensors.

Axis letters: t = token (T per routing group), e = expert (E), c = buffer slot (C per expert),
k = choice rank (k choices per token).

The paper's two allocations:
  token_choice   Algorithm 1: all first choices in token order, then all second choices, ...;
                 a request to a full buffer is dropped.
  expert_choice  Algorithm 2: every expert takes its top-C tokens.

Both are computed in index form, `slot_token` (E, C) int32: the token held by each buffer slot, or
T for an empty slot. This is what the MoE layer dispatches and combines with (gather/scatter, no
(T, E, C) tensors). `to_dense` turns it into the paper's dense dispatch and combine tensors, which
the public `token_choice` and `expert_choice` return and the tests compare against. The capacity
C itself is capacity.py's.
"""
import jax
import jax.numpy as jnp


def _check_scores(scores: jax.Array, capacity: int) -> tuple[int, int]:
  if scores.ndim != 2:
    raise ValueError(f'scores must be (T, E), got shape {scores.shape}; vmap over groups.')
  if capacity < 1:
    raise ValueError(f'capacity must be >= 1, got {capacity}.')
  return scores.shape


def token_choice_slots(scores: jax.Array, capacity: int, k: int,
                       num_choices: jax.Array | None = None) -> jax.Array:
  """Algorithm 1 (Token Choice) in index form: (T, E) scores -> slot_token (E, C).

  Requests are processed choice-major (every token's first choice in token order, then every
  token's second choice, ...). A request's position in its expert's queue is the number of earlier
  requests to that expert; it is kept iff that position is < C. Counting dropped requests too gives
  the same positions as Algorithm 1's count of dispatched tokens, because a buffer never empties.
  num_choices (T,) int, when given, lets token t request only its first num_choices[t] <= k
  choices (top-p routing); the requests it does not make take no place in any queue.
  """
  num_tokens, num_experts = _check_scores(scores, capacity)
  if not 1 <= k <= num_experts:
    raise ValueError(f'token choice needs 1 <= k <= E={num_experts} experts per token, got k={k}.')
  _, choice = jax.lax.top_k(scores, k)                         # (T, k)
  expert = choice.T.reshape(-1)                                # (k*T,) choice-major order.
  requests = jax.nn.one_hot(expert, num_experts, dtype=jnp.int32)  # (k*T, E)
  made = jnp.ones((k * num_tokens,), bool)
  if num_choices is not None:
    made = (jnp.arange(k)[:, None] < num_choices[None, :]).reshape(-1)   # (k*T,)
    requests = requests * made[:, None]
  position = jnp.sum(jnp.cumsum(requests, axis=0) * requests, axis=1) - 1  # (k*T,)
  token = jnp.tile(jnp.arange(num_tokens, dtype=jnp.int32), k)
  discard = num_experts * capacity                             # One spare slot for dropped
                                                               # requests.
  slot = jnp.where(made & (position < capacity), expert * capacity + position, discard)
  slot_token = jnp.full((discard + 1,), num_tokens, jnp.int32).at[slot].set(token)
  return slot_token[:discard].reshape(num_experts, capacity)


def check_expert_choice_capacity(capacity: int, num_tokens: int) -> None:
  """Each expert chooses its top C of a group's T tokens: C <= T, or fails saying what to change
  (vmoe/train/experiment.py `parse` checks a config's before anything compiles)."""
  if capacity > num_tokens:
    raise ValueError(
        f'expert choice needs capacity <= T={num_tokens} tokens per group, got C={capacity}; '
        'lower the capacity factor (moe.router.capacity_factor) or route larger groups '
        '(moe.group_size).')


def expert_choice_slots(scores: jax.Array, capacity: int) -> jax.Array:
  """Algorithm 2 (Expert Choice) in index form: each expert's top-C tokens, (T, E) -> (E, C).

  Ties go to the lower token index (lax.top_k is stable), matching a scan in token order.
  """
  num_tokens, _ = _check_scores(scores, capacity)
  check_expert_choice_capacity(capacity, num_tokens)
  _, token = jax.lax.top_k(scores.T, capacity)                  # (E, C)
  return token.astype(jnp.int32)


def slot_weights(slot_token: jax.Array, combine_scores: jax.Array) -> jax.Array:
  """Combine weight of every slot: combine_scores[token, expert], 0 for empty slots. -> (E, C)."""
  num_tokens, num_experts = combine_scores.shape
  expert = jnp.arange(num_experts)[:, None]
  weight = combine_scores[jnp.minimum(slot_token, num_tokens - 1), expert]
  return jnp.where(slot_token < num_tokens, weight, 0.0)


def to_dense(slot_token: jax.Array, slot_weight: jax.Array, num_tokens: int):
  """Index form -> the paper's dense (T, E, C) dispatch (binary) and combine tensors."""
  dispatch = jnp.moveaxis(jax.nn.one_hot(slot_token, num_tokens, dtype=jnp.float32), -1, 0)
  return dispatch, dispatch * slot_weight[None].astype(jnp.float32)


def _combine_source(scores, combine_scores):
  if combine_scores is None:
    return scores
  if combine_scores.shape != scores.shape:
    raise ValueError(f'combine_scores must have the shape of scores {scores.shape}, '
                     f'got {combine_scores.shape}.')
  return combine_scores


def token_choice(scores: jax.Array, capacity: int, k: int, combine_scores=None):
  """Token Choice allocation (Algorithm 1) as dense (dispatch, combine), each (T, E, C).

  Dispatch follows `scores`; combine[t, e, c] = dispatch[t, e, c] * combine_scores[t, e], where
  combine_scores defaults to `scores` (Algorithm 1's w).
  """
  slot_token = token_choice_slots(scores, capacity, k)
  weights = _combine_source(scores, combine_scores)
  return to_dense(slot_token, slot_weights(slot_token, weights), scores.shape[0])


def expert_choice(scores: jax.Array, capacity: int, combine_scores=None):
  """Expert Choice allocation (Algorithm 2) as dense (dispatch, combine), each (T, E, C)."""
  slot_token = expert_choice_slots(scores, capacity)
  weights = _combine_source(scores, combine_scores)
  return to_dense(slot_token, slot_weights(slot_token, weights), scores.shape[0])
