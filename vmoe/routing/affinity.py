"""Token--expert affinity matrices: logits or scores (T, E) -> scores (T, E).

Axis letters: t = token (T tokens of one routing group), e = expert (E experts), k = kept entries.

Three affinities of the paper (section "MoE layers instantiated by different routers"):
  softmax               Pi_softmax = softmax(X W), rows sum to 1               (eq. softmax-affinity)
  sinkhorn              Pi_ent: entropic OT, rows sum to 1, columns to T/E      (eq. sinkhorn-objective)
  sparsity_constrained  Pi_sparse: quadratic OT on softmax scores with at most C
                        nonzeros per expert column                              (eq. sparsity-constrained)
All are pure functions of one group; vmap them over groups.
"""
import functools

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
  f (T,) and g (E,) updated alternately for a fixed number of iterations. The last update is the
  row one, so rows sum to 1 exactly and columns to T/E up to the convergence error.

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

  def row_potential(g):  # f such that each row of exp(logits + f + g) sums to 1.
    return -jax.nn.logsumexp(logits + g[None, :], axis=1)

  def update(_, g):
    f = row_potential(g)
    return log_col_sum - jax.nn.logsumexp(logits + f[:, None], axis=0)

  g = jax.lax.fori_loop(0, num_iters, update, jnp.zeros((num_experts,), jnp.float32))
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


def _semi_dual_value_and_grad(alpha, scores_t, column_mass, capacity):
  """F(alpha) and its gradient (see _semi_dual_at)."""
  return _semi_dual_at(alpha, scores_t, column_mass, capacity)[:2]


# Line searches for the semi-dual's L-BFGS steps. 'none' takes the unit L-BFGS step: one projection
# per step, where a line search adds one per trial (and under vmap every group waits for the slowest).
LINESEARCHES = {
    'none': None,
    'backtracking': lambda: optax.scale_by_backtracking_linesearch(
        max_backtracking_steps=8, store_grad=True),
    'zoom': lambda: optax.scale_by_zoom_linesearch(  # optax.lbfgs's default.
        max_linesearch_steps=20, initial_guess_strategy='one'),
}


def _keep_lower(candidate, value, best, best_value):
  """The candidate (a pytree) and its value if the value is lower than best_value, else the best."""
  lower = value < best_value
  best = jax.tree.map(lambda c, b: jnp.where(lower, c, b), candidate, best)
  return best, jnp.where(lower, value, best_value)


# Warm start: the temperature of the entropic start, relative to std(S), and the first L-BFGS step
# from it, relative to the step from alpha = 0. Chosen on a grid (temperature 0.03-1, step
# 0.03-1, 5-30 Sinkhorn iterations) for the lowest mean |row sum - 1| after 5 steps on the scores
# of trained tiny sparsity_ec routers and on softmax of N(0, std) logits (std 0.01-10, the tiny
# and B/32 shapes); `bench/sparsity_solver.py` measures the result.
WARM_START_TEMPERATURE = 0.3
WARM_START_STEP = 0.1


