"""Tests of token choice (Algorithm 1) and expert choice (Algorithm 2) allocation."""
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import allocation
from vmoe.routing import capacity as capacity_lib

# Jitted with static capacity and k, so that hypothesis examples of one shape share a compilation.
token_choice = jax.jit(allocation.token_choice, static_argnums=(1, 2))
expert_choice = jax.jit(allocation.expert_choice, static_argnums=(1,))
token_choice_slots = jax.jit(allocation.token_choice_slots, static_argnums=(1, 2))

# Four tokens, two experts; every token's preference is clear.
SCORES = jnp.array([[0.9, 0.1],
                    [0.8, 0.2],
                    [0.3, 0.7],
                    [0.6, 0.4]])


def algorithm_1(scores, capacity, k, num_choices=None):
  """Literal transcription of the paper's Algorithm 1 (Token Choice allocation); with
  num_choices, token t makes only its first num_choices[t] requests (top-p routing)."""
  num_tokens, num_experts = scores.shape
  num_choices = [k] * num_tokens if num_choices is None else num_choices
  dispatch = np.zeros((num_tokens, num_experts, capacity))
  combine = np.zeros_like(dispatch)
  order = np.argsort(-scores, axis=1, kind='stable')
  for i in range(k):
    for t in range(num_tokens):
      if i >= num_choices[t]:
        continue
      r = order[t, i]
      c = int(np.count_nonzero(dispatch[:, r, :]))
      if c < capacity:
        dispatch[t, r, c] = 1
        combine[t, r, c] = scores[t, r]
  return dispatch, combine


def algorithm_2(scores, capacity):
  """Literal transcription of the paper's Algorithm 2 (Expert Choice allocation)."""
  num_tokens, num_experts = scores.shape
  dispatch = np.zeros((num_tokens, num_experts, capacity))
  combine = np.zeros_like(dispatch)
  for r in range(num_experts):
    order = np.argsort(-scores[:, r], kind='stable')
    for c in range(capacity):
      t = order[c]
      dispatch[t, r, c] = 1
      combine[t, r, c] = scores[t, r]
  return dispatch, combine


@pytest.mark.parametrize('tokens,experts,factor,expected', [
    (400, 32, 1, 12),   # 12.5 -> 12: B/32, 8 images x 50 tokens; halves go to the even integer.
    (400, 32, 2, 25),   # 25.
    (1576, 32, 1, 49),  # 49.25 -> 49: B/16 and L/16, 8 images x 197 tokens.
    (50, 32, 1, 2),     # 1.5625 -> 2: Soft MoE slots for one B/32 image.
    (10, 32, 1, 1),     # 0.31 -> 0 -> at least one slot.
])
def test_compute_capacity_rounds_as_the_paper(tokens, experts, factor, expected):
  assert capacity_lib.compute_capacity(tokens, experts, factor) == expected


@pytest.mark.parametrize('tokens,factor,expected', [
    # T, c -> C for E = 32 under round_half_even, round_half_up, ceil, ceil_multiple_of_4.
    (400, 1, (12, 13, 13, 16)),     # 12.5: the four rules give three answers.
    (400, 2, (25, 25, 25, 28)),     # 25 exactly.
    (1576, 1, (49, 49, 50, 52)),    # 49.25.
    (1576, 2, (98, 99, 99, 100)),   # 98.5.
    (50, 2, (3, 3, 4, 4)),          # 3.125: Soft MoE, one B/32 image at c = 2.
])
def test_capacity_rounding_rules(tokens, factor, expected):
  rules = ('round_half_even', 'round_half_up', 'ceil', 'ceil_multiple_of_4')
  found = tuple(capacity_lib.compute_capacity(tokens, 32, factor, rule) for rule in rules)
  assert found == expected
  with pytest.raises(ValueError, match='unknown capacity rounding'):
    capacity_lib.compute_capacity(tokens, 32, factor, 'floor')


@pytest.mark.parametrize('factor', [0, -1])
def test_compute_capacity_rejects_non_positive_factor(factor):
  with pytest.raises(ValueError, match='capacity factor must be > 0'):
    capacity_lib.compute_capacity(400, 32, factor)


def test_token_choice_hand_worked_k1():
  # First choices: t0->e0 (slot 0), t1->e0 (slot 1), t2->e1 (slot 0), t3->e0: full, dropped.
  slot_token = allocation.token_choice_slots(SCORES, capacity=2, k=1)
  np.testing.assert_array_equal(slot_token, [[0, 1], [2, 4]])  # 4 = T marks an empty slot.
  dispatch, combine = allocation.token_choice(SCORES, capacity=2, k=1)
  assert dispatch.shape == combine.shape == (4, 2, 2)
  assert dispatch[0, 0, 0] == dispatch[1, 0, 1] == dispatch[2, 1, 0] == 1
  assert dispatch.sum() == 3 and dispatch[3].sum() == 0
  np.testing.assert_allclose(combine[2, 1, 0], 0.7)


def test_token_choice_hand_worked_k2():
  # Round 1 as above. Round 2 (second choices, token order): t0->e1 takes e1's slot 1;
  # t1->e1, t2->e0 and t3->e1 find full buffers and are dropped.
  slot_token = allocation.token_choice_slots(SCORES, capacity=2, k=2)
  np.testing.assert_array_equal(slot_token, [[0, 1], [2, 0]])
  _, combine = allocation.token_choice(SCORES, capacity=2, k=2)
  np.testing.assert_allclose(combine[0, 1, 1], 0.1)


