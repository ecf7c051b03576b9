"""Tests of the softmax, Sinkhorn and sparsity-constrained affinities."""
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.routing import affinity

# Jitted with static sizes so hypothesis examples of one shape share a compilation; and jitted at
# all because run eagerly, every operation outside the solvers' loops compiles on its own.
sinkhorn = jax.jit(affinity.sinkhorn, static_argnums=(1,))
sparsity_constrained = jax.jit(affinity.sparsity_constrained, static_argnums=(1, 2),
                               static_argnames=('num_steps', 'warm_start_iters'))
solve_semi_dual = jax.jit(affinity._solve_semi_dual, static_argnums=(2, 3, 4, 5))
entropic_potentials = jax.jit(affinity._entropic_potentials, static_argnums=(1,))
semi_dual_value_and_grad = jax.jit(affinity.semi_dual_value_and_grad, static_argnums=(3,))


def random_logits(seed, num_tokens, num_experts, scale):
  return scale * jax.random.normal(jax.random.PRNGKey(seed), (num_tokens, num_experts))


def test_softmax_rows_sum_to_one():
  probs = affinity.softmax(random_logits(0, 7, 3, 2.0))
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)


def test_sinkhorn_two_by_two_closed_form():
  # With T = E = 2 both marginals are 1, so Pi = [[p, 1-p], [1-p, p]], and
  # Pi_ij ∝ exp(L_ij) u_i v_j gives p^2 / (1-p)^2 = exp(L00 + L11 - L01 - L10) = e^2, i.e.
  # p = sigmoid(1) = 0.731059.
  plan = affinity.sinkhorn(jnp.array([[2.0, 0.0], [0.0, 0.0]]), num_iters=100)
  np.testing.assert_allclose(plan, [[0.731059, 0.268941], [0.268941, 0.731059]], atol=1e-5)


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(st.integers(0, 10**6), st.sampled_from([(2, 2), (13, 4), (40, 8)]),
                  st.floats(0.0, 2.0))
def test_sinkhorn_marginals(seed, shape, scale):
  num_tokens, num_experts = shape
  plan = sinkhorn(random_logits(seed, num_tokens, num_experts, scale), 100)
  assert (plan > 0).all()
  np.testing.assert_allclose(plan.sum(axis=1), 1.0, atol=1e-5)                 # Rows: exact.
  np.testing.assert_allclose(plan.sum(axis=0), num_tokens / num_experts, rtol=2e-3)  # Columns.


def ott_sinkhorn(logits, num_iters, column_first=True):
  """A float64 transcription of ott-jax 0.2.11's scaling-domain Sinkhorn as the reference calls
  it (kl_projection_routing.py: Geometry(cost_matrix=-logits, epsilon=1), lse_mode=False,
  a = 1_T, b = (T/E) 1_E, min_iterations = max_iterations = 20). ott/core/sinkhorn.py
  `Sinkhorn.kernel_step` updates the column scaling v = b / (K^T u) first, then the row scaling
  u = a / (K v) from the new v; initializers.py starts u = v = 1 when lse_mode is False; with
  min_iterations == max_iterations, fixed_point_loop.fixpoint_iter scans max_iterations //
  inner_iterations = 20 // 10 = 2 blocks of 10 iterations, so 20 of each update. The plan is
  u K v (SinkhornOutput.matrix). column_first=False is the order this project used before: one
  row update first, then (column, row) pairs."""
  kernel = np.exp(np.asarray(logits, np.float64))
  num_tokens, num_experts = kernel.shape
  a, b = np.ones(num_tokens), np.full(num_experts, num_tokens / num_experts)
  u = np.ones(num_tokens) if column_first else a / kernel.sum(axis=1)
  for _ in range(num_iters):
    v = b / (kernel.T @ u)
    u = a / (kernel @ v)
  return u[:, None] * kernel * v[None, :]