def _entropic_potentials(scores_t, num_iters):
  """Starting potentials alpha (T,) for the semi-dual: the token potentials of entropic OT.

  When E*C <= T the sparse plan is nearly an assignment (measured at T=272, E=8, C=34: 270-272
  of the optimum's 272 rows hold a single entry, of 0.99-1.01), and its potentials are the prices
  of that assignment, which entropic OT with a small temperature approximates: Sinkhorn on S / eps
  (rows 1, columns T/E) with eps = WARM_START_TEMPERATURE * std(S), and alpha = -eps f for its
  token potentials f. Iterated in the scaling domain (two matrix-vector products per iteration
  instead of two logsumexps: 7x faster on this CPU) on K = exp((S - max_e S) / eps), whose
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


def _solve_semi_dual(scores_t, column_mass, capacity, num_steps, memory_size, linesearch,
                     warm_start_iters=0):
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
  scores' spread, and is unchanged for well-spread scores. Without a line search, each step is
  also clipped to move no potential by more than 1 + range(S) (no optimum is farther), a guard
  against the blow-ups that curvature pairs across a kink of F can cause. From a warm start the
  optimum is near, so s is WARM_START_STEP times smaller (the first step is shorter).
  F is not smooth, so neither unit steps nor a line search that finds no decrease guarantee
  descent; keeping the best iterate makes the result never worse than the start (Expert Choice
  from alpha = 0).
  Without a line search the solver evaluates F num_steps + 1 times (one projection each) and
  keeps the best iterate's support, so the plan needs no further top_k.
  """
  num_tokens = scores_t.shape[1]
  scale = jnp.minimum(1.0, 0.5 * jnp.std(scores_t) * jnp.sqrt(num_tokens))
  if warm_start_iters:
    scale = WARM_START_STEP * scale
  max_move = (1.0 + jnp.max(scores_t) - jnp.min(scores_t)) / scale

  def value_and_grad(u):   # F and its gradient in u = alpha / scale.
    value, grad = _semi_dual_value_and_grad(scale * u, scores_t, column_mass, capacity)
    return value, scale * grad

  @jax.custom_vjp
  def semi_dual(u):
    return value_and_grad(u)[0]

  semi_dual.defvjp(value_and_grad, lambda grad, cotangent: (cotangent * grad,))

  make_linesearch = LINESEARCHES[linesearch]
  optimizer = optax.lbfgs(memory_size=memory_size,
                          linesearch=make_linesearch() if make_linesearch else None)
  u0 = jnp.zeros((num_tokens,), jnp.float32)
  warm_start_usable = jnp.array(True)
  if warm_start_iters:
    alpha0, warm_start_usable = _entropic_potentials(scores_t, warm_start_iters)
    u0 = alpha0 / scale
  fell_back = lambda best_value, start_value: jnp.logical_or(
      ~warm_start_usable, (num_steps > 0) & (best_value >= start_value))

  if make_linesearch:
    value_and_grad_from_state = optax.value_and_grad_from_state(semi_dual)

    def search_step(_, carry):
      u, opt_state, best_u, best_value = carry
      value, grad = value_and_grad_from_state(u, state=opt_state)   # Stored by the line search.
      updates, opt_state = optimizer.update(
          grad, opt_state, u, value=value, grad=grad, value_fn=semi_dual)
      u = optax.apply_updates(u, updates)
      best_u, best_value = _keep_lower(u, optax.tree.get(opt_state, 'value'), best_u, best_value)
      return u, opt_state, best_u, best_value

    start_value = semi_dual(u0)
    init = (u0, optimizer.init(u0), u0, start_value)
    _, _, best_u, best_value = jax.lax.fori_loop(0, num_steps, search_step, init)
    alpha = scale * best_u
    return (alpha, jax.lax.top_k(scores_t - alpha[None, :], capacity)[1],
            fell_back(best_value, start_value))

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
  return alpha, support, fell_back(best_value, start_value)


def sparsity_constrained(scores: jax.Array, capacity: int, num_steps: int = 10,
                         memory_size: int = 3, linesearch: str = 'none',
                         warm_start_iters: int = 0) -> jax.Array:
  """The plan of sparsity_constrained_with_info (see there), without the solver's report."""
  return sparsity_constrained_with_info(scores, capacity, num_steps, memory_size, linesearch,
                                        warm_start_iters)[0]


class SolverReport(NamedTuple):
  """How the sparsity-constrained solver did on one group (router metrics, moe.py).

  row_error: mean over tokens of |row sum of the plan - 1| (0 when every row constraint holds).
  fell_back: the solver returned its start (see _solve_semi_dual), float32 1.0 or 0.0.
  """
  row_error: jax.Array
  fell_back: jax.Array


