"""Tests of BASE's balanced assignment by auction against an exact linear assignment solver."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from vmoe.routing import allocation
from vmoe.routing import balanced_assignment

assign = jax.jit(balanced_assignment.balanced_assignment_slots, static_argnums=(1, 2, 3))


def optimum(affinity, capacity):
  """The best total affinity, from scipy's exact solver on the T x (E C) matrix with each expert's
  column repeated C times: a token per slot, min(T, E C) pairs."""
  slots = np.repeat(affinity.astype(np.float64), capacity, axis=1)
  rows, cols = optimize.linear_sum_assignment(slots, maximize=True)
  return slots[rows, cols].sum()


def check_constraints(slot_token, num_tokens, capacity, num_experts):
  slot_token = np.asarray(slot_token)
  assert slot_token.shape == (num_experts, capacity)
  assert ((slot_token >= 0) & (slot_token <= num_tokens)).all()
  placed = slot_token[slot_token < num_tokens]
  assert len(np.unique(placed)) == len(placed)                 # A token holds at most one slot.
  assert len(placed) == min(num_tokens, num_experts * capacity)   # Every slot or every token.
  return placed


def total(affinity, slot_token):
  num_tokens = affinity.shape[0]
  return sum(affinity[t, e] for e, row in enumerate(np.asarray(slot_token)) for t in row
             if t < num_tokens)


# (T, E, C): C < T / E (tokens dropped, as the B/32 recipe's 400 tokens in 32 x 12 slots),
# E C = T (exactly balanced) and E C > T (slots left empty).
SHAPES = [(14, 3, 4), (40, 4, 7), (12, 3, 4), (30, 5, 6), (10, 3, 4), (25, 4, 8)]


@pytest.mark.parametrize('shape', SHAPES)
def test_within_epsilon_of_the_exact_assignment(shape):
  num_tokens, num_experts, capacity = shape
  for seed in range(4):
    affinity = np.random.default_rng(seed).normal(size=(num_tokens, num_experts)).astype(np.float32)
    best = optimum(affinity, capacity)
    for epsilon in (3e-2, balanced_assignment.EPSILON):
      slot_token, report = assign(jnp.asarray(affinity), capacity, epsilon, 100_000)
      assert int(report.unfilled) == 0 and int(report.iterations) >= 1
      check_constraints(slot_token, num_tokens, capacity, num_experts)
      gap = best - total(affinity, slot_token)
      # The auction's bound, E C epsilon (max - min), with 1e-5 for the float32 affinities summed
      # in another order; and at the training epsilon, at most 1e-4 of the optimum (all
      # optima here are positive: every slot takes one of its expert's best tokens).
      bound = num_experts * capacity * epsilon * (affinity.max() - affinity.min())
      assert -1e-5 <= gap <= bound + 1e-5, (seed, epsilon, gap, bound)
      if epsilon == balanced_assignment.EPSILON:
        assert gap <= 1e-4 * best


def test_hand_worked_where_greedy_is_not_optimal():
  # Both tokens prefer e0. Token choice (greedy) gives t0 -> e0 and t1 -> e1: 3 + 0 = 3. The
  # balanced assignment gives t0 -> e1 and t1 -> e0: 2.9 + 2.5 = 5.4.
  affinity = jnp.array([[3.0, 2.9], [2.5, 0.0]])
  slot_token, report = balanced_assignment.balanced_assignment_slots(affinity, 1)
  np.testing.assert_array_equal(slot_token, [[1], [0]])
  assert int(report.unfilled) == 0
  np.testing.assert_array_equal(allocation.token_choice_slots(affinity, 1, 1), [[0], [2]])


def test_drops_the_tokens_that_cost_least():
  # E C = 2 < T = 3: t2 is nobody's good choice and is the one dropped; e0 takes t0 (3) and e1 t1
  # (2): 5, against 3 + 1 or 2 + 1 with t2 placed.
  affinity = jnp.array([[3.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
  slot_token, _ = balanced_assignment.balanced_assignment_slots(affinity, 1)
  np.testing.assert_array_equal(slot_token, [[0], [1]])


def test_vmap_over_groups_and_iteration_cap():
  affinity = jax.random.normal(jax.random.PRNGKey(0), (3, 20, 4))
  batched, report = jax.jit(jax.vmap(
      lambda a: balanced_assignment.balanced_assignment_slots(a, 5)))(affinity)
  for g in range(3):
    alone, _ = balanced_assignment.balanced_assignment_slots(affinity[g], 5)
    np.testing.assert_array_equal(batched[g], alone)
  assert report.iterations.shape == (3,) and (report.unfilled == 0).all()
  # A round is one bid, which fills one slot; the later phases free nothing once the cap is
  # reached, so the report counts 20 - 1 = 19 placements missing.
  slot_token, report = balanced_assignment.balanced_assignment_slots(affinity[0], 5, max_iters=1)
  assert int(report.iterations) == 1 and int(report.unfilled) == 19
  assert int(np.sum(np.asarray(slot_token) < 20)) == 1
  # Capped mid-way, the partial assignment still obeys every constraint.
  slot_token, report = balanced_assignment.balanced_assignment_slots(affinity[0], 5, max_iters=12)
  filled = int(np.sum(np.asarray(slot_token) < 20))
  assert int(report.iterations) == 12 and 0 < filled < 20 and int(report.unfilled) == 20 - filled
  placed = np.asarray(slot_token)[np.asarray(slot_token) < 20]
  assert len(np.unique(placed)) == len(placed)


def test_more_slots_than_tokens_on_skewed_affinities():
  # A trained router's affinities are skewed: most tokens prefer a few experts. At the tiny
  # config's c = 2 (T = 272, E = 8, C = 68), the tokens bidding for the C equal copies of a
  # popular expert placed fewer than half the tokens in 20,000 bids; the square problem's slots
  # place every token, within the auction's bound of the optimum (scipy's exact solver).
  num_tokens, num_experts, capacity = 272, 8, 68
  rng = np.random.default_rng(0)
  affinity = (rng.normal(size=(num_tokens, num_experts)) +
              np.arange(num_experts) / num_experts * 8).astype(np.float32)
  assert np.bincount(affinity.argmax(1), minlength=num_experts)[-1] > 2 * capacity
  slot_token, report = assign(jnp.asarray(affinity), capacity, balanced_assignment.EPSILON,
                              balanced_assignment.MAX_ITERS)
  assert int(report.unfilled) == 0 and int(report.iterations) < balanced_assignment.MAX_ITERS
  placed = check_constraints(slot_token, num_tokens, capacity, num_experts)
  assert sorted(placed) == list(range(num_tokens))
  gap = optimum(affinity, capacity) - total(affinity, slot_token)
  bound = num_experts * capacity * balanced_assignment.EPSILON * (affinity.max() - affinity.min())
  assert -1e-3 <= gap <= bound + 1e-3   # 1e-3: float32 sums of 272 values up to 12, both orders.


def test_epsilon_schedule_divides_by_ten_down_to_the_last():
  # Last: epsilon E C / n. At E C = 384 slots for n = 400 tokens and epsilon = 1e-4, 9.6e-5: from
  # 3e-2 by tenths, 3e-3 and 3e-4 are above it, 3e-5 would not be.
  schedule = balanced_assignment.epsilon_schedule(1e-4, 384, 400)
  np.testing.assert_allclose(schedule, [3e-2, 3e-3, 3e-4, 9.6e-5], rtol=1e-12)
  # E C = n: epsilon itself; one phase when it is at least the start.
  np.testing.assert_allclose(balanced_assignment.epsilon_schedule(1e-3, 30, 30),
                             [3e-2, 3e-3, 1e-3], rtol=1e-12)
  assert balanced_assignment.epsilon_schedule(5e-2, 30, 30) == [5e-2]


def test_combine_is_sigmoid_and_carries_the_gradient():
  # sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4; d sigmoid / da = s (1 - s) = 3/16 at ln 3.
  logits = jnp.array([[0.0, np.log(3.0)]])
  np.testing.assert_allclose(balanced_assignment.combine_scores(logits), [[0.5, 0.75]], rtol=1e-6)
  grad = jax.grad(lambda l: balanced_assignment.combine_scores(l)[0, 1])(logits)
  np.testing.assert_allclose(grad, [[0.0, 0.1875]], rtol=1e-5)


def test_errors_are_clear():
  with pytest.raises(ValueError, match=r'affinity must be \(T, E\)'):
    balanced_assignment.balanced_assignment_slots(jnp.zeros((2, 3, 4)), 1)
  with pytest.raises(ValueError, match='capacity must be >= 1'):
    balanced_assignment.balanced_assignment_slots(jnp.zeros((3, 4)), 0)
  with pytest.raises(ValueError, match='epsilon > 0'):
    balanced_assignment.balanced_assignment_slots(jnp.zeros((3, 4)), 1, epsilon=0.0)