def test_sinkhorn_updates_in_otts_order_and_count():
  # Logits of std 3 converge slowly enough that one update more or less, or the other order,
  # moves the plan by 9e-4 or more. The log-domain float32 plan (entries <= 1, exponents of
  # magnitude < 16, so a logsumexp rounds by about 16 * 2^-24 = 1e-6, and Sinkhorn's updates
  # contract errors rather than add them) matches ott's within 1e-5 (measured: 2e-7).
  logits = random_logits(5, 16, 4, 3.0)
  plan = np.asarray(sinkhorn(logits, 20), np.float64)
  np.testing.assert_allclose(plan, ott_sinkhorn(logits, 20), rtol=0, atol=1e-5)
  for other in (ott_sinkhorn(logits, 19), ott_sinkhorn(logits, 21),
                ott_sinkhorn(logits, 20, column_first=False)):
    assert np.max(np.abs(plan - other)) > 9e-4


def test_sinkhorn_is_invariant_to_row_and_column_shifts():
  # Adding a constant to a row or a column of the cost does not change the OT plan.
  logits = random_logits(1, 12, 4, 1.0)
  shifted = logits + jnp.arange(12.0)[:, None] - 2.0 * jnp.arange(4.0)[None, :]
  np.testing.assert_allclose(sinkhorn(logits, 50), sinkhorn(shifted, 50), atol=1e-5)


def test_sinkhorn_is_differentiable_for_the_ablation():
  # Without the softmax-combine trick the combine weights are plan entries: gradients must exist.
  logits = random_logits(2, 8, 4, 1.0)
  grad = jax.jit(jax.grad(lambda l: affinity.sinkhorn(l, 10)[0, 0]))(logits)
  assert np.isfinite(grad).all() and np.abs(grad).sum() > 0


def test_sparse_simplex_projection_hand_worked():
  # z = [3, 1, 0.5], mass 1, k = 2: keep [3, 1]; the simplex threshold is tau = 3 - 1 = 2 (only the
  # first entry stays positive), so the values are [1, 0].
  values, index = affinity._sparse_simplex_projection(jnp.array([[3.0, 1.0, 0.5]]), 1.0, 2)
  np.testing.assert_allclose(values, [[1.0, 0.0]])
  np.testing.assert_array_equal(index, [[0, 1]])
  # z = [0.6, 0.5, 0.1], mass 1, k = 2: tau = (0.6 + 0.5 - 1) / 2 = 0.05 -> [0.55, 0.45].
  values, index = affinity._sparse_simplex_projection(jnp.array([[0.1, 0.6, 0.5]]), 1.0, 2)
  np.testing.assert_allclose(values, [[0.55, 0.45]], atol=1e-6)
  np.testing.assert_array_equal(index, [[1, 2]])


@hypothesis.settings(max_examples=15, deadline=None)
@hypothesis.given(st.integers(0, 10**6), st.sampled_from([(32, 4, 8), (40, 8, 10)]),
                  st.floats(0.1, 3.0), st.sampled_from([0, 10]))
def test_sparsity_constrained_invariants(seed, shape, scale, warm_start_iters):
  num_tokens, num_experts, capacity = shape        # c = 1 and c = 2.
  scores = jax.nn.softmax(random_logits(seed, num_tokens, num_experts, scale))
  plan = sparsity_constrained(scores, capacity, 20, warm_start_iters=warm_start_iters)
  assert (plan >= 0).all()
  assert ((plan > 0).sum(axis=0) <= capacity).all()                           # <= C per column.
  np.testing.assert_allclose(plan.sum(axis=0), num_tokens / num_experts, rtol=1e-5)  # Exact.


@pytest.mark.parametrize('scale', [0.1, 1.0, 3.0])
def test_sparsity_constrained_rows_approach_one_on_average(scale):
  # The solver is approximate (as the paper's is) and the rows cannot all reach 1, so this is a
  # property of many problems, not of each: measured over 4,000 problems, the mean |row sum - 1|
  # per problem was 0.03-0.11 against 0.15-0.35 at the start, and at most 0.35 for one problem.
  scores = jax.nn.softmax(scale * jax.random.normal(jax.random.PRNGKey(7), (200, 32, 4)))
  row_error = lambda plans: jnp.mean(jnp.abs(plans.sum(axis=-1) - 1), axis=-1)
  solved = row_error(jax.vmap(lambda s: sparsity_constrained(s, 8, 20))(scores))
  start = row_error(jax.vmap(lambda s: sparsity_constrained(s, 8, 0))(scores))
  assert float(jnp.mean(solved)) < 0.5 * float(jnp.mean(start))
  assert float(jnp.mean(solved > start)) < 0.02


