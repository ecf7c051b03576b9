"""Speed and accuracy of the sparsity-constrained OT solver under vmap over routing groups.

  python -m bench.sparsity_solver --logits bench/data/router_logits_tiny.npz \
      --out bench/results/sparsity_solver.json

vmoe.routing.affinity.sparsity_constrained runs a fixed number of L-BFGS steps on the semi-dual,
from potentials 0 or from the potentials of a few Sinkhorn iterations of entropic OT (the warm
start, the configs' preset at c <= 1). Routers vmap it over the routing groups, and under vmap
data-dependent control flow (a line search's loops and conds) runs for every group until the
slowest one is done, every branch evaluated. This benchmark measures, on the routing shapes this
project trains,
  tiny   8 groups of 272 tokens (the tiny config's 4 groups of a 64-image batch, twice), E = 8
  b32    8 groups of 400 tokens (8 images of 50 tokens: 49 patches and the class token), E = 32
at c = 1 and 2 (C = round(c T / E)), for scores softmax(logits) with logits N(0, std^2) for each
--logit-stds, and with the recorded logits of trained routers (--logits, files written by
bench/router_logits.py; their own shape), these solvers:
  start 'zero', steps 0 (plain Expert Choice on the scores), --steps with unit steps (the router's)
  start 'entropic' (--warm-start Sinkhorn iterations), --warm-steps with unit steps
  start 'zero', the line searches of bench/linesearch_solver.py (backtracking with memory 3,
  optax.lbfgs's zoom with memory 10) at --linesearch-steps, on the Gaussian logits of std
  --linesearch-std only.
Each row reports the median milliseconds of the jitted, vmapped solve and the plan's quality: the
mean |row sum - 1| (the constraint the solver works on; columns are exact) and the fraction of
tokens no expert took.
"""
import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from base import atomic
from bench import linesearch_solver
from bench import moe_layer
from vmoe.routing import affinity
from vmoe.routing import allocation

# Groups, tokens per group, experts.
SHAPES = {'tiny': (8, 272, 8), 'b32': (8, moe_layer.GROUP_SIZES[0], 32)}
# L-BFGS memory per line search: the router's (unit steps, memory 3), the router's before
# 2026-11-23 evening (backtracking, memory 3), and optax.lbfgs's defaults (zoom, memory 10).
MEMORY_SIZE = {'none': 3, 'backtracking': 3, 'zoom': 10}


def sources(args) -> list[tuple[str, jax.Array, bool]]:
  """(name, logits (G, T, E), with line searches?) of every problem set: Gaussian logits per
  shape and std, then the recorded files."""
  out = []
  for shape_name in args.shapes:
    for std in args.logit_stds:
      shape = SHAPES[shape_name]
      out.append((f'{shape_name} N(0, {std:g}^2)',
                  std * jax.random.normal(jax.random.PRNGKey(args.seed), shape),
                  std == args.linesearch_std))
  for path in args.logits:
    with np.load(path) as recorded:
      out.append((f'{recorded["run"]} step {int(recorded["step"])} ({os.path.basename(path)})',
                  jnp.asarray(recorded['logits'], jnp.float32), False))
  return out


def solvers(args, linesearches: bool) -> list[dict]:
  """The solver settings to measure on one problem set (see the module docstring)."""
  rows = [dict(start='zero', linesearch='none', steps=n) for n in [0] + args.steps]
  rows += [dict(start='entropic', linesearch='none', steps=n) for n in args.warm_steps]
  if linesearches:
    rows += [dict(start='zero', linesearch=search, steps=n)
             for search in linesearch_solver.LINESEARCHES for n in args.linesearch_steps]
  return rows


def measure(source, logits, capacity_factor, solver, args) -> dict:
  num_groups, num_tokens, num_experts = logits.shape
  capacity = allocation.compute_capacity(num_tokens, num_experts, capacity_factor)
  scores = jax.nn.softmax(logits, axis=-1)
  warm_start_iters = args.warm_start if solver['start'] == 'entropic' else 0
  linesearch, steps = solver['linesearch'], solver['steps']
  if linesearch == 'none':   # The router's solver.
    solve_group = lambda s: affinity.sparsity_constrained(
        s, capacity, steps, memory_size=MEMORY_SIZE[linesearch], warm_start_iters=warm_start_iters)
  else:
    solve_group = lambda s: linesearch_solver.sparsity_constrained(
        s, capacity, steps, MEMORY_SIZE[linesearch], linesearch)
  solve = jax.jit(jax.vmap(solve_group))
  plans = solve(scores)
  return {
      'source': source, 'groups': num_groups, 'tokens': num_tokens, 'experts': num_experts,
      'capacity_factor': capacity_factor, 'capacity': capacity, **solver,
      'warm_start_iters': warm_start_iters, 'memory_size': MEMORY_SIZE[linesearch],
      'ms': round(moe_layer.time_ms(solve, scores, warmup=args.warmup, repeats=args.repeats), 2),
      'row_error': round(float(jnp.mean(jnp.abs(plans.sum(-1) - 1))), 4),
      'dropped': round(float(jnp.mean((plans > 0).sum(-1) == 0)), 4),
  }


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  numbers = lambda kind: lambda text: [kind(x) for x in text.split(',') if x]
  parser.add_argument('--shapes', type=numbers(str), default=list(SHAPES))
  parser.add_argument('--logit-stds', type=numbers(float), default=[0.1, 1.0, 3.0])
  parser.add_argument('--logits', type=numbers(str), default=[],
                      help='recorded router logits (bench/router_logits.py), comma-separated')
  parser.add_argument('--capacities', type=numbers(float), default=[1.0, 2.0])
  parser.add_argument('--steps', type=numbers(int), default=[5, 10, 20])
  parser.add_argument('--warm-start', type=int, default=10, help='Sinkhorn iterations')
  parser.add_argument('--warm-steps', type=numbers(int), default=[0, 5, 10])
  parser.add_argument('--linesearch-steps', type=numbers(int), default=[10])
  parser.add_argument('--linesearch-std', type=float, default=1.0)
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--repeats', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--out', default='bench/results/sparsity_solver.json')
  args = parser.parse_args(argv)
  unknown = sorted(set(args.shapes) - set(SHAPES))
  if unknown:
    parser.error(f'unknown shapes {unknown}; valid: {", ".join(SHAPES)}')
  missing = [path for path in args.logits if not os.path.exists(path)]
  if missing:
    parser.error(f'--logits: {missing} not found; write them with python -m bench.router_logits')
  rows = []
  for source, logits, linesearches in sources(args):
    for capacity_factor in args.capacities:
      for solver in solvers(args, linesearches):
        row = measure(source, logits, capacity_factor, solver, args)
        print(json.dumps(row), flush=True)
        rows.append(row)
  atomic.write_json(args.out, {
      'machine': moe_layer.machine(),
      'method': f'jit(vmap(sparsity_constrained)) over all groups; median of {args.repeats} calls '
                f'after {args.warmup} warm-up calls; scores = softmax(logits), Gaussian logits '
                f'with seed {args.seed}',
      'rows': rows})


if __name__ == '__main__':
  main()
