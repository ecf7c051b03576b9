"""Speed and accuracy of the sparsity-constrained OT solver, vmapped over routing groups.

  python -m bench.sparsity_solver --logits bench/data/router_logits_tiny.npz \
      --out bench/results/sparsity_solver.json                         # as `make bench`

affinity.sparsity_constrained takes unit L-BFGS steps on the semi-dual from potentials 0 ('zero')
or from a few Sinkhorn iterations of entropic OT ('entropic'). A row times the jitted, vmapped
solve on softmax(logits), Gaussian logits at SHAPES or recorded ones (--logits: an .npz of `logits`
(G, T, E), `run` and `step`), and gives the plan's mean |row sum - 1| (columns are exact) and the
fraction of tokens no expert took.
"""
import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from bench import timing
from vmoe.routing import affinity
from vmoe.routing import capacity as capacity_lib

# (groups, tokens per group, experts): the tiny config's 16-image groups (of 17 tokens) with
# E = 8, and B/32's 8-image groups (of 50 tokens) with E = 32.
SHAPES = {'tiny': (8, 16 * 17, 8), 'b32': (8, 8 * 50, 32)}


def sources(args) -> list[tuple[str, jax.Array]]:
  """(name, logits (G, T, E)) of every problem set: Gaussian logits per shape and std, then the
  recorded files."""
  out = [(f'{name} N(0, {std:g}^2)', std * jax.random.normal(jax.random.PRNGKey(args.seed),
                                                              SHAPES[name]))
         for name in args.shapes for std in args.logit_stds]
  for path in args.logits:
    with np.load(path) as recorded:
      out.append((f'{recorded["run"]} step {int(recorded["step"])} ({os.path.basename(path)})',
                  jnp.asarray(recorded['logits'], jnp.float32)))
  return out


def measure(source: str, logits: jax.Array, capacity_factor: float, start: str, steps: int,
            args) -> dict:
  """One row: the router's solver from `start` with `steps` steps on every group of `logits`."""
  num_groups, num_tokens, num_experts = logits.shape
  capacity = capacity_lib.compute_capacity(num_tokens, num_experts, capacity_factor)
  scores = jax.nn.softmax(logits, axis=-1)
  warm_start_iters = args.warm_start if start == 'entropic' else 0
  solve = jax.jit(jax.vmap(lambda s: affinity.sparsity_constrained(
      s, capacity, steps, warm_start_iters=warm_start_iters)))
  plans = solve(scores)
  return {
      'source': source, 'groups': num_groups, 'tokens': num_tokens, 'experts': num_experts,
      'capacity_factor': capacity_factor, 'capacity': capacity, 'start': start, 'steps': steps,
      'warm_start_iters': warm_start_iters,
      'ms': round(timing.time_ms(solve, scores, warmup=args.warmup, repeats=args.repeats), 2),
      'row_error': round(float(jnp.mean(jnp.abs(plans.sum(-1) - 1))), 4),
      'dropped': round(float(jnp.mean((plans > 0).sum(-1) == 0)), 4)}


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  numbers = lambda kind: lambda text: [kind(x) for x in text.split(',') if x]
  parser.add_argument('--shapes', type=numbers(str), default=list(SHAPES))
  parser.add_argument('--logit-stds', type=numbers(float), default=[0.1, 1.0, 3.0])
  parser.add_argument('--logits', type=numbers(str), default=[],
                      help='recorded router logits (.npz), comma-separated')
  parser.add_argument('--capacities', type=numbers(float), default=[1.0, 2.0])
  parser.add_argument('--steps', type=numbers(int), default=[5, 10, 20], help="from 'zero'")
  parser.add_argument('--warm-start', type=int, default=10, help='Sinkhorn iterations')
  parser.add_argument('--warm-steps', type=numbers(int), default=[0, 5, 10],
                      help="from 'entropic'")
  parser.add_argument('--warmup', type=int, default=3)
  parser.add_argument('--repeats', type=int, default=20)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--out', default='bench/results/sparsity_solver.json')
  args = parser.parse_args(argv)
  if not set(args.shapes) <= set(SHAPES):
    parser.error(f'--shapes: valid values are {", ".join(SHAPES)}')
  missing = [path for path in args.logits if not os.path.exists(path)]
  if missing:
    parser.error(f'--logits: {", ".join(missing)} not found')
  if args.repeats < 1 or args.warmup < 0 or args.warm_start < 0:
    parser.error('--repeats must be >= 1, --warmup and --warm-start >= 0')
  return args


def main(argv=None):
  args = parse_args(argv)
  solvers = [('zero', n) for n in [0] + args.steps] + [('entropic', n) for n in args.warm_steps]
  rows = []
  for source, logits in sources(args):
    for capacity_factor in args.capacities:
      for start, steps in solvers:
        rows.append(measure(source, logits, capacity_factor, start, steps, args))
        print(json.dumps(rows[-1]), flush=True)
  timing.write_result(
      args.out, rows,
      method=f'jit(vmap(sparsity_constrained)) over all groups; median of {args.repeats} calls '
             f'after {args.warmup} warm-up calls; scores = softmax(logits), Gaussian logits '
             f'with seed {args.seed}')


if __name__ == '__main__':
  main()