def test_sparsity_constrained_solver_balances_tokens():
  # With 0 steps the plan's support is plain expert choice on the scores; the semi-dual steps move
  # it towards the row constraint, so fewer tokens end up in no expert at all.
  scores = jax.nn.softmax(random_logits(3, 400, 32, 1.0))   # B/32: 8 images x 50 tokens.
  row_error = lambda plan: float(jnp.mean(jnp.abs(plan.sum(axis=1) - 1)))
  dropped = lambda plan: float(jnp.mean((plan > 0).sum(axis=1) == 0))
  start = sparsity_constrained(scores, 12, num_steps=0)
  solved = sparsity_constrained(scores, 12, num_steps=20)
  top = jax.lax.top_k(scores.T, 12)[1]
  np.testing.assert_array_equal(jnp.sort(jax.lax.top_k(start.T, 12)[1], 1), jnp.sort(top, 1))
  assert row_error(solved) < 0.5 * row_error(start)
  assert dropped(solved) < 0.5 * dropped(start)


def test_sparsity_constrained_balances_nearly_uniform_scores():
  # A router at initialisation: logits of std 0.01, so all scores are within ~0.003 of 1/E. An
  # unscaled first L-BFGS step (norm 1) jumps every token over every threshold: before the step
  # scale, 10 steps never left alpha = 0 here (row error 0.500 at 0 and 10 steps).
  scores = jax.nn.softmax(0.01 * random_logits(8, 272, 8, 1.0))
  row_error = lambda plan: float(jnp.mean(jnp.abs(plan.sum(axis=1) - 1)))
  start = sparsity_constrained(scores, 34, num_steps=0)
  solved = sparsity_constrained(scores, 34, num_steps=10)
  assert row_error(solved) < 0.25 * row_error(start), (row_error(solved), row_error(start))


def test_entropic_start_is_sinkhorn_at_temperature_eps():
  # The warm start iterates Sinkhorn in the scaling domain on S / eps; its potentials are the
  # log-domain sinkhorn()'s token potentials f, as alpha = -eps f up to a constant: since
  # eps log Pi = S + eps f + eps g, alpha + eps log Pi - S depends on the expert only. The warm
  # start updates the rows first and sinkhorn() the columns first (ott's order), so the two agree
  # once both have converged: 100 iterations here (after 7 they differ by 0.08, after 30 by 6e-3,
  # after 100 by 1.5e-6).
  scores = jax.nn.softmax(random_logits(11, 32, 4, 1.0))
  eps = affinity.WARM_START_TEMPERATURE * jnp.std(scores)
  alpha, usable = entropic_potentials(scores.T, 100)
  assert usable
  plan = sinkhorn(scores / eps, 100)
  per_expert = alpha[:, None] + eps * jnp.log(plan) - scores
  np.testing.assert_allclose(per_expert - per_expert[:1], 0.0, atol=1e-5)


@pytest.mark.parametrize('scale', [0.3, 1.0, 30.0])
def test_entropic_start_is_finite_and_ranks_tokens_by_demand(scale):
  # Finite even for nearly one-hot scores (scale 30); a token every expert wants costs more than
  # a token no expert wants.
  scores = jax.nn.softmax(random_logits(12, 64, 8, scale))
  scores = scores.at[0].set(1.0).at[1].set(0.0)
  alpha, usable = entropic_potentials(scores.T, 10)
  assert usable and np.isfinite(alpha).all() and alpha[0] > alpha[1]


def test_warm_start_balances_better_in_half_the_steps():
  # The router's preset at c = 1: 5 steps from 10 Sinkhorn iterations against 10 steps from 0, on
  # 8 routing groups of the tiny config's shape with logits of std 1 (trained tiny routers have
  # logits of std 0.8-1.1). Measured: mean |row sum - 1| 0.025 against 0.118.
  logits = jax.random.normal(jax.random.PRNGKey(13), (8, 272, 8))
  scores = jax.nn.softmax(logits)
  row_error = lambda plans: float(jnp.mean(jnp.abs(plans.sum(axis=-1) - 1)))
  warm = jax.vmap(lambda s: sparsity_constrained(s, 34, 5, warm_start_iters=10))(scores)
  cold = jax.vmap(lambda s: sparsity_constrained(s, 34, 10))(scores)
  assert row_error(warm) < 0.5 * row_error(cold), (row_error(warm), row_error(cold))


