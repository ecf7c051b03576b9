"""BASE layers' balanced assignment (Lewis et al. 2021, arXiv 2103.16716): the `base` router.

Axis letters: t = token (T per routing group, padded to P), e = expert (E), c = buffer slot (C per
expert), r = bid rank.

In training, BASE routes by the assignment of tokens to expert slots that maximises the total
affinity sum a[t, e] (the paper's linear assignment objective; a = x W, the raw dot products
with the expert embeddings), each token in at most one slot and each expert with at most C tokens. When E C = T the
assignment is exactly balanced; when E C < T every slot is filled and T - E C tokens are dropped;
when E C > T every token is placed and E C - T slots stay empty. In evaluation BASE routes each
token greedily to its top expert: the house's token choice at k = 1
(allocation.token_choice_slots); unlike fairseq's greedy assignment, which has no buffers, a full
buffer there drops the token.

The assignment is solved by an auction (Bertsekas 1988), as fairseq's
fairseq/clib/libbase/balanced_assignment.cpp does, but with bidding arranged so that it provably
stops when E C < T (fairseq's loop exits only once every token holds a slot, which is then never).
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

# The auction's epsilon, relative to the spread max(a) - min(a) of the group's affinities: the
# assignment's total is within E C epsilon (max(a) - min(a)) of the optimum, a bound that random
# problems beat by orders of magnitude (balanced_assignment_test.py checks 1e-4 of the optimum).
# fairseq's 1/50 needs fewer rounds but stops a few 1e-3 of the optimum short; 1e-4 needs about 1.5
# times the rounds of 1e-3 for no gain a router could feel.
EPSILON = 1e-3
# A bound on the rounds, so that a step's time is bounded; a group that needs more keeps the slots
# it filled, leaves the rest empty and says so in AuctionReport.unfilled.
MAX_ITERS = 2000


class AuctionReport(NamedTuple):
  """How the auction of one group went: iterations (int32), the rounds of bidding it ran, and
  unfilled (int32), the slots it should have filled but had not when MAX_ITERS stopped it (0 when
  it converged)."""
  iterations: jax.Array
  unfilled: jax.Array


def balanced_assignment_slots(affinity: jax.Array, capacity: int, epsilon: float = EPSILON,
                              max_iters: int = MAX_ITERS):
  """BASE's balanced assignment of one group by auction: affinity (T, E) -> (slot_token, report).

  slot_token (E, C) int32 holds each expert's tokens in increasing order, T in an empty slot; the
  report is an AuctionReport. No gradient flows through the assignment (a discrete choice).

  The slots bid for the tokens, so bidders are never more than the objects: the tokens are padded
  with E C - T constant dummies when T < E C (any constant adds the same to every full assignment,
  so the optimum over real tokens is unchanged; a slot holding a dummy is empty) and with one more
  column of -inf, a sentinel that is never bought. Prices p start at 0. In each round every expert
  e with u_e free slots finds the values v_j = a[j, e] - p_j of the tokens it does not hold, bids
  for its u_e best and prices each at the value where it would be worth w_e - epsilon, w_e the
  (u_e + 1)-th best value (or the u_e-th when no other exists): the bid for token j is
  p_j + v_j - w_e + epsilon >= p_j + epsilon. Each token goes to its highest bidder at that price,
  and its previous holder loses it. The experts' slots are interchangeable, so one expert bids for
  several tokens at once, as fairseq's experts do.

  Why it is right: call e's state sound if every token it holds is worth at least the best token
  it does not hold minus epsilon, except for at most u_e tokens it does not hold. The u_e best
  tokens are exactly the exceptions it bids for; a token it wins is worth w_e - epsilon, at most
  epsilon below any token it did not bid for; a token it loses to a higher bid becomes one more
  exception and frees one more slot; other experts' bids only lower the values of tokens it does
  not hold. So soundness holds every round, and when every slot is filled (u_e = 0) each expert
  holds tokens within epsilon of its best: raising each held token's price to a[j, e] minus e's
  lowest held value then gives prices under which every slot is within epsilon of its best token,
  and tokens never bought are at price 0. That is epsilon-complementary slackness for the
  asymmetric assignment problem, so the total is within E C epsilon of the optimum. It stops:
  each round with a free slot places at least one bid, which raises a price by >= epsilon, and no
  price exceeds max(a) - min(a) + epsilon (a token at price 0 is always left while a slot is free,
  and a bid never pays more than that token's value is below). Its bound, P (spread / epsilon + 1)
  rounds, is far above what random problems need; max_iters caps it.

  Args:
    affinity: (T, E) token--expert affinities.
    capacity: C, slots per expert.
    epsilon: the bid increment, relative to the spread max(a) - min(a) of this group.
    max_iters: the most rounds of bidding.
  """
  if affinity.ndim != 2:
    raise ValueError(f'affinity must be (T, E), got shape {affinity.shape}; vmap over groups.')
  if capacity < 1:
    raise ValueError(f'capacity must be >= 1, got {capacity}.')
  if not epsilon > 0 or max_iters < 1:
    raise ValueError(f'the auction needs epsilon > 0 and max_iters >= 1, got {epsilon} and '
                     f'{max_iters}.')
  num_tokens, num_experts = affinity.shape
  num_slots = num_experts * capacity
  num_padded = max(num_tokens, num_slots) + 1
  affinity = jax.lax.stop_gradient(affinity).astype(jnp.float32).T          # (E, T)
  lowest = jnp.min(affinity)
  eps = epsilon * jnp.maximum(jnp.max(affinity) - lowest, 1e-6)
  value = jnp.concatenate([                                                 # (E, P)
      affinity,
      jnp.full((num_experts, num_padded - 1 - num_tokens), lowest),          # Dummies.
      jnp.full((num_experts, 1), -jnp.inf)], axis=1)                        # Sentinel.
  experts = jnp.arange(num_experts, dtype=jnp.int32)
  ranks = jnp.arange(capacity + 1)

  def holdings(owner):
    return owner[None, :] == experts[:, None]                               # (E, P)

  def bid_round(state):
    price, owner, rounds = state
    held = holdings(owner)
    free = capacity - jnp.sum(held, axis=1)                                 # (E,)
    worth = jnp.where(held, -jnp.inf, value - price[None, :])               # (E, P)
    top_worth, top_token = jax.lax.top_k(worth, capacity + 1)              # (E, C+1)
    after = jnp.take_along_axis(top_worth, free[:, None], axis=1)          # (E, 1)
    last = jnp.take_along_axis(top_worth, jnp.maximum(free - 1, 0)[:, None], axis=1)
    threshold = jnp.where(jnp.isfinite(after), after, last)                # w_e, (E, 1)
    bid = jnp.take_along_axis(value, top_token, axis=1) - threshold + eps   # (E, C+1)
    bid = jnp.where(ranks[None, :] < free[:, None], bid, -jnp.inf)
    bids = jnp.full((num_experts, num_padded), -jnp.inf).at[
        experts[:, None], top_token].set(bid)                              # (E, P)
    best = jnp.max(bids, axis=0)                                           # (P,)
    sold = best > -jnp.inf
    price = jnp.where(sold, best, price)
    owner = jnp.where(sold, jnp.argmax(bids, axis=0).astype(jnp.int32), owner)
    return price, owner, rounds + 1

  def unfilled(owner):
    return num_slots - jnp.sum(owner < num_experts, dtype=jnp.int32)

  def bidding(state):
    _, owner, rounds = state
    return (unfilled(owner) > 0) & (rounds < max_iters)

  start = (jnp.zeros((num_padded,), jnp.float32),
           jnp.full((num_padded,), num_experts, jnp.int32), jnp.zeros((), jnp.int32))
  _, owner, rounds = jax.lax.while_loop(bidding, bid_round, start)
  token = jnp.arange(num_padded, dtype=jnp.int32)
  real = holdings(owner) & (token < num_tokens)[None, :]                   # (E, P)
  negated, _ = jax.lax.top_k(jnp.where(real, -token, -num_tokens), capacity)   # (E, C)
  return -negated, AuctionReport(rounds, unfilled(owner))


def combine_scores(logits: jax.Array) -> jax.Array:
  """BASE's combine weights sigmoid(a), (T, E) -> (T, E), gathered at the assigned slots.

  fairseq's BaseLayer returns alpha * f(x) + (1 - alpha) * x with alpha = sigmoid(x . w_e) and
  f(x) = x + FFN(LN(x)) its residual sublayer, which is x + alpha FFN(LN(x)): the block's own
  residual plus the expert output weighted by alpha. So the MoE layer's combine weight is alpha and
  no mixing term is added. A dropped token gets the residual alone, as in a token-choice block.
  """
  return jax.nn.sigmoid(logits.astype(jnp.float32))
