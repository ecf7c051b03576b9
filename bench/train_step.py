"""Training steps per second of the tiny config for each router and the dense ViT (a benchmark).

  python -m bench.train_step --out bench/results/train_step.json       # the grid, as `make bench`
  python -m bench.train_step --processes 1 --out /tmp/one_run.json      # the grid, one process
  python -m bench.train_step --router sinkhorn_ec --capacity 2 --json   # one row, one JSON line

The step is the trainer's, built by vmoe/setup.py as the trainer builds it: the state initialised
under the mesh's shardings, vmoe.train_step's pure step for the config's loss (inside the mixup wrapper) jitted with
state and batch shardings and the state donated, compiled ahead of time. The batch is synthetic and
of the config's shape (images (64, 28, 28, 1) float32, one-hot labels (64, 10)), put on the devices
once, so input is not measured; the step key is fixed, so no host-side fold_in is timed either.

Grid: configs/tiny.py with each paper router at c = 1 and 2, the sweep's softmax-combine ablation
(Sinkhorn Token Choice without softmax combine, k = 1 and 2), and router=dense (the same ViT with
dense MLPs: the same active compute as c = 1). The rows also give results/cost.py the step times
of the tiny study's controlled training cost. Every step is compiled first; then `--rounds` rounds
visit the models in turn, timing `--steps` consecutive steps of each (bench/moe_layer.py's time_ms:
the median wall-clock step; the first round warms up with `--warmup` untimed steps). A model's step
time is the median over rounds, so a slow stretch of a shared machine hits every model alike rather
than the ones that happened to run then. Ratios to dense use these medians. The trainer issue's
targets apply at c = 1: every sparse router within 1.3x of the dense step, Soft MoE within 1.2x;
c = 2 (twice the expert compute) is reported without a target.

Processes: the grid runs `--processes` times (3 by default), each in a fresh Python process, and
the result keeps every run; a router's ratio is the median of its per-run ratios. Interleaving
evens out slow stretches within one process, but not what differs between processes: on a
2-core VM, runs of the grid in fresh processes disagree far more than the rounds inside one run
(each router's per-process ratios: `vs_dense_runs` in bench/results/train_step.json).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import jax
import numpy as np

from base import atomic
from bench import moe_layer
from configs import common as config_lib
from configs import experiment as experiment_parser
from configs import tiny
from launch import sweep
from vmoe import flops
from vmoe import setup as setup_lib
from vmoe import sharding
from vmoe.routing import router as router_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # Where -m bench.* runs.
DENSE = config_lib.DENSE
ABLATION_ROUTER = sweep.ABLATION_ROUTER    # The sweep's softmax-combine ablation.
CAPACITIES = (1, 2)
# The trainer issue's targets: step time over the dense ViT's, at c = 1.
TARGET = {'soft_moe': 1.2}
SPARSE_TARGET = 1.3


class Stepper:
  """The compiled training step of one tiny config with its state; each call runs one step."""

  def __init__(self, router: str, capacity: float, softmax_combine: bool = True):
    self.router, self.capacity = router, (None if router == DENSE else capacity)
    self.softmax_combine = softmax_combine
    config = tiny.get_config(f'router={router},c={capacity:g}')
    if not softmax_combine:
      config.moe.router.softmax_combine = False
    experiment = experiment_parser.parse(config)
    self.arch = experiment.model.variant
    setup = setup_lib.build(experiment)
    init_rng, self.rng = jax.random.split(jax.random.PRNGKey(experiment.seed))
    images = np.random.default_rng(0).normal(
        size=(experiment.batch_size,) + experiment.model.image_shape).astype(np.float32)
    num_classes = experiment.model.num_classes
    labels = np.eye(num_classes, dtype=np.float32)[np.arange(experiment.batch_size) % num_classes]
    self.state = setup.init_state(init_rng)
    self.batch = sharding.put_batch({'image': images, 'labels': labels}, setup.batch_sharding)
    self.compiled = setup.compile()
    self.flops_per_step = flops.compiled_flops(self.compiled)
    self.num_params = setup.num_params()
    self.batch_size = experiment.batch_size

  def __call__(self):
    self.state, metrics = self.compiled(self.state, self.batch, self.rng)
    return self.state, metrics


def measure(models: list, args) -> list:
  """Rows for (router, capacity, softmax_combine) `models`, timed round-robin (see the module
  docstring)."""
  steppers = [Stepper(*model) for model in models]
  round_ms = [[] for _ in steppers]
  for round_index in range(args.rounds):
    for stepper, times in zip(steppers, round_ms):
      times.append(moe_layer.time_ms(stepper, warmup=args.warmup if round_index == 0 else 0,
                                     repeats=args.steps))
  rows = []
  for stepper, times in zip(steppers, round_ms):
    step_ms = round(statistics.median(times), 3)  # the rate below follows the stored value
    rows.append({
        'router': stepper.router, 'capacity': stepper.capacity,
        'softmax_combine': stepper.softmax_combine, 'batch_size': stepper.batch_size,
        'step_ms': step_ms, 'steps_per_second': round(1e3 / step_ms, 2),
        'round_ms': [round(t, 3) for t in times], 'flops_per_step': stepper.flops_per_step,
        'num_params': stepper.num_params})
  return rows


def ratios(rows: list) -> list:
  """Step time of every MoE row over the dense row's, with the issue's target where it applies."""
  dense_ms = next(r['step_ms'] for r in rows if r['router'] == DENSE)
  out = []
  for row in rows:
    if row['router'] == DENSE:
      continue
    ratio = round(row['step_ms'] / dense_ms, 3)
    paper_row = row['capacity'] == 1 and row.get('softmax_combine', True)
    target = TARGET.get(row['router'], SPARSE_TARGET) if paper_row else None
    out.append({'router': row['router'], 'capacity': row['capacity'],
                'softmax_combine': row.get('softmax_combine', True), 'vs_dense': ratio,
                'target': target, 'meets_target': None if target is None else ratio <= target})
  return out


def combine_runs(runs: list) -> list:
  """Ratios of several runs of the grid: each router's median ratio over runs (the runs' own
  ratios in vs_dense_runs), judged against the target like one run's."""
  combined = []
  for first, *others in zip(*(run['ratios'] for run in runs)):
    per_run = [first['vs_dense']] + [other['vs_dense'] for other in others]
    ratio = round(statistics.median(per_run), 3)
    target = first['target']
    combined.append({**first, 'vs_dense': ratio, 'vs_dense_runs': per_run,
                     'meets_target': None if target is None else ratio <= target})
  return combined