def test_sparsity_constrained_gradient_is_finite():
  scores = jax.nn.softmax(random_logits(4, 16, 4, 1.0))
  grad = jax.jit(jax.grad(lambda s: jnp.sum(affinity.sparsity_constrained(s, 4) ** 2)))(scores)
  assert np.isfinite(grad).all() and np.abs(grad).sum() > 0


def test_affinity_errors():
  scores = jnp.ones((8, 2)) / 2
  with pytest.raises(ValueError, match='num_iters >= 1'):
    affinity.sinkhorn(scores, num_iters=0)
  with pytest.raises(ValueError, match=r'1 <= capacity <= T=8'):
    affinity.sparsity_constrained(scores, capacity=9)
  with pytest.raises(ValueError, match='num_steps >= 0'):
    affinity.sparsity_constrained(scores, capacity=2, num_steps=-1)
  with pytest.raises(ValueError, match='warm_start_iters >= 0'):
    affinity.sparsity_constrained(scores, capacity=2, warm_start_iters=-1)
  with pytest.raises(ValueError, match='memory_size >= 1'):
    affinity.sparsity_constrained(scores, capacity=2, memory_size=0)


def test_semi_dual_gradient_is_one_minus_row_sums():
  # The closed form (Danskin) matches autodiff through the projection wherever F is smooth.
  scores_t = jax.nn.softmax(random_logits(5, 24, 4, 1.0)).T
  alpha = 0.01 * jax.random.normal(jax.random.PRNGKey(6), (24,))
  value, grad = semi_dual_value_and_grad(alpha, scores_t, 6.0, 6)
  autodiff = jax.jit(jax.grad(
      lambda a: affinity.semi_dual_value_and_grad(a, scores_t, 6.0, 6)[0]))(alpha)
  np.testing.assert_allclose(grad, autodiff, atol=1e-5)
  assert np.isfinite(value)


@pytest.mark.parametrize('warm_start_iters', [0, 10])
def test_semi_dual_solver_never_ends_above_its_start(warm_start_iters):
  # A unit step may raise F (it is not smooth); the solver returns the best potentials it saw, so
  # F never ends above its start (alpha = 0, plain expert choice, or the entropic warm start) and
  # more steps never end higher.
  scores_t = jax.nn.softmax(random_logits(1, 32, 4, 0.25)).T
  semi_dual = lambda alpha: float(semi_dual_value_and_grad(alpha, scores_t, 8.0, 8)[0])
  values = [semi_dual(solve_semi_dual(scores_t, 8.0, 8, steps, 3, warm_start_iters)[0])
            for steps in (0, 1, 5, 20)]
  assert values == sorted(values, reverse=True), values
  assert values[-1] < values[0]
  if warm_start_iters:   # Zero steps return the warm start itself.
    np.testing.assert_allclose(
        solve_semi_dual(scores_t, 8.0, 8, 0, 3, warm_start_iters)[0],
        entropic_potentials(scores_t, warm_start_iters)[0], rtol=1e-5, atol=1e-6)


def test_solver_report_row_error_and_unusable_warm_start(monkeypatch):
  # row_error is mean_t |sum_e Pi[t, e] - 1| of the returned plan; a warm start that is not
  # finite (replaced by 0) is reported as a fallback even when the steps then help.
  scores = jax.nn.softmax(random_logits(5, 32, 4, 1.0))
  # A new function each time: a jitted one traced before the monkeypatch would not see it.
  solve = lambda: jax.jit(
      lambda s: affinity.sparsity_constrained_with_info(s, 8, 5, warm_start_iters=10))(scores)
  plan, report = solve()
  np.testing.assert_allclose(report.row_error, jnp.mean(jnp.abs(plan.sum(axis=1) - 1)), rtol=1e-6)
  assert float(report.fell_back) == 0.0
  monkeypatch.setattr(affinity, '_entropic_potentials',
                      lambda scores_t, iters: (jnp.zeros(scores_t.shape[1]), jnp.array(False)))
  _, report = solve()
  assert float(report.fell_back) == 1.0
