"""BASE layers' balanced assignment (Lewis et al. 2021, arXiv 2103.16716): the `base` router.

Axis letters: t = token (T per routing group, padded to n), e = expert (E), c = buffer slot (C per
expert), r = bidding row (the E experts, and a drop row when T > E C).

In training, BASE routes by the assignment of tokens to expert slots that maximises the total
affinity sum a[t, e] (the paper's linear assignment objective; a = x W, the raw dot products
with the expert embeddings), each token in at most one slot and each expert with at most C tokens. When E C = T the
assignment is exactly balanced; when E C < T every slot is filled and T - E C tokens are dropped;
when E C > T every token is placed and E C - T slots stay empty. In evaluation BASE routes each
token greedily to its top expert: the house's token choice at k = 1
(allocation.token_choice_slots); unlike fairseq's greedy assignment, which has no buffers, a full
buffer there drops the token.

The assignment is solved by an auction (Bertsekas 1988), as fairseq's
fairseq/clib/libbase/balanced_assignment.cpp does, but on a square problem, so that it provably
stops when E C < T (fairseq's loop exits only once every token holds a slot, which is then never),
and with epsilon scaling.
"""
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

# The auction's epsilon, relative to the spread max(a) - min(a) of the group's affinities: the
# assignment's total is within E C epsilon (max(a) - min(a)) of the optimum, a bound that random
# problems beat by orders of magnitude (balanced_assignment_test.py checks 1e-4 of the optimum).
# fairseq's 1/50 stops a few 1e-3 of the optimum short. Under epsilon scaling the last tenfold
# costs few bids: 1e-4 rather than 1e-3 adds under a tenth at the B/32 group, and keeps small
# groups (30 tokens) within 1e-4 of the optimum, where one epsilon of 1e-3 is already 3e-4.
EPSILON = 1e-4
# Epsilon scaling: the auction first runs at START_EPSILON (relative, as EPSILON), then at each
# tenth of it, down to EPSILON. Near-ties between tokens, as between the constant padding tokens
# when E C > T, otherwise cost long wars of epsilon-sized bids. Of the schedules tried on Gaussian
# affinities, this one stays near the fewest bids at the B/32 group (T = 400, E = 32, C = 12), the
# tiny config's (T = 272, E = 8, C = 34) and one with E C > T alike (bench/auction.py).
START_EPSILON = 3e-2
EPSILON_FACTOR = 10
# A bound on the bids, so that a step's time is bounded; a group that needs more keeps the slots
# it filled, leaves the rest empty and says so in AuctionReport.unfilled.
MAX_ITERS = 20_000


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


