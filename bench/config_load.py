"""Seconds to load the paper's config files in a fresh interpreter, beside importing JAX (a
benchmark, not a test).

  python -m bench.config_load --out bench/results/config_load.json

Config files are data (configs/plain_configs_test.py checks that they import no framework), so a
tool that reads them (the sweep's planning, `make tables`, a user's script) starts as fast as
Python does. Each round starts one fresh interpreter per program, in turn, and times it from
outside, start-up included:
  bare          `pass`: the interpreter's own start-up, the floor;
  paper configs every paper config file (configs/{b32,b16,l16}_{router}.py, the six routers and
                dense: 21 files) imported, and get_config() called with no argument, c=2 and
                runlocal=True;
  import jax    `import jax`: what a config file that loaded the model's code would cost at least.
The result gives each program's median and the paper configs' time over import jax's, both above
the floor and as measured.
"""
import argparse
import statistics
import subprocess
import sys
import time

from bench import timing
from configs import common

# Every paper config file, and the arguments a user passes to it.
PAPER_CONFIGS = common.paper_config_modules()
ARGUMENTS = (None, 'c=2', 'runlocal=True')
LOAD_CONFIGS = f"""
import importlib
for name in {PAPER_CONFIGS!r}:
  module = importlib.import_module('configs.' + name)
  for argument in {ARGUMENTS!r}:
    module.get_config(argument)
"""
PROGRAMS = {'bare': 'pass', 'paper configs': LOAD_CONFIGS, 'import jax': 'import jax'}


def seconds(code: str) -> float:
  """Wall-clock seconds of a fresh interpreter running `code`, start-up included."""
  start = time.perf_counter()
  subprocess.run([sys.executable, '-c', code], check=True)
  return time.perf_counter() - start


def measure(rounds: int) -> dict:
  """Each program's seconds a round (PROGRAMS, in turn each round), their medians and ratios."""
  found = timing.interleaved(
      [lambda code=code, name=name: {name: 1e3 * seconds(code)}
       for name, code in PROGRAMS.items()], rounds)
  times = {name: [ms / 1e3 for ms in found[i][name]] for i, name in enumerate(PROGRAMS)}
  median = {name: statistics.median(values) for name, values in times.items()}
  floor = median['bare']
  return {
      'rows': [{'program': name, 'median_s': round(median[name], 4),
                'above_bare_s': round(median[name] - floor, 4),
                'min_s': round(min(times[name]), 4), 'max_s': round(max(times[name]), 4)}
               for name in PROGRAMS],
      'ratios': {
          'paper_configs_over_import_jax': round(median['paper configs'] / median['import jax'],
                                                 3),
          'above_bare': round((median['paper configs'] - floor) /
                              (median['import jax'] - floor), 3)},
      'files': len(PAPER_CONFIGS), 'calls': len(PAPER_CONFIGS) * len(ARGUMENTS)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--rounds', type=int, default=7)
  parser.add_argument('--out', default='bench/results/config_load.json')
  args = parser.parse_args(argv)
  if args.rounds < 1:
    parser.error(f'--rounds {args.rounds}: give at least 1 round.')
  result = measure(args.rounds)
  timing.write_result(
      args.out, result.pop('rows'),
      f'median over {args.rounds} rounds; each round starts a fresh interpreter per program, '
      'in turn, timed from outside (start-up included)', **result)
  print(result['ratios'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
