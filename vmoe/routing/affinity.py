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


def _sparse_simplex_projection(z: jax.Array, mass: float, k: int):
  """Projects each row of z (E, T) onto {p >= 0, sum(p) = mass, ||p||_0 <= k}.

  Solves max_p <p, z> - 1/2 ||p||^2 under those constraints: keep the k largest entries of the row
  and project them onto the simplex of the given mass (Kyrillidis et al. 2013, "Sparse projections
  onto the simplex"); the usual sort-based simplex projection applies since top_k is sorted.

  Returns:
    values (E, k) of the kept entries (>= 0, each row summing to `mass`) and their indices (E, k).
  """
  top, index = jax.lax.top_k(z, k)                       # (E, k), sorted in decreasing order.
  excess = jnp.cumsum(top, axis=-1) - mass              # (E, k)
  rank = jnp.arange(1, k + 1, dtype=z.dtype)
  support = jnp.sum(top - excess / rank > 0, axis=-1)   # (E,) size of the positive support, >= 1.
  tau = jnp.take_along_axis(excess, support[:, None] - 1, axis=-1) / support[:, None]
  return jnp.maximum(top - tau, 0.0), index


def _semi_dual_value_and_grad(alpha, scores_t, column_mass, capacity):
  """The semi-dual F(alpha) and its gradient 1 - (row sums of the plan at alpha), from one projection.

  F is a maximum of functions affine in alpha, so by Danskin's theorem its gradient is the
  gradient of the maximising term: 1_T minus the row sums of the sparse plan. Computing it this way
  costs one scatter-add instead of a backward pass through top_k and the simplex projection.
  """
  shifted = scores_t - alpha[None, :]                    # (E, T)
  values, index = _sparse_simplex_projection(shifted, column_mass, capacity)
  kept = jnp.take_along_axis(shifted, index, axis=-1)    # (E, C)
  value = jnp.sum(alpha) + jnp.sum(values * kept - 0.5 * values**2)
  row_sums = jnp.zeros_like(alpha).at[index.reshape(-1)].add(values.reshape(-1))
  return value, 1.0 - row_sums


LINESEARCHES = {
    'backtracking': lambda: optax.scale_by_backtracking_linesearch(
        max_backtracking_steps=8, store_grad=True),
    'zoom': lambda: optax.scale_by_zoom_linesearch(  # optax.lbfgs's default.
        max_linesearch_steps=20, initial_guess_strategy='one'),
}


def _solve_semi_dual(scores_t, column_mass, capacity, num_steps, memory_size, linesearch):
  """Potentials alpha (T,) after num_steps L-BFGS steps on the semi-dual of scores_t (E, T): the
  best (lowest F) iterate seen, starting from alpha = 0."""
  value_and_grad = functools.partial(
      _semi_dual_value_and_grad, scores_t=scores_t, column_mass=column_mass, capacity=capacity)

  @jax.custom_vjp
  def semi_dual(alpha):
    return value_and_grad(alpha)[0]

  semi_dual.defvjp(value_and_grad, lambda grad, cotangent: (cotangent * grad,))

  optimizer = optax.lbfgs(memory_size=memory_size, linesearch=LINESEARCHES[linesearch]())
  value_and_grad_from_state = optax.value_and_grad_from_state(semi_dual)

  def step(_, carry):
    alpha, opt_state, best_alpha, best_value = carry
    value, grad = value_and_grad_from_state(alpha, state=opt_state)
    updates, opt_state = optimizer.update(
        grad, opt_state, alpha, value=value, grad=grad, value_fn=semi_dual)
    alpha = optax.apply_updates(alpha, updates)
    # A line search that finds no decrease still takes its last trial step, so keep the best
    # potentials seen (the line search stores the value at the new point).
    new_value = optax.tree.get(opt_state, 'value')
    better = new_value < best_value
    return (alpha, opt_state, jnp.where(better, alpha, best_alpha),
            jnp.where(better, new_value, best_value))

  alpha0 = jnp.zeros(scores_t.shape[1:], jnp.float32)
  init = (alpha0, optimizer.init(alpha0), alpha0, semi_dual(alpha0))
  return jax.lax.fori_loop(0, num_steps, step, init)[2]