def balanced_assignment_slots(affinity: jax.Array, capacity: int, epsilon: float = EPSILON,
                              max_iters: int = MAX_ITERS):
  """BASE's balanced assignment of one group by auction: affinity (T, E) -> (slot_token, report).

  slot_token (E, C) int32 holds each expert's tokens in increasing order, T in an empty slot; the
  report is an AuctionReport. No gradient flows through the assignment (a discrete choice).

  The problem is made square, n slots for n = max(T, E C) tokens, so that every slot and every
  token ends matched: when T > E C a drop row of T - E C slots values every token at one
  constant (its tokens are the dropped ones), and when T < E C, E C - T padding tokens are
  worth that constant to every expert (a slot holding one is empty). Every full assignment
  places the same number of constants, so the optimum over real tokens is unchanged. Rows r (the
  E experts and the drop row) own slots; prices p start at 0.

  In each round the row r with the most free slots (the first on ties) bids for the token j of
  its best value v_j = a[j, r] - p_j among those it does not hold, at the price where j would be
  worth w_r - epsilon, w_r the second best value (or the best when no other token exists): the
  bid p_j + v_j - w_r + epsilon >= p_j + epsilon. j's previous holder loses it. The phases run
  this at decreasing epsilons (`epsilon_schedule`); between phases each row keeps the tokens
  worth at least its best unheld value minus the next epsilon and frees the rest, and the prices
  stay. One bid a round costs a few passes over one row of n values; every row bidding together
  needs a sort per row and per round, dearer on CPU than the extra rounds.

  Why it is right: call row r's state sound if at most u_r (its free slots) tokens it does not
  hold are worth more than its lowest held token plus epsilon. A bid keeps it: the won token is
  worth w_r - epsilon, so no unheld token is worth more than it plus epsilon, and either the
  lowest held token is below that (the exceptions lose the won token, u_r loses one) or it is the
  won token (no exceptions are left). Losing a token frees a slot and adds one exception; other
  rows' bids only lower the values of tokens r does not hold. A phase starts sound: a kept token
  is worth at least r's best unheld value minus the new epsilon, and a freed one less. When every
  slot is filled (u_r = 0) no unheld token is worth more than r's lowest held value m_r plus
  epsilon; raising each held token's price to a[j, r] - m_r then gives prices under which every
  slot's token is within epsilon of its best: epsilon-complementary slackness for the n x n
  problem, so the total is within n epsilon_last (max(a) - min(a)) = E C epsilon (max(a) -
  min(a)) of the optimum. Each phase stops: a bought token stays bought, so some token q stays
  unheld while a slot is free, at its price at the phase's start; a bid never prices a token
  above p_q + max(a) - min(a) + epsilon (its second best is at least q's value), and each raises a
  price by >= epsilon. That bound is far above what random problems need; max_iters caps the
  bids over all phases (a phase cut short frees nothing after it).

  Args:
    affinity: (T, E) token--expert affinities.
    capacity: C, slots per expert.
    epsilon: the last phase's bid increment, relative to the spread max(a) - min(a) of this
      group, before the factor E C / n.
    max_iters: the most bids, over all phases.
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
  size = max(num_tokens, num_slots)                                          # n
  affinity = jax.lax.stop_gradient(affinity).astype(jnp.float32).T          # (E, T)
  lowest = jnp.min(affinity)
  spread = jnp.maximum(jnp.max(affinity) - lowest, 1e-6)
  value = jnp.concatenate(                                                  # (E, n)
      [affinity, jnp.full((num_experts, size - num_tokens), lowest)], axis=1)
  row_capacity = [capacity] * num_experts
  if num_tokens > num_slots:                                                # The drop row.
    value = jnp.concatenate([value, jnp.full((1, size), lowest)], axis=0)   # (R, n)
    row_capacity.append(num_tokens - num_slots)
  num_rows = len(row_capacity)
  row_capacity = jnp.array(row_capacity, jnp.int32)                         # (R,)
  rows = jnp.arange(num_rows, dtype=jnp.int32)
  tokens = jnp.arange(size, dtype=jnp.int32)

  def bid(state, eps):
    price, owner, count, bids = state                                       # (n,) (n,) (R,) ()
    free = row_capacity - count
    most = jnp.max(free)
    row = jnp.min(jnp.where(free == most, rows, num_rows))
    worth = jnp.where(owner == row, -jnp.inf, value[row] - price)           # (n,)
    best = jnp.max(worth)
    token = jnp.min(jnp.where(worth == best, tokens, size))
    second = jnp.max(jnp.where(tokens == token, -jnp.inf, worth))
    threshold = jnp.where(second > -jnp.inf, second, best)
    previous = owner[token]
    price = price.at[token].add(best - threshold + eps)
    owner = owner.at[token].set(row)
    count = count - (rows == previous) + (rows == row)
    return price, owner, count, bids + 1

  def bidding(state):
    return (jnp.sum(state[2]) < size) & (state[3] < max_iters)

  def free_unsound(state, eps):
    price, owner, _, bids = state
    worth = value - price[None, :]                                          # (R, n)
    held = owner[None, :] == rows[:, None]
    best_unheld = jnp.max(jnp.where(held, -jnp.inf, worth), axis=1)         # (R,)
    keep = jnp.any(held & (worth >= best_unheld[:, None] - eps), axis=0)    # (n,)
    owner = jnp.where(keep | (bids >= max_iters), owner, num_rows)
    count = jnp.sum(owner[None, :] == rows[:, None], axis=1, dtype=jnp.int32)
    return price, owner, count, bids

  state = (jnp.zeros((size,), jnp.float32), jnp.full((size,), num_rows, jnp.int32),
           jnp.zeros((num_rows,), jnp.int32), jnp.zeros((), jnp.int32))
  for phase, relative in enumerate(epsilon_schedule(epsilon, num_slots, size)):
    eps = relative * spread
    if phase:
      state = free_unsound(state, eps)
    state = jax.lax.while_loop(bidding, lambda s, eps=eps: bid(s, eps), state)
  _, owner, _, bids = state
  real = (owner[None, :] == rows[:num_experts, None]) & (tokens < num_tokens)[None, :]   # (E, n)
  negated, _ = jax.lax.top_k(jnp.where(real, -tokens, -num_tokens), capacity)   # (E, C)
  unfilled = min(num_tokens, num_slots) - jnp.sum(real, dtype=jnp.int32)
  return -negated, AuctionReport(bids, unfilled)


def combine_scores(logits: jax.Array) -> jax.Array:
  """BASE's combine weights sigmoid(a), (T, E) -> (T, E), gathered at the assigned slots.

  fairseq's BaseLayer returns alpha * f(x) + (1 - alpha) * x with alpha = sigmoid(x . w_e) and
  f(x) = x + FFN(LN(x)) its residual sublayer, which is x + alpha FFN(LN(x)): the block's own
  residual plus the expert output weighted by alpha. So the MoE layer's combine weight is alpha and
  no mixing term is added. A dropped token gets the residual alone, as in a token-choice block.
  """
  return jax.nn.sigmoid(logits.astype(jnp.float32))
