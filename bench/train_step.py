"""Training step of the tiny config for each router, against the dense ViT (a benchmark).

  python -m bench.train_step --out bench/results/train_step.json      # as `make bench`

The grid: configs/tiny.py (XS/7, batch 64) with each router of the tiny study (the paper's six
and the five after it) at c = 1 and 2, the sweep's softmax-combine ablation (sinkhorn_tc without
softmax combine, k = 1 and 2) and router=dense (the same ViT with dense MLPs: the active compute
of c = 1), each a bench/step.py Stepper, all timed in interleaved rounds. The grid runs
`--processes` times, each in a fresh process (bench/processes.py), and the record keeps every
run (`runs`); a router's ratio (`ratios`) is the median of its per-process ratios. Targets (the
trainer issue's, at c = 1): sparse routers within 1.3x the dense step, Soft MoE within 1.2x.
results/cost.py prices the tiny study's controlled training cost with the rows' step_ms.
"""
import argparse
import json
import statistics
import sys

from base import atomic
from bench import processes
from bench import step
from bench import timing
from configs import tiny
from launch import sweep
from vmoe.routing import lab_routers
from vmoe.routing import declarations
from vmoe.routing import router as router_lib

ABLATION_ROUTER = sweep.ABLATION_ROUTER    # The sweep's softmax-combine ablation.
TARGETS = {'sparse': ('vs_dense', 1.3), step.SOFT_MOE: ('vs_dense', 1.2)}
# The tiny study's routers (results/tiny/README.md), so that results/cost.py prices each.
STUDY_ROUTERS = (*router_lib.PAPER_ROUTERS, *lab_routers.ROUTERS)


def tiny_config(router: str, capacity: float, softmax_combine: bool = True):
  """The tiny config of `router` at c = `capacity`."""
  config = tiny.get_config(f'router={router},c={capacity:g}')
  if not softmax_combine:
    config.moe.router.softmax_combine = False
  return config


def run_grid(args) -> dict:
  """Dense, every router at every capacity and the ablation, timed in one process."""
  models = [(declarations.DENSE, 1.0)] + [(r, c) for c in args.capacities for r in args.routers]
  models += [(ABLATION_ROUTER, c, False) for c in args.capacities if args.ablation]
  steppers = [step.Stepper(tiny_config(*model)) for model in models]
  rows = step.add_ratios(step.measure(steppers, args.rounds, args.steps, args.warmup), TARGETS)
  return {'arch': rows[0]['arch'], 'machine': timing.machine(), 'rows': rows,
          'method': f'configs/tiny.py training step (trainer path, synthetic batch); '
                    f'{args.rounds} interleaved rounds, each on a fresh state: {args.warmup} '
                    f'untimed steps, then {args.steps} timed; step_ms = median over rounds of '
                    "each round's median step"}


def combine(runs: list[dict]) -> list[dict]:
  """Each MoE row's median ratio over runs (their own in vs_dense_runs), judged like one run's."""
  combined = []
  for same in zip(*(run['rows'] for run in runs)):
    if 'vs_dense' not in same[0]:
      continue
    per_run = [r['vs_dense'] for r in same]
    ratio, target = statistics.median(per_run), same[0]['target']
    combined.append({**{k: same[0][k] for k in ('router', 'capacity', 'softmax_combine')},
                     'vs_dense': ratio, 'vs_dense_runs': per_run, 'target': target,
                     'meets_target': None if target is None else ratio <= target['vs_dense']})
  return combined


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--routers', default=','.join(STUDY_ROUTERS),
                      help="the grid's routers, comma-separated (default: the tiny study's, the "
                           'six paper routers and the five after the paper)')
  parser.add_argument('--capacities', type=lambda text: [float(c) for c in text.split(',') if c],
                      default=[1.0, 2.0])
  parser.add_argument('--warmup', type=int, default=5, help='untimed steps a round (>= 1)')
  parser.add_argument('--rounds', type=int, default=15)
  parser.add_argument('--steps', type=int, default=10, help='timed steps a round')
  parser.add_argument('--processes', type=int, default=3,
                      help='runs of the grid, each in a fresh process')
  parser.add_argument('--no-ablation', dest='ablation', action='store_false',
                      help=f'leave out {ABLATION_ROUTER} without softmax combine')
  parser.add_argument('--out', default='bench/results/train_step.json')
  args = parser.parse_args(argv)
  args.routers = [r for r in args.routers.split(',') if r]
  if not set(args.routers) <= set(router_lib.ROUTERS):
    parser.error(f'--routers: valid values are {", ".join(sorted(router_lib.ROUTERS))}')
  if min(args.warmup, args.rounds, args.steps, args.processes) < 1:
    parser.error('--warmup, --rounds, --steps and --processes must be >= 1')
  return args


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  if args.processes == 1:
    atomic.write_json(args.out, run_grid(args))
    return
  runs = processes.run('bench.train_step', [argv + ['--processes', '1']] * args.processes,
                       args.out)
  combined = combine(runs)
  for ratio in combined:
    print(json.dumps(ratio), flush=True)
  processes.write(args.out, {
      'arch': runs[0]['arch'], 'machine': runs[0]['machine'],
      'method': f'{args.processes} runs of the grid, each in a fresh process; per run: '
                f'{runs[0]["method"]}; ratios = median over runs of each run\'s vs_dense',
      'runs': [{'rows': run['rows']} for run in runs], 'ratios': combined})


if __name__ == '__main__':
  main()
