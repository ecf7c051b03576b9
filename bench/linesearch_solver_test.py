"""The line-search baseline solves the router's semi-dual: it balances rows and never ends above
its start."""
import jax
import jax.numpy as jnp
import pytest

from bench import linesearch_solver
from vmoe.routing import affinity


def gaussian_scores(seed, num_tokens, num_experts, std):
  logits = std * jax.random.normal(jax.random.PRNGKey(seed), (num_tokens, num_experts))
  return jax.nn.softmax(logits)


def row_error(plan):
  return float(jnp.mean(jnp.abs(plan.sum(axis=1) - 1)))


@pytest.mark.parametrize('linesearch', sorted(linesearch_solver.LINESEARCHES))
def test_line_searches_balance_nearly_uniform_scores(linesearch):
  # Logits of std 0.01 (a router at initialisation), T = 272, E = 8, C = 34: with the step scale
  # the line searches leave alpha = 0 (without it 10 backtracking steps did not: row error 0.500
  # at 0 and 10 steps).
  scores = gaussian_scores(8, 272, 8, 0.01)
  start = affinity.sparsity_constrained(scores, 34, num_steps=0)
  solved = linesearch_solver.sparsity_constrained(scores, 34, 10, 3, linesearch)
  assert row_error(solved) < 0.25 * row_error(start), (row_error(solved), row_error(start))
  # Columns hold at most C entries summing to T / E = 34, as the router's plans do.
  assert int(jnp.max((solved > 0).sum(axis=0))) <= 34
  assert jnp.allclose(solved.sum(axis=0), 34.0, rtol=1e-5)


@pytest.mark.parametrize('linesearch', sorted(linesearch_solver.LINESEARCHES))
def test_never_ends_above_its_start(linesearch):
  # A line search that finds no decrease still moves; the best iterate is kept, so F at the result
  # never exceeds F(0) (plain expert choice) and more steps never end higher.
  scores_t = gaussian_scores(1, 32, 4, 0.25).T
  semi_dual = lambda alpha: float(affinity.semi_dual_value_and_grad(alpha, scores_t, 8.0, 8)[0])
  values = [semi_dual(linesearch_solver.solve(scores_t, 8.0, 8, steps, 3, linesearch))
            for steps in (0, 1, 5, 20)]
  assert values == sorted(values, reverse=True), values
  assert values[-1] < values[0]


def test_unknown_line_search_fails_listing_the_valid_ones():
  with pytest.raises(ValueError, match="unknown line search 'wolfe'; valid: backtracking, zoom"):
    linesearch_solver.sparsity_constrained(jnp.ones((8, 2)) / 2, 2, 1, 3, 'wolfe')
