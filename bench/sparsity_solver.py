"""Speed and accuracy of the sparsity-constrained OT solver under vmap over routing groups.

  python bench/sparsity_solver.py --out bench/results/sparsity_solver.json

vmoe.routing.affinity.sparsity_constrained runs a fixed number of L-BFGS steps on the semi-dual.
Routers vmap it over the routing groups, and under vmap data-dependent control flow (the line
search's loops and conds) runs for every group until the slowest one is done, every branch
evaluated. This benchmark measures what that costs for the two line searches it offers (the
router's backtracking with memory 3, and optax.lbfgs's default zoom with memory 10), at the
routing shapes this project trains (all groups of one MoE layer call, softmax scores of random
logits):
  tiny   8 groups of 272 tokens (the tiny config's 4 groups of a 64-image batch, twice), E = 8
  b32    8 groups of 392 tokens (8 images of 49 tokens), E = 32
at c = 1 and 2 (C = round(c T / E)). For each line search and step count it reports the median
milliseconds of the jitted, vmapped solve and the plan's quality: the mean |row sum - 1| (the
constraint the solver works on; columns are exact) and the fraction of tokens no expert took.
Steps = 0 is plain Expert Choice on the scores (the solver's starting point).
"""
import argparse
import itertools
import json
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import moe_layer  # pylint: disable=g-import-not-at-top
from vmoe import atomic  # pylint: disable=g-import-not-at-top
from vmoe.routing import affinity  # pylint: disable=g-import-not-at-top
from vmoe.routing import allocation  # pylint: disable=g-import-not-at-top

SHAPES = {'tiny': (8, 272, 8), 'b32': (8, 392, 32)}   # groups, tokens per group, experts.
# L-BFGS memory per line search: the router's (unit steps, memory 3), the router's before
# 2026-11-23 evening (backtracking, memory 3), and optax.lbfgs's defaults (zoom, memory 10).
MEMORY_SIZE = {'none': 3, 'backtracking': 3, 'zoom': 10}


def measure(shape_name, capacity_factor, linesearch, num_steps, args) -> dict:
  num_groups, num_tokens, num_experts = SHAPES[shape_name]
  capacity = allocation.compute_capacity(num_tokens, num_experts, capacity_factor)
  logits = jax.random.normal(jax.random.PRNGKey(args.seed), (num_groups, num_tokens, num_experts))
  scores = jax.nn.softmax(logits, axis=-1)
  solve = jax.jit(jax.vmap(lambda s: affinity.sparsity_constrained(
      s, capacity, num_steps, memory_size=MEMORY_SIZE[linesearch], linesearch=linesearch)))
  plans = solve(scores)
  return {
      'shape': shape_name, 'groups': num_groups, 'tokens': num_tokens, 'experts': num_experts,
      'capacity_factor': capacity_factor, 'capacity': capacity, 'linesearch': linesearch,
      'memory_size': MEMORY_SIZE[linesearch], 'steps': num_steps,
      'ms': round(moe_layer.time_ms(solve, scores, warmup=args.warmup, repeats=args.repeats), 2),
      'row_error': round(float(jnp.mean(jnp.abs(plans.sum(-1) - 1))), 4),
      'dropped': round(float(jnp.mean((plans > 0).sum(-1) == 0)), 4),
  }


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--shapes', default=','.join(SHAPES))
  parser.add_argument('--capacities', default='1,2')
  parser.add_argument('--steps', default='10,20')
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--repeats', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--out', default='bench/results/sparsity_solver.json')
  args = parser.parse_args(argv)
  shapes = [s for s in args.shapes.split(',') if s]
  unknown = sorted(set(shapes) - set(SHAPES))
  if unknown:
    parser.error(f'unknown shapes {unknown}; valid: {", ".join(SHAPES)}')
  rows = []
  for shape_name, capacity_factor in itertools.product(
      shapes, [float(c) for c in args.capacities.split(',')]):
    grid = [('none', 0)] + list(itertools.product(
        affinity.LINESEARCHES, [int(n) for n in args.steps.split(',')]))
    for linesearch, num_steps in grid:
      row = measure(shape_name, capacity_factor, linesearch, num_steps, args)
      print(json.dumps(row), flush=True)
      rows.append(row)
  atomic.write_json(args.out, {
      'machine': moe_layer.machine(),
      'method': f'jit(vmap(sparsity_constrained)) over all groups; median of {args.repeats} calls '
                f'after {args.warmup} warm-up calls; softmax of N(0, 1) logits, seed {args.seed}',
      'rows': rows})


if __name__ == '__main__':
  main()