def test_expert_choice_hand_worked():
  # e0 ranks tokens 0 (0.9), 1 (0.8), 3 (0.6), 2; e1 ranks 2 (0.7), 3 (0.4), 1 (0.2), 0.
  np.testing.assert_array_equal(allocation.expert_choice_slots(SCORES, 2), [[0, 1], [2, 3]])
  np.testing.assert_array_equal(allocation.expert_choice_slots(SCORES, 3), [[0, 1, 3], [2, 3, 1]])


def test_combine_scores_replace_weights_at_dispatched_positions():
  other = jnp.full_like(SCORES, 0.5).at[0, 0].set(0.25)
  for dispatch, combine in (allocation.token_choice(SCORES, 2, 1, combine_scores=other),
                            allocation.expert_choice(SCORES, 2, combine_scores=other)):
    np.testing.assert_allclose(combine, dispatch * other[:, :, None])
    assert combine[0, 0, 0] == 0.25


# (T, E) pairs from a small pool keep the number of compilations low; seeds vary freely.
shapes = st.sampled_from([(1, 1), (5, 3), (9, 2), (16, 4), (24, 6)])
factors = st.sampled_from([0.5, 1.0, 2.0])
seeds = st.integers(0, 2**31 - 1)


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(shapes, seeds, st.integers(1, 2), factors)
def test_token_choice_matches_algorithm_1_and_invariants(shape, seed, k, factor):
  num_tokens, num_experts = shape
  k = min(k, num_experts)
  scores = np.random.default_rng(seed).random((num_tokens, num_experts)).astype(np.float32)
  capacity = capacity_lib.compute_capacity(num_tokens, num_experts, factor)
  dispatch, combine = token_choice(jnp.asarray(scores), capacity, k)
  expected_dispatch, expected_combine = algorithm_1(scores, capacity, k)
  np.testing.assert_array_equal(dispatch, expected_dispatch)
  np.testing.assert_allclose(combine, expected_combine, rtol=1e-6)
  assert set(np.unique(dispatch)) <= {0.0, 1.0}                # Binary dispatch.
  assert dispatch.sum(axis=0).max() <= 1                        # A slot holds at most one token.
  assert (dispatch.sum(axis=(0, 2)) <= capacity).all()          # Capacity never exceeded.
  assert (dispatch.sum(axis=2) <= 1).all()                      # A token enters an expert once.
  assert (dispatch.sum(axis=(1, 2)) <= k).all()                 # At most k experts per token.


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(shapes, seeds, factors)
def test_token_choice_with_fewer_choices_per_token_matches_algorithm_1(shape, seed, factor):
  # Each token requests only its first n_t <= k = 2 choices; skipped requests hold no queue place.
  num_tokens, num_experts = shape
  k = min(2, num_experts)
  rng = np.random.default_rng(seed)
  scores = rng.random((num_tokens, num_experts)).astype(np.float32)
  counts = rng.integers(1, k + 1, num_tokens).astype(np.int32)
  capacity = capacity_lib.compute_capacity(num_tokens, num_experts, factor)
  slot_token = token_choice_slots(jnp.asarray(scores), capacity, k, jnp.asarray(counts))
  dispatch, _ = allocation.to_dense(slot_token, jnp.zeros(slot_token.shape), num_tokens)
  np.testing.assert_array_equal(dispatch, algorithm_1(scores, capacity, k, counts)[0])


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(shapes, seeds, factors)
def test_expert_choice_matches_algorithm_2_and_invariants(shape, seed, factor):
  num_tokens, num_experts = shape
  scores = np.random.default_rng(seed).random((num_tokens, num_experts)).astype(np.float32)
  capacity = min(capacity_lib.compute_capacity(num_tokens, num_experts, factor), num_tokens)
  dispatch, combine = expert_choice(jnp.asarray(scores), capacity)
  expected_dispatch, expected_combine = algorithm_2(scores, capacity)
  np.testing.assert_array_equal(dispatch, expected_dispatch)
  np.testing.assert_allclose(combine, expected_combine, rtol=1e-6)
  assert set(np.unique(dispatch)) <= {0.0, 1.0}
  np.testing.assert_array_equal(dispatch.sum(axis=0), 1)       # Every slot is filled...
  assert (dispatch.sum(axis=2) <= 1).all()                      # ...by distinct tokens.


def test_errors_are_clear():
  with pytest.raises(ValueError, match=r'1 <= k <= E=2'):
    allocation.token_choice(SCORES, capacity=2, k=3)
  with pytest.raises(ValueError, match='capacity must be >= 1'):
    allocation.expert_choice(SCORES, capacity=0)
  with pytest.raises(ValueError, match=r'capacity <= T=4'):
    allocation.expert_choice(SCORES, capacity=5)
  with pytest.raises(ValueError, match=r'scores must be \(T, E\)'):
    allocation.token_choice(SCORES[0], capacity=1, k=1)
  with pytest.raises(ValueError, match='combine_scores must have the shape'):
    allocation.expert_choice(SCORES, 2, combine_scores=SCORES[:, :1])
