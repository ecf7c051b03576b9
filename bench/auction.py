"""Bids and time of BASE's auction (vmoe/routing/balanced_assignment.py), vmapped over groups.

  python -m bench.auction --out bench/results/auction.json

A row times the jitted, vmapped balanced_assignment_slots on Gaussian affinities (G, T, E) at
one of SHAPES, at the module's own EPSILON and MAX_ITERS, and gives the bids each group placed
(median and max: a vmapped loop runs as long as its slowest group) and the placements left
missing at the cap. --baseline FILE adds, interleaved in the same rounds, the rows of another
version of the module (a copy of the file, e.g. from `git show COMMIT:vmoe/routing/...`).
"""
import argparse
import importlib.util
import os
import statistics

import jax
import numpy as np

from bench import timing
from vmoe.routing import balanced_assignment

# (tokens per group T, experts E, capacity C): B/32's 8 images of 50 tokens with E = 32 at c = 1
# (C = round(400 / 32) = 12, halves to even) and at c = 2 (C = 25, E C = 800 > T: the tokens
# bid), and the tiny config's 16 images of 17 tokens with E = 8 (C = 272 / 8 = 34, E C = T).
SHAPES = {'b32': (400, 32, 12), 'tiny': (272, 8, 34), 'b32_c2': (400, 32, 25)}


def load_module(path: str):
  """A balanced_assignment module from a file (a baseline version of it)."""
  spec = importlib.util.spec_from_file_location('baseline_balanced_assignment', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def solver(module, capacity: int):
  """The module's auction at its own EPSILON and MAX_ITERS, jitted and vmapped over groups."""
  return jax.jit(jax.vmap(lambda a: module.balanced_assignment_slots(
      a, capacity, module.EPSILON, module.MAX_ITERS)))


def measure(modules: dict, args) -> list[dict]:
  """Per shape, every module's row, timed in args.repeats interleaved rounds (medians)."""
  rows = []
  for shape in args.shapes:
    num_tokens, num_experts, capacity = SHAPES[shape]
    affinity = jax.random.normal(jax.random.PRNGKey(args.seed),
                                 (args.groups, num_tokens, num_experts))
    solvers = {name: solver(module, capacity) for name, module in modules.items()}
    reports = {name: jax.block_until_ready(solve(affinity))[1] for name, solve in solvers.items()}
    timers = [lambda solve=solve: {'ms': timing.time_ms(solve, affinity, warmup=0, repeats=1)}
              for solve in solvers.values()]
    times = timing.interleaved(timers, args.repeats)
    for (name, module), t in zip(modules.items(), times):
      bids = np.asarray(reports[name].iterations)
      rows.append({'version': name, 'shape': shape, 'groups': args.groups, 'tokens': num_tokens,
                   'experts': num_experts, 'capacity': capacity, 'epsilon': module.EPSILON,
                   'max_iters': module.MAX_ITERS, 'iterations_median': float(np.median(bids)),
                   'iterations_max': int(bids.max()),
                   'unfilled': int(np.sum(np.asarray(reports[name].unfilled))),
                   'ms': round(statistics.median(t['ms']), 2),
                   'rounds_ms': [round(ms, 2) for ms in t['ms']]})
  return rows


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--shapes', default=','.join(SHAPES), help='comma-separated')
  parser.add_argument('--groups', type=int, default=16, help="the recipe's 16 groups a device")
  parser.add_argument('--baseline', default='', help='another balanced_assignment.py to time')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--repeats', type=int, default=5, help='interleaved rounds')
  parser.add_argument('--out', default='bench/results/auction.json')
  args = parser.parse_args(argv)
  args.shapes = [s for s in args.shapes.split(',') if s]
  if not set(args.shapes) <= set(SHAPES):
    parser.error(f'--shapes: valid values are {", ".join(SHAPES)}')
  if args.baseline and not os.path.isfile(args.baseline):
    parser.error(f'--baseline {args.baseline}: file not found')
  if min(args.groups, args.repeats) < 1:
    parser.error('--groups and --repeats must be >= 1')
  return args


def main(argv=None):
  args = parse_args(argv)
  modules = {'current': balanced_assignment}
  if args.baseline:
    modules = {'baseline': load_module(args.baseline), **modules}
  rows = measure(modules, args)
  for row in rows:
    print({k: v for k, v in row.items() if k != 'rounds_ms'}, flush=True)
  timing.write_result(
      args.out, rows,
      method=f'jitted, vmapped over {args.groups} groups of Gaussian affinities (seed '
             f'{args.seed}); per shape, every version compiled and run once, then '
             f'{args.repeats} interleaved rounds of one call each; medians over rounds')


if __name__ == '__main__':
  main()
