"""The sparsity-constrained OT solver with a line search: the baseline of the router's unit steps.

vmoe.routing.affinity.sparsity_constrained takes unit L-BFGS steps on the semi-dual, one sparse
projection each. Here the same semi-dual, on the same rescaled potentials (affinity.step_scale)
from alpha = 0, is solved with optax's line searches, which try several step lengths, each one
more projection, and under vmap every group waits for the slowest. bench/sparsity_solver.py
times both; only the benchmark needs this one, so it lives here.
"""
import jax
import jax.numpy as jnp
import optax

from vmoe.routing import affinity

LINESEARCHES = {
    'backtracking': lambda: optax.scale_by_backtracking_linesearch(   # Armijo, halving.
        max_backtracking_steps=8, store_grad=True),
    'zoom': lambda: optax.scale_by_zoom_linesearch(   # optax.lbfgs's default (strong Wolfe).
        max_linesearch_steps=20, initial_guess_strategy='one'),
}


def solve(scores_t, column_mass, capacity, num_steps, memory_size, linesearch):
  """Potentials alpha (T,) of the best (lowest F) iterate of num_steps L-BFGS steps with
  `linesearch` from alpha = 0; scores_t (E, T). F is not smooth, so a line search that finds no
  decrease still moves: keeping the best iterate, as the router's solver does, keeps the result
  from ending above the start."""
  scale = affinity.step_scale(scores_t, warm_start=False)

  def value_and_grad(u):   # F and its gradient in u = alpha / scale.
    value, grad = affinity.semi_dual_value_and_grad(scale * u, scores_t, column_mass, capacity)
    return value, scale * grad

  @jax.custom_vjp   # The line search differentiates F: use its closed-form gradient.
  def semi_dual(u):
    return value_and_grad(u)[0]

  semi_dual.defvjp(value_and_grad, lambda grad, cotangent: (cotangent * grad,))
  optimizer = optax.lbfgs(memory_size=memory_size, linesearch=LINESEARCHES[linesearch]())
  value_and_grad_from_state = optax.value_and_grad_from_state(semi_dual)

  def step(_, carry):
    u, opt_state, best_u, best_value = carry
    value, grad = value_and_grad_from_state(u, state=opt_state)   # Stored by the line search.
    updates, opt_state = optimizer.update(
        grad, opt_state, u, value=value, grad=grad, value_fn=semi_dual)
    u = optax.apply_updates(u, updates)
    value = optax.tree.get(opt_state, 'value')   # F at the new u, stored by the line search.
    lower = value < best_value
    return u, opt_state, jnp.where(lower, u, best_u), jnp.where(lower, value, best_value)

  u0 = jnp.zeros((scores_t.shape[1],), jnp.float32)
  best_u = jax.lax.fori_loop(0, num_steps, step, (u0, optimizer.init(u0), u0, semi_dual(u0)))[2]
  return scale * best_u


def sparsity_constrained(scores: jax.Array, capacity: int, num_steps: int, memory_size: int,
                         linesearch: str) -> jax.Array:
  """(T, E) plan as affinity.sparsity_constrained makes it from alpha = 0, with `linesearch`."""
  if linesearch not in LINESEARCHES:
    raise ValueError(f'unknown line search {linesearch!r}; valid: {", ".join(LINESEARCHES)}.')
  scores_t = scores.astype(jnp.float32).T                 # (E, T)
  column_mass = scores.shape[0] / scores.shape[1]
  alpha = solve(jax.lax.stop_gradient(scores_t), column_mass, capacity, num_steps, memory_size,
                linesearch)
  support = jax.lax.top_k(scores_t - alpha[None, :], capacity)[1]
  return affinity.sparse_plan(scores_t, alpha, support, column_mass).T
