"""BASE layers' balanced assignment (Lewis et al. 2021, arXiv 2103.16716): the `base` router.

Axis letters: t = token (T per routing group), e = expert (E), c = buffer slot (C per expert),
r = bidding row (the E experts, and a drop row when T > E C).

In training, BASE routes by the assignment of tokens to expert slots that maximises the total
affinity sum a[t, e] (the paper's linear assignment objective; a = x W, the raw dot products with
the expert embeddings), each token in at most one slot and each expert with at most C tokens. When E
C = T the assignment is exactly balanced; when E C < T every slot is filled and T - E C tokens are
dropped; when E C > T every token is placed and E C - T slots stay empty. In evaluation BASE routes
each token greedily to its top expert: the house's token choice at k = 1
(allocation.token_choice_slots); unlike fairseq's greedy assignment, which has no buffers, a full
buffer there drops the token.

The assignment is solved by an auction (Bertsekas 1988), as fairseq's
fairseq/clib/libbase/balanced_assignment.cpp does, but with the slots bidding, so that it provably
stops when E C < T (fairseq's tokens bid, and its loop exits only once every token holds a slot,
which is then never), and with epsilon scaling. The problem is made square first: a drop row of
T - E C slots when E C < T, and E C - T placeholder tokens when E C > T.
"""
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from vmoe.routing import declarations

# The auction's epsilon, relative to the spread max(a) - min(a) of the group's affinities, and
# its bound on the bids: BASE's options' defaults (declarations.py says why these values).
EPSILON = declarations.AUCTION_EPSILON
# Epsilon scaling: the auction first runs at START_EPSILON (relative, as EPSILON), then at each
# tenth of it, down to EPSILON (the slots bid, on the problem made square). Near-ties between
# tokens otherwise cost long wars of epsilon-sized bids. The schedule is chosen for few bids at
# the B/32 group (T = 400, E = 32, C = 12) and the tiny config's (T = 272, E = 8, C = 34) alike
# (bench/auction.py counts the bids).
START_EPSILON = 3e-2
EPSILON_FACTOR = 10
MAX_ITERS = declarations.AUCTION_MAX_ITERS


class AuctionReport(NamedTuple):
  """How the auction of one group went: iterations (int32), the bids it placed over all its
  phases (one a round), and unfilled (int32), the placements min(T, E C) it should have made but
  had not when max_iters stopped it (0 when it converged)."""
  iterations: jax.Array
  unfilled: jax.Array


def epsilon_schedule(epsilon: float, num_slots: int, num_bidders: int) -> list[float]:
  """The phases' epsilons, relative to the spread: START_EPSILON divided by EPSILON_FACTOR until
  the last, epsilon E C / n (n = max(T, E C) bidding slots, so that the n slots' slack sums to
  E C epsilon)."""
  last = epsilon * num_slots / num_bidders
  if last >= START_EPSILON:
    return [last]
  phases = math.ceil(math.log(START_EPSILON / last) / math.log(EPSILON_FACTOR))
  return [START_EPSILON / EPSILON_FACTOR ** i for i in range(phases)] + [last]


def _bid(worth: jax.Array, eps: jax.Array):
  """One bidder's bid on its values worth (n,) (-inf: not for sale to it) -> (object, price
  increase): its best object (the first on ties) and best - second best + eps (+ eps alone when
  no other object exists), so that the object ends worth the second best minus eps."""
  objects = jnp.arange(worth.shape[0], dtype=jnp.int32)
  best = jnp.max(worth)
  chosen = jnp.min(jnp.where(worth == best, objects, worth.shape[0]))
  second = jnp.max(jnp.where(objects == chosen, -jnp.inf, worth))
  return chosen, best - jnp.where(second > -jnp.inf, second, best) + eps