def sparsity_constrained(scores: jax.Array, capacity: int, num_steps: int = 10,
                         memory_size: int = 3, linesearch: str = 'backtracking') -> jax.Array:
  """Sparsity-constrained OT plan (Liu et al. 2022) for routing, via its semi-dual.

  Primal (eq. sparsity--constrained-objective, a = 1_T, b = (T/E) 1_E):
    max_Pi <Pi, S> - 1/2 ||Pi||_F^2  s.t. Pi >= 0, Pi 1_E = a, Pi^T 1_T = b, ||Pi[:, e]||_0 <= C.
  Dualising only the row constraint with potentials alpha (T,) gives the semi-dual
    F(alpha) = <alpha, a> + sum_e max_{p in b_e Simplex, ||p||_0 <= C} <p, S[:, e] - alpha> - 1/2||p||^2,
  a convex function (a maximum of affine functions of alpha) whose inner maximiser is a sparse
  simplex projection of S[:, e] - alpha. Every column of the recovered plan therefore has at most C
  nonzeros and sums to T/E exactly; the rows sum to 1 only as far as the solver converged (and
  cannot all do so when E*C < T). F is not smooth (the top-C support jumps), so fixed-step gradient
  methods overshoot; we run a fixed number of L-BFGS steps (optax) with a backtracking line search,
  keeping the best potentials seen, and F's gradient in closed form.

  Why this solver: under vmap over routing groups, data-dependent control flow runs every branch
  for every group until the slowest group is done, so optax.lbfgs's default zoom line search
  (nested loops and conds per step) is expensive. Measured on this CPU (`python
  bench/sparsity_solver.py`, 8 groups, bench/results/sparsity_solver.json): against the default
  (zoom, memory 10, 20 steps), 10 backtracking steps with memory 3 take 0.35-0.42x the time and
  reach a mean |row sum - 1| of 0.11 / 0.10 at the tiny config's shapes (T=272, E=8, c=1 / 2;
  default 0.07 / 0.10) and 0.11 / 0.09 at B/32's (T=392, E=32; default 0.13 / 0.09), from 0.36 /
  0.21 and 0.51 / 0.33 at alpha = 0, which is plain Expert Choice on S.

  Gradients: the returned plan is the sparse projection of S - alpha* with the solved potentials
  alpha* held constant (stop-gradient), so it is differentiable in S on the columns' support; the
  solver loop itself carries no gradient.

  Args:
    scores: (T, E) utilities; the paper uses softmax(X W).
    capacity: C, maximum nonzeros per expert column; 1 <= C <= T.
    num_steps: fixed number of L-BFGS steps on the semi-dual (0 gives Expert Choice on `scores`).
    memory_size: number of curvature pairs L-BFGS keeps.
    linesearch: 'backtracking' (Armijo, halving, at most 8 trials) or 'zoom' (optax's default
      strong-Wolfe search; slower under vmap, kept for the solver benchmark).
  Returns:
    (T, E) float32 plan with at most `capacity` nonzeros per column.
  """
  num_tokens, num_experts = scores.shape
  if not 1 <= capacity <= num_tokens:
    raise ValueError(f'sparsity_constrained needs 1 <= capacity <= T={num_tokens}, got {capacity}.')
  if num_steps < 0:
    raise ValueError(f'sparsity_constrained needs num_steps >= 0, got {num_steps}.')
  if memory_size < 1:
    raise ValueError(f'sparsity_constrained needs memory_size >= 1, got {memory_size}.')
  if linesearch not in LINESEARCHES:
    raise ValueError(f'unknown line search {linesearch!r}; valid: {", ".join(LINESEARCHES)}.')
  scores_t = scores.astype(jnp.float32).T                # (E, T)
  column_mass = num_tokens / num_experts
  alpha = _solve_semi_dual(jax.lax.stop_gradient(scores_t), column_mass, capacity, num_steps,
                           memory_size, linesearch)   # The solver loop carries no gradient.
  values, index = _sparse_simplex_projection(
      scores_t - jax.lax.stop_gradient(alpha)[None, :], column_mass, capacity)
  plan_t = jnp.zeros_like(scores_t).at[jnp.arange(num_experts)[:, None], index].set(values)
  return plan_t.T