def run_processes(args):
  """Runs the grid args.processes times, each in a fresh process; writes every run and the
  median ratios to args.out."""
  runs = []
  with tempfile.TemporaryDirectory() as directory:
    for index in range(args.processes):
      out = os.path.join(directory, f'run{index}.json')
      subprocess.run([sys.executable, '-m', 'bench.train_step', '--processes', '1', '--out', out,
                      '--routers', ','.join(args.routers),
                      '--capacities', ','.join(f'{c:g}' for c in args.capacities),
                      '--warmup', str(args.warmup), '--rounds', str(args.rounds),
                      '--steps', str(args.steps)] + ([] if args.ablation else ['--no-ablation']),
                     check=True, cwd=REPO)
      with open(out) as f:
        runs.append(json.load(f))
  combined = combine_runs(runs)
  for row in combined:
    print(json.dumps(row), flush=True)
  atomic.write_json(args.out, {
      'arch': runs[0]['arch'], 'machine': runs[0]['machine'],
      'method': f'{args.processes} runs of the grid, each in a fresh process; per run: '
                f'{runs[0]["method"]}; ratios = median over runs of each run\'s ratio',
      'runs': [{'rows': run['rows'], 'ratios': run['ratios']} for run in runs],
      'ratios': combined})


def run_grid(args):
  """Times dense and every router at every capacity; writes rows and ratios to args.out."""
  models = [(DENSE, 1.0, True)] + [(r, float(c), True) for c in args.capacities
                                   for r in args.routers]
  if args.ablation:
    models += [(ABLATION_ROUTER, float(c), False) for c in args.capacities]
  rows = measure(models, args)
  for row in rows:
    print(json.dumps(row), flush=True)
  result_ratios = ratios(rows)
  for row in result_ratios:
    print(json.dumps(row), flush=True)
  atomic.write_json(args.out, {
      'arch': tiny.get_config().model.variant, 'machine': moe_layer.machine(),
      'method': f'configs/tiny.py training step (trainer path, synthetic batch); {args.rounds} '
                f'round-robin rounds of {args.steps} steps per model after {args.warmup} warm-up '
                'steps; step_ms = median over rounds of each round\'s median step',
      'rows': rows, 'ratios': result_ratios})


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--router', help=f'one row: {DENSE} or one of {sorted(router_lib.ROUTERS)}')
  parser.add_argument('--capacity', type=float, default=1.0, help='c (k for token choice)')
  parser.add_argument('--routers', default=','.join(router_lib.PAPER_ROUTERS),
                      help='the grid\'s routers, comma-separated')
  parser.add_argument('--capacities', default=','.join(map(str, CAPACITIES)))
  parser.add_argument('--warmup', type=int, default=5)
  parser.add_argument('--rounds', type=int, default=15)
  parser.add_argument('--steps', type=int, default=10, help='timed steps per model and round')
  parser.add_argument('--processes', type=int, default=3,
                      help='runs of the grid, each in a fresh process (ratios: median over runs)')
  parser.add_argument('--no-ablation', dest='ablation', action='store_false',
                      help=f'leave out {ABLATION_ROUTER} without softmax combine')
  parser.add_argument('--json', action='store_true', help='one row: print only the JSON line')
  parser.add_argument('--out', default='bench/results/train_step.json')
  args = parser.parse_args(argv)
  args.routers = [r for r in args.routers.split(',') if r]
  args.capacities = [float(c) for c in args.capacities.split(',') if c]
  for name in ([args.router] if args.router else args.routers):
    if name != DENSE:
      router_lib.get_router_spec(name)
  if args.processes < 1:
    parser.error(f'--processes must be >= 1, got {args.processes}')
  if args.router is None:
    (run_grid if args.processes == 1 else run_processes)(args)
    return
  row, = measure([(args.router, args.capacity, True)], args)
  print(json.dumps(row) if args.json else json.dumps(row, indent=1))


if __name__ == '__main__':
  main()