def balanced_assignment_slots(affinity: jax.Array, capacity: int, epsilon: float = EPSILON,
                              max_iters: int = MAX_ITERS):
  """BASE's balanced assignment of one group by auction: affinity (T, E) -> (slot_token, report).

  slot_token (E, C) int32 holds each expert's tokens in increasing order, T in an empty slot; the
  report is an AuctionReport. No gradient flows through the assignment (a discrete choice). The
  slots bid, one bid a round (a few passes over one row: every bidder bidding together needs a
  sort per row and per round, dearer on CPU than the extra rounds), with epsilon scaling
  (`_slots_bid`, on the problem made square: placeholder tokens worth min(a) to every expert
  when E C > T, whose slots stay empty). The tokens bidding there, fairseq's way, never scales
  epsilon and fights long wars over the C equal copies of a popular expert: on affinities as
  skewed as a trained router's, it runs out of bids with many tokens unplaced.

  Args:
    affinity: (T, E) token--expert affinities.
    capacity: C, slots per expert.
    epsilon: the bid increment, relative to the spread max(a) - min(a) of this group; the total
      is within E C epsilon (max(a) - min(a)) of the optimum.
    max_iters: the most bids.
  """
  if affinity.ndim != 2:
    raise ValueError(f'affinity must be (T, E), got shape {affinity.shape}; vmap over groups.')
  if capacity < 1:
    raise ValueError(f'capacity must be >= 1, got {capacity}.')
  if not epsilon > 0 or max_iters < 1:
    raise ValueError(f'the auction needs epsilon > 0 and max_iters >= 1, got {epsilon} and '
                     f'{max_iters}.')
  affinity = jax.lax.stop_gradient(affinity).astype(jnp.float32)
  spread = jnp.maximum(jnp.max(affinity) - jnp.min(affinity), 1e-6)
  return _slots_bid(affinity, capacity, epsilon, spread, max_iters)


def _square(affinity, capacity: int):
  """The auction's problem made square (see _slots_bid): values (R, n) of the R rows (the E
  experts, and a drop row when E C < T) for the n = max(T, E C) tokens (placeholders when
  E C > T), and each row's slots (R,)."""
  num_tokens, num_experts = affinity.shape
  num_slots = num_experts * capacity
  value = affinity.T                                                        # (E, T)
  row_capacity = [capacity] * num_experts
  if num_tokens > num_slots:                                                # The drop row.
    value = jnp.concatenate([value, jnp.full((1, num_tokens), jnp.min(affinity))], axis=0)
    row_capacity.append(num_tokens - num_slots)
  elif num_slots > num_tokens:                                              # Placeholders.
    value = jnp.concatenate(
        [value, jnp.full((num_experts, num_slots - num_tokens), jnp.min(affinity))], axis=1)
  return value, jnp.array(row_capacity, jnp.int32)


def _slots_held(owner, bids, num_tokens: int, num_experts: int, capacity: int):
  """slot_token (E, C) of the real tokens each expert holds (in token order, T for an empty
  slot), and the AuctionReport."""
  tokens = jnp.arange(num_tokens, dtype=jnp.int32)
  rows = jnp.arange(num_experts, dtype=jnp.int32)
  held = owner[None, :num_tokens] == rows[:, None]                          # (E, T): real tokens.
  negated, _ = jax.lax.top_k(jnp.where(held, -tokens, -num_tokens), capacity)   # (E, C)
  placements = min(num_tokens, num_experts * capacity)
  return -negated, AuctionReport(bids, placements - jnp.sum(held, dtype=jnp.int32))