def sparsity_constrained_with_info(scores: jax.Array, capacity: int, num_steps: int = 10,
                                   memory_size: int = 3, linesearch: str = 'none',
                                   warm_start_iters: int = 0):
  """Sparsity-constrained OT plan (Liu et al. 2022) for routing, via its semi-dual.

  Primal (eq. sparsity--constrained-objective, a = 1_T, b = (T/E) 1_E):
    max_Pi <Pi, S> - 1/2 ||Pi||_F^2  s.t. Pi >= 0, Pi 1_E = a, Pi^T 1_T = b, ||Pi[:, e]||_0 <= C.
  Dualising only the row constraint with potentials alpha (T,) gives the semi-dual
    F(alpha) = <alpha, a> + sum_e max_{p in b_e Simplex, ||p||_0 <= C} <p, S[:, e] - alpha> - 1/2||p||^2,
  a convex function (a maximum of affine functions of alpha) whose inner maximiser is a sparse
  simplex projection of S[:, e] - alpha. Every column of the recovered plan therefore has at most C
  nonzeros and sums to T/E exactly; the rows sum to 1 only as far as the solver converged (and
  cannot all do so when E*C < T). F is not smooth (the top-C support jumps), so no step rule
  guarantees descent; we run a fixed number of unit L-BFGS steps (optax) on rescaled potentials,
  keep the best potentials seen, and use F's gradient in closed form.

  Why this solver: under vmap over routing groups, data-dependent control flow runs every branch
  for every group until the slowest group is done, so a line search (optax.lbfgs's default zoom,
  or backtracking) costs several projections per step; a unit L-BFGS step costs one, and keeping
  the best iterate stands in for the line search's safeguard. Measured on this CPU (`python
  bench/sparsity_solver.py`: 8 groups, softmax of N(0, 1) logits; bench/results/
  sparsity_solver.json), 10 unit steps from 0 take 4.9 / 9.4 ms at the tiny config's shapes
  (T=272, E=8, c=1 / 2) and 9.3 / 15.9 ms at B/32's (T=392, E=32): 0.41 / 0.48 / 0.40 / 0.43x
  the time of 10 backtracking steps, for a mean |row sum - 1| of 0.114 / 0.101 / 0.097 / 0.082
  against backtracking's 0.111 / 0.103 / 0.100 / 0.082, and 0.36 / 0.21 / 0.51 / 0.33 at
  alpha = 0 (plain Expert Choice on S). The step scale (see _solve_semi_dual) matters for nearly
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
    linesearch: 'none' (unit steps, the default), 'backtracking' (Armijo, halving, at most 8
      trials) or 'zoom' (optax's default strong-Wolfe search); the line searches are slower under
      vmap and kept for the solver benchmark.
    warm_start_iters: 0 starts the solver at alpha = 0; n > 0 starts it at the potentials of n
      Sinkhorn iterations of entropic OT (_entropic_potentials), which pays off when E*C <= T
      (c <= 1). Measured (bench/results/sparsity_solver.json): at c = 1, 5 steps from 10 Sinkhorn
      iterations take 0.57-0.65x the time of 10 steps from 0, for a mean |row sum - 1| of 0.050
      against 0.098 on a trained tiny router's scores (bench/data/router_logits_tiny.npz),
      0.027-0.028 against 0.034 / 0.114 / 0.054 on softmax of N(0, std) logits with std 0.1 / 1 / 3
      at the tiny shape, and 0.064 / 0.078 against 0.097 / 0.144 (std 1 / 3) at B/32's, but 0.110
      against 0.076 for nearly uniform scores there (std 0.1). At c = 2 (tokens split between
      experts) the entropic start is worse than 0 (0.13-0.17 against 0.08-0.10 at 10 steps).
  Returns:
    (T, E) float32 plan with at most `capacity` nonzeros per column, and its SolverReport.
  """
  num_tokens, num_experts = scores.shape
  if not 1 <= capacity <= num_tokens:
    raise ValueError(f'sparsity_constrained needs 1 <= capacity <= T={num_tokens}, got {capacity}.')
  if num_steps < 0:
    raise ValueError(f'sparsity_constrained needs num_steps >= 0, got {num_steps}.')
  if memory_size < 1:
    raise ValueError(f'sparsity_constrained needs memory_size >= 1, got {memory_size}.')
  if warm_start_iters < 0:
    raise ValueError(f'sparsity_constrained needs warm_start_iters >= 0, got {warm_start_iters}.')
  if linesearch not in LINESEARCHES:
    raise ValueError(f'unknown line search {linesearch!r}; valid: {", ".join(LINESEARCHES)}.')
  scores_t = scores.astype(jnp.float32).T                # (E, T)
  column_mass = num_tokens / num_experts
  alpha, support, fell_back = _solve_semi_dual(
      jax.lax.stop_gradient(scores_t), column_mass, capacity, num_steps, memory_size, linesearch,
      warm_start_iters)   # Carries no gradient.
  # The sparse projection at alpha without a second top_k: the support is top_k's at the same
  # alpha, in decreasing order, so the gathered entries are sorted as _simplex_of_sorted needs.
  kept = jnp.take_along_axis(scores_t - jax.lax.stop_gradient(alpha)[None, :], support, axis=-1)
  values = _simplex_of_sorted(kept, column_mass)
  plan_t = jnp.zeros_like(scores_t).at[jnp.arange(num_experts)[:, None], support].set(values)
  row_error = jnp.mean(jnp.abs(jnp.sum(jax.lax.stop_gradient(plan_t), axis=0) - 1.0))
  return plan_t.T, SolverReport(row_error, fell_back.astype(jnp.float32))
