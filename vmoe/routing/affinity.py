"""Token--expert affinity matrices: logits or scores (T, E) -> scores (T, E).

Axis letters: t = token (T tokens of one routing group), e = expert (E experts), k = kept entries.

Three affinities of the paper (section "MoE layers instantiated by different routers"):
  softmax               Pi_softmax = softmax(X W), rows sum to 1          (eq. softmax-affinity)
  sinkhorn              Pi_ent: entropic OT, rows sum to 1, columns to T/E
                                                                          (eq. sinkhorn-objective)
  sparsity_constrained  Pi_sparse: quadratic OT on softmax scores with at most C
                        nonzeros per expert column                        (eq. sparsity-constrained)
All are pure functions of one group; vmap them over groups.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


def softmax(logits: jax.Array) -> jax.Array:
  """Row-wise softmax over experts: (T, E) -> (T, E), computed in float32."""
  return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def sinkhorn(logits: jax.Array, num_iters: int = 20) -> jax.Array:
  """Entropy-regularised OT plan with row sums 1 and column sums T/E.

  Solves max <Pi, logits> - <Pi, log Pi> s.t. Pi 1_E = 1_T, Pi^T 1_T = (T/E) 1_E by Sinkhorn's
  algorithm in the log domain: Pi = exp(logits + f[:, None] + g[None, :]) with the dual potentials
  f (T,) and g (E,). Each iteration updates the column potential g from f, then the row potential
  f from the new g, starting from f = 0: the order and count of ott-jax's Sinkhorn, which the
  reference runs for exactly 20 iterations (docs/fidelity.md, the Sinkhorn row and D6; ott 0.2.11
  `Sinkhorn.kernel_step` updates the column scaling v = b / K^T u, then the row scaling
  u = a / K v, from u = 1, the scaling-domain form of f = 0). The last update is the row one, so
  rows sum to 1 exactly and columns to T/E up to the convergence error.

  The iterations are unrolled and differentiable. The routers use this plan only to choose the
  dispatch (a discrete top-k, which carries no gradient), so with the softmax-combine trick no
  gradient flows through Sinkhorn; with the trick off (the paper's Figure 3 ablation) the combine
  weights are entries of this plan and gradients flow through the unrolled iterations.

  Args:
    logits: (T, E) router logits X W.
    num_iters: fixed number of (column, row) update pairs.
  Returns:
    (T, E) float32 transport plan.
  """
  if num_iters < 1:
    raise ValueError(f'sinkhorn needs num_iters >= 1, got {num_iters}.')
  logits = logits.astype(jnp.float32)
  num_tokens, num_experts = logits.shape
  log_col_sum = jnp.log(num_tokens / num_experts)

  def column_potential(f):  # g such that each column of exp(logits + f + g) sums to T/E.
    return log_col_sum - jax.nn.logsumexp(logits + f[:, None], axis=0)

  def row_potential(g):  # f such that each row of exp(logits + f + g) sums to 1.
    return -jax.nn.logsumexp(logits + g[None, :], axis=1)

  f = jax.lax.fori_loop(0, num_iters - 1, lambda _, f: row_potential(column_potential(f)),
                        jnp.zeros((num_tokens,), jnp.float32))
  g = column_potential(f)                                   # The last iteration, kept whole.
  f = row_potential(g)
  return jnp.exp(logits + f[:, None] + g[None, :])


def _simplex_of_sorted(top: jax.Array, mass: float) -> jax.Array:
  """Projects each row of `top` (E, k), sorted in decreasing order, onto {p >= 0, sum(p) = mass}
  by the sort-based rule: tau from the largest prefix whose entries stay above it."""
  k = top.shape[-1]
  excess = jnp.cumsum(top, axis=-1) - mass              # (E, k)
  rank = jnp.arange(1, k + 1, dtype=top.dtype)
  support = jnp.sum(top - excess / rank > 0, axis=-1)   # (E,) size of the positive support, >= 1.
  tau = jnp.take_along_axis(excess, support[:, None] - 1, axis=-1) / support[:, None]
  return jnp.maximum(top - tau, 0.0)


def _sparse_simplex_projection(z: jax.Array, mass: float, k: int):
  """Projects each row of z (E, T) onto {p >= 0, sum(p) = mass, ||p||_0 <= k}.

  Solves max_p <p, z> - 1/2 ||p||^2 under those constraints: keep the k largest entries of the row
  and project them onto the simplex of the given mass (Kyrillidis et al. 2013, "Sparse projections
  onto the simplex"); the usual sort-based simplex projection applies since top_k is sorted.

  Returns:
    values (E, k) of the kept entries (>= 0, each row summing to `mass`) and their indices (E, k).
  """
  top, index = jax.lax.top_k(z, k)                       # (E, k), sorted in decreasing order.
  return _simplex_of_sorted(top, mass), index


def _semi_dual_at(alpha, scores_t, column_mass, capacity):
  """F(alpha), its gradient 1 - (row sums of the plan at alpha), and the plan's support (E, C),
  all from one sparse projection.

  F is a maximum of functions affine in alpha, so by Danskin's theorem its gradient is the
  gradient of the maximising term: 1_T minus the row sums of the sparse plan. Computing it this way
  costs one scatter-add instead of a backward pass through top_k and the simplex projection.
  """
  top, index = jax.lax.top_k(scores_t - alpha[None, :], capacity)   # (E, C) kept entries.
  values = _simplex_of_sorted(top, column_mass)
  value = jnp.sum(alpha) + jnp.sum(values * top - 0.5 * values**2)
  row_sums = jnp.zeros_like(alpha).at[index.reshape(-1)].add(values.reshape(-1))
  return value, 1.0 - row_sums, index


def semi_dual_value_and_grad(alpha, scores_t, column_mass, capacity):
  """F(alpha) and its gradient (see _semi_dual_at); scores_t (E, T), potentials alpha (T,)."""
  return _semi_dual_at(alpha, scores_t, column_mass, capacity)[:2]


def sparse_plan(scores_t, alpha, support, column_mass):
  """(E, T) plan at potentials alpha: the sparse projection of scores_t - alpha (alpha held
  constant) on `support` (E, C), the columns' top-C indices at alpha in decreasing order, so the
  gathered entries are sorted as _simplex_of_sorted needs and no second top_k runs."""
  kept = jnp.take_along_axis(scores_t - jax.lax.stop_gradient(alpha)[None, :], support, axis=-1)
  values = _simplex_of_sorted(kept, column_mass)
  num_experts = scores_t.shape[0]
  return jnp.zeros_like(scores_t).at[jnp.arange(num_experts)[:, None], support].set(values)


def _keep_lower(candidate, value, best, best_value):
  """The candidate (a pytree) and its value if the value is lower than best_value, else the best."""
  lower = value < best_value
  best = jax.tree.map(lambda c, b: jnp.where(lower, c, b), candidate, best)
  return best, jnp.where(lower, value, best_value)


# Warm start: the temperature of the entropic start, relative to std(S), and the first L-BFGS step
# from it, relative to the step from alpha = 0. Chosen on a grid (temperature 0.03-1, step
# 0.03-1, 5-30 Sinkhorn iterations) for the lowest mean |row sum - 1| after 5 steps on the scores
# of trained tiny sparsity_ec routers and on softmax of N(0, std) logits (std 0.01-10, the tiny
# and B/32 shapes); `python -m bench.sparsity_solver` measures the result.
WARM_START_TEMPERATURE = 0.3
WARM_START_STEP = 0.1


def _entropic_potentials(scores_t, num_iters):
  """Starting potentials alpha (T,) for the semi-dual: the token potentials of entropic OT.

  When E*C <= T the sparse plan is nearly an assignment (almost every row of the optimum holds a
  single entry near 1 at the tiny study's T=272, E=8, C=34), and its potentials are the prices
  of that assignment, which entropic OT with a small temperature approximates: Sinkhorn on S / eps
  (rows 1, columns T/E) with eps = WARM_START_TEMPERATURE * std(S), and alpha = -eps f for its
  token potentials f. Iterated in the scaling domain (two matrix-vector products per iteration
  instead of two logsumexps, the cheaper form on a CPU) on K = exp((S - max_e S) / eps), whose
  largest entry per token is 1, so no token's sum vanishes. Returns (alpha, usable): a
  non-finite result (an expert far below every token) is replaced by 0 and usable is False, which
  the solver reports as a fallback.
  """
  num_experts, num_tokens = scores_t.shape
  eps = WARM_START_TEMPERATURE * jnp.maximum(jnp.std(scores_t), 1e-6)
  shift = jnp.max(scores_t, axis=0)                        # (T,)
  kernel = jnp.exp((scores_t - shift[None, :]) / eps)      # (E, T), max 1 per token.
  token_scale = lambda v: 1.0 / (v @ kernel)              # Rows of the plan sum to 1.

  def update(_, v):                                        # Columns sum to T/E.
    return (num_tokens / num_experts) / jnp.maximum(kernel @ token_scale(v), 1e-30)

  v = jax.lax.fori_loop(0, num_iters, update, jnp.ones((num_experts,), jnp.float32))
  alpha = shift - eps * jnp.log(token_scale(v))
  usable = jnp.all(jnp.isfinite(alpha))
  return jnp.where(usable, alpha, 0.0), usable


def step_scale(scores_t, warm_start: bool):
  """s of the potentials u = alpha / s that L-BFGS works on (see _solve_semi_dual)."""
  scale = jnp.minimum(1.0, 0.5 * jnp.std(scores_t) * jnp.sqrt(scores_t.shape[1]))
  return WARM_START_STEP * scale if warm_start else scale


def _solve_semi_dual(scores_t, column_mass, capacity, num_steps, memory_size, warm_start_iters=0):
  """L-BFGS on the semi-dual of scores_t (E, T) from alpha = 0, or from entropic potentials
  (_entropic_potentials) when warm_start_iters > 0: the best (lowest F) iterate seen after
  num_steps steps, as potentials alpha (T,) and the support (E, C) of its sparse plan, and
  whether the solver fell back: its warm start was not finite (it then starts at 0), or no step
  lowered F below the start's, so the result is the start itself (plain Expert Choice on S from
  alpha = 0). With num_steps = 0 returning the start is asked for and is no fallback.

  Step scale: optax's L-BFGS takes a first step of norm min(1, ||grad||), and its later steps are
  invariant to rescaling alpha. A norm-1 step is far too long when the scores are nearly uniform
  (a router at initialisation): every token jumps over every threshold, the curvature pairs are
  useless and the solver stalls at the start or diverges. So the solver works on u = alpha / s
  with s = min(1, std(S) sqrt(T) / 2): the first step moves each potential by about half the
  scores' spread, and is unchanged for well-spread scores. Each step is also clipped to move no
  potential by more than 1 + range(S) (no optimum is farther), a guard against the blow-ups that
  curvature pairs across a kink of F can cause. From a warm start the optimum is near, so s is
  WARM_START_STEP times smaller (the first step is shorter).
  F is not smooth, so unit steps do not guarantee descent; keeping the best iterate makes the
  result never worse than the start (Expert Choice from alpha = 0).
  The solver evaluates F num_steps + 1 times (one projection each) and keeps the best iterate's
  support, so the plan needs no further top_k.
  """
  num_tokens = scores_t.shape[1]
  scale = step_scale(scores_t, warm_start=warm_start_iters > 0)
  max_move = (1.0 + jnp.max(scores_t) - jnp.min(scores_t)) / scale
  optimizer = optax.lbfgs(memory_size=memory_size, linesearch=None)   # Unit steps.
  u0 = jnp.zeros((num_tokens,), jnp.float32)
  warm_start_usable = jnp.array(True)
  if warm_start_iters:
    alpha0, warm_start_usable = _entropic_potentials(scores_t, warm_start_iters)
    u0 = alpha0 / scale

  def evaluate(u, best, best_value):   # best = (alpha, support) of the lowest F so far.
    alpha = scale * u
    value, grad, support = _semi_dual_at(alpha, scores_t, column_mass, capacity)
    best, best_value = _keep_lower((alpha, support), value, best, best_value)
    return scale * grad, value, best, best_value

  def unit_step(i, carry):
    u, opt_state, best, best_value, start_value = carry
    grad, value, best, best_value = evaluate(u, best, best_value)
    start_value = jnp.where(i == 0, value, start_value)       # Step 0 evaluates the start.
    updates, opt_state = optimizer.update(grad, opt_state, u)
    return u + jnp.clip(updates, -max_move, max_move), opt_state, best, best_value, start_value

  no_support = jnp.zeros((scores_t.shape[0], capacity), jnp.int32)
  inf = jnp.array(jnp.inf, jnp.float32)
  init = (u0, optimizer.init(u0), (scale * u0, no_support), inf, inf)
  u, _, best, best_value, start_value = jax.lax.fori_loop(0, num_steps, unit_step, init)
  _, _, (alpha, support), best_value = evaluate(u, best, best_value)   # The last iterate.
  fell_back = jnp.logical_or(~warm_start_usable, (num_steps > 0) & (best_value >= start_value))
  return alpha, support, fell_back


def sparsity_constrained(scores: jax.Array, capacity: int, num_steps: int = 10,
                         memory_size: int = 3, warm_start_iters: int = 0) -> jax.Array:
  """The plan of sparsity_constrained_with_info (see there), without the solver's report."""
  return sparsity_constrained_with_info(scores, capacity, num_steps, memory_size,
                                        warm_start_iters)[0]


class SolverReport(NamedTuple):
  """How the sparsity-constrained solver did on one group (router metrics, moe.py).

  row_error: mean over tokens of |row sum of the plan - 1| (0 when every row constraint holds).
  fell_back: the solver returned its start (see _solve_semi_dual), float32 1.0 or 0.0.
  """
  row_error: jax.Array
  fell_back: jax.Array


def _check_solver_arguments(num_tokens: int, capacity: int, num_steps: int, memory_size: int,
                            warm_start_iters: int) -> None:
  """sparsity_constrained_with_info's arguments, each failing with what it needs."""
  if not 1 <= capacity <= num_tokens:
    raise ValueError(f'sparsity_constrained needs 1 <= capacity <= T={num_tokens}, got {capacity}.')
  if num_steps < 0:
    raise ValueError(f'sparsity_constrained needs num_steps >= 0, got {num_steps}.')
  if memory_size < 1:
    raise ValueError(f'sparsity_constrained needs memory_size >= 1, got {memory_size}.')
  if warm_start_iters < 0:
    raise ValueError(f'sparsity_constrained needs warm_start_iters >= 0, got {warm_start_iters}.')


def sparsity_constrained_with_info(scores: jax.Array, capacity: int, num_steps: int = 10,
                                   memory_size: int = 3, warm_start_iters: int = 0):
  """Sparsity-constrained OT plan (Liu et al. 2022) for routing, via its semi-dual.

  Primal (eq. sparsity--constrained-objective, a = 1_T, b = (T/E) 1_E):
    max_Pi <Pi, S> - 1/2 ||Pi||_F^2  s.t. Pi >= 0, Pi 1_E = a, Pi^T 1_T = b, ||Pi[:, e]||_0 <= C.
  Dualising only the row constraint with potentials alpha (T,) gives the semi-dual
    F(alpha) = <alpha, a>
               + sum_e max_{p in b_e Simplex, ||p||_0 <= C} <p, S[:, e] - alpha> - 1/2||p||^2,
  a convex function (a maximum of affine functions of alpha) whose inner maximiser is a sparse
  simplex projection of S[:, e] - alpha. Every column of the recovered plan therefore has at most C
  nonzeros and sums to T/E exactly; the rows sum to 1 only as far as the solver converged (and
  cannot all do so when E*C < T). F is not smooth (the top-C support jumps), so no step rule
  guarantees descent; we run a fixed number of unit L-BFGS steps (optax) on rescaled potentials,
  keep the best potentials seen, and use F's gradient in closed form.

  Why this solver: under vmap over routing groups, data-dependent control flow runs every branch
  for every group until the slowest group is done, so a line search (optax.lbfgs's default zoom,
  or backtracking) costs several projections per step; a unit L-BFGS step costs one, and keeping
  the best iterate stands in for the line search's safeguard, and on the same semi-dual unit steps
  reach about the mean |row sum - 1| of backtracking steps, far below that of alpha = 0 (plain
  Expert Choice on S). The step scale (see _solve_semi_dual) matters for nearly
  uniform scores: without it, neither unit steps nor backtracking moved from alpha = 0 for logits
  of std 0.01.

  Gradients: the returned plan is the sparse projection of S - alpha* with the solved potentials
  alpha* held constant (stop-gradient), so it is differentiable in S on the columns' support; the
  solver loop itself carries no gradient.

  Args:
    scores: (T, E) utilities; the paper uses softmax(X W).
    capacity: C, maximum nonzeros per expert column; 1 <= C <= T.
    num_steps: fixed number of L-BFGS steps on the semi-dual (0 gives Expert Choice on `scores`).
    memory_size: number of curvature pairs L-BFGS keeps.
    warm_start_iters: 0 starts the solver at alpha = 0; n > 0 starts it at the potentials of n
      Sinkhorn iterations of entropic OT (_entropic_potentials), which pays off when E*C <= T
      (c <= 1): at c = 1, 5 steps from 10 Sinkhorn iterations take less time than 10 steps from
      0 and end nearer to feasible rows, on a trained tiny router's scores
      (bench/data/router_logits_tiny.npz) and on most Gaussian-logit cases, though not on nearly
      uniform scores at the B/32 shape. At c = 2 (tokens split between experts) the entropic
      start is worse than 0. Numbers: bench/results/sparsity_solver.json.
  Returns:
    (T, E) float32 plan with at most `capacity` nonzeros per column, and its SolverReport.
  """
  num_tokens, num_experts = scores.shape
  _check_solver_arguments(num_tokens, capacity, num_steps, memory_size, warm_start_iters)
  scores_t = scores.astype(jnp.float32).T                # (E, T)
  column_mass = num_tokens / num_experts
  alpha, support, fell_back = _solve_semi_dual(
      jax.lax.stop_gradient(scores_t), column_mass, capacity, num_steps, memory_size,
      warm_start_iters)   # Carries no gradient.
  plan_t = sparse_plan(scores_t, alpha, support, column_mass)
  row_error = jnp.mean(jnp.abs(jnp.sum(jax.lax.stop_gradient(plan_t), axis=0) - 1.0))
  return plan_t.T, SolverReport(row_error, fell_back.astype(jnp.float32))