# Why it is right: call row r's state sound if at most u_r (its free slots) tokens it does not
# hold are worth more than its lowest held token plus epsilon. A bid keeps it: the won token is
# worth w_r - epsilon (w_r the second best), so no unheld token is worth more than it plus
# epsilon, and either the lowest held token is below that (the exceptions lose the won token, u_r
# loses one) or it is the won token (none are left). Losing a token frees a slot and adds one
# exception; other rows' bids only lower the values of tokens r does not hold. A phase starts
# sound: a kept token is worth at least r's best unheld value minus the new epsilon, a freed one
# less. When every slot is filled (u_r = 0) no unheld token is worth more than r's lowest held
# value m_r plus epsilon; raising each held token's price to a[j, r] - m_r gives prices under
# which every slot's token is within epsilon of its best: epsilon-complementary slackness, so the
# total is within n epsilon_last (max(a) - min(a)) = E C epsilon (max(a) - min(a)) of the
# optimum. Each phase stops: a bought token stays bought, so some token q stays unheld while a
# slot is free, at its price at the phase's start; a bid never prices a token above
# p_q + max(a) - min(a) + epsilon (its second best is at least q's value), and each raises a
# price by >= epsilon. max_iters caps the bids over all phases (a phase cut short frees nothing
# after it).
def _slots_bid(affinity, capacity: int, epsilon: float, spread, max_iters: int):
  """The slots bid for the tokens, with epsilon scaling, on the problem made square: n slots for
  n = max(T, E C) tokens.

  When E C < T, a drop row of T - E C slots values every token at one constant (its tokens are
  the dropped ones; every full assignment drops T - E C tokens, so the optimum over real slots is
  unchanged). When E C > T, E C - T placeholder tokens are worth one constant to every expert
  (every full assignment places them all, so the optimum over the real tokens is unchanged; their
  slots come out empty). Rows r (the E experts and the drop row) own slots; prices p start at 0. In
  each round the row with the most free slots (the first on ties) bids (`_bid`) for its best token
  among those it does not hold, valued v_j = a[j, r] - p_j; j's previous holder loses it. The phases
  run this at decreasing epsilons (`epsilon_schedule`); between phases each row keeps the tokens
  worth at least its best unheld value minus the next epsilon and frees the rest, and the prices
  stay (valid on a square problem).
  The proof that it is right is the comment above.
  """
  num_tokens, num_experts = affinity.shape
  num_slots = num_experts * capacity
  num_bidden = max(num_tokens, num_slots)                                   # n.
  value, row_capacity = _square(affinity, capacity)                         # (R, n) (R,)
  num_rows = row_capacity.shape[0]
  rows = jnp.arange(num_rows, dtype=jnp.int32)

  def bid(state, eps):
    price, owner, count, bids = state                                       # (n,) (n,) (R,) ()
    free = row_capacity - count
    row = jnp.min(jnp.where(free == jnp.max(free), rows, num_rows))
    token, increase = _bid(jnp.where(owner == row, -jnp.inf, value[row] - price), eps)
    count = count - (rows == owner[token]) + (rows == row)
    return price.at[token].add(increase), owner.at[token].set(row), count, bids + 1

  def bidding(state):
    return (jnp.sum(state[2]) < num_bidden) & (state[3] < max_iters)

  def free_unsound(state, eps):
    price, owner, _, bids = state
    worth = value - price[None, :]                                          # (R, n)
    held = owner[None, :] == rows[:, None]
    best_unheld = jnp.max(jnp.where(held, -jnp.inf, worth), axis=1)         # (R,)
    keep = jnp.any(held & (worth >= best_unheld[:, None] - eps), axis=0)    # (n,)
    owner = jnp.where(keep | (bids >= max_iters), owner, num_rows)
    count = jnp.sum(owner[None, :] == rows[:, None], axis=1, dtype=jnp.int32)
    return price, owner, count, bids

  state = (jnp.zeros((num_bidden,), jnp.float32), jnp.full((num_bidden,), num_rows, jnp.int32),
           jnp.zeros((num_rows,), jnp.int32), jnp.zeros((), jnp.int32))
  for phase, relative in enumerate(epsilon_schedule(epsilon, num_slots, num_bidden)):
    eps = relative * spread
    if phase:
      state = free_unsound(state, eps)
    state = jax.lax.while_loop(bidding, lambda s, eps=eps: bid(s, eps), state)
  _, owner, _, bids = state
  return _slots_held(owner, bids, num_tokens, num_experts, capacity)


def combine_scores(logits: jax.Array) -> jax.Array:
  """BASE's combine weights sigmoid(a), (T, E) -> (T, E), gathered at the assigned slots.

  fairseq's BaseLayer returns alpha * f(x) + (1 - alpha) * x with alpha = sigmoid(x . w_e) and
  f(x) = x + FFN(LN(x)) its residual sublayer, which is x + alpha FFN(LN(x)): the block's own
  residual plus the expert output weighted by alpha. So the MoE layer's combine weight is alpha and
  no mixing term is added. A dropped token gets the residual alone, as in a token-choice block.
  """
  return jax.nn.sigmoid(logits.astype(jnp.float32))
