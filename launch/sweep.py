"""One architecture's grid of runs, one or a few at a time, resumable.

  python -m launch.sweep --arch b32 --workdir-root workdirs [--seeds 1] [--include-ablation]
                         [--routers dense,softmax_tc,lossfree_tc] [--capacities 1] [--jobs 2]
                         [--router-module my_router.py]
                         [--dry-run] [--config.KEY=VALUE ...]

The grid (paper Sec. 4.1): the dense ViT baseline (`dense`: the same model with dense MLPs), then
the six routers x capacity c in {1, 2} (k for token choice), 13 runs; with --include-ablation also
Sinkhorn Token Choice without softmax combine at k = 1 and 2 (the paper's Figure 3). --routers and
--capacities keep part of it; --routers also adds any other registered router (the routers
after the paper, or a user's own from --router-module, docs/routers.md). Seeds 0..N-1 with
--seeds N, seed by seed. Each run is one command,
  .venv/bin/python main.py --config=configs/b32_sinkhorn_tc.py:c=2 \\
      --workdir=workdirs/b32/sinkhorn_tc_c2_nosmc_s1 \\
      --config.moe.router.softmax_combine=False --config.seed=1
(tiny and the ImageNet-1k rung: --config=configs/tiny.py:router=sinkhorn_tc,c=2,
configs/ilsvrc_s32.py:router=sinkhorn_tc,c=2; the baseline: configs/b32_dense.py or
configs/tiny.py:router=dense), run from the repository root. Extra --config.KEY=VALUE arguments
(e.g. --config.mesh.expert=32 on a TPU v3-32) go to every run.

--records DIR copies each finished run's summary.json (and the lines of its sweep.log that say
what ran and how long it took) to DIR/<arch>/<run name>/: a study commits those as they land, and
results.tables reads them as it reads workdirs.

--jobs N runs up to N runs at once, in grid order: on a small model a run cannot keep every core
busy (its steps are short and its evaluations serial), so two runs on a 2-core CPU finish sooner
than one after the other. A run's results do not depend on what runs beside it.

Resumable: a run whose workdir holds summary.json (the trainer writes it atomically as its last
act) is skipped, so a killed sweep, rerun, starts no finished run again; an unfinished run starts
again and the trainer resumes it from its newest checkpoint. Each run's output goes to
WORKDIR/sweep.log (appended, one header per attempt). A failing run is reported with the end of
its log and the sweep goes on; the exit status is 1 if any run failed. Ctrl-C reaches the running
trainers too (same process group): the sweep waits for them to checkpoint and exit, then stops.
"""
import argparse
import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence, TextIO

from base import atomic
from base import published
from vmoe.routing import declarations
from vmoe.routing import user_module
from vmoe.run import run_outputs

# The config files' prefixes: configs/b32_*.py ... for the paper's architectures (published.ARCHS,
# 'B/32' -> 'b32'), and the configs with a router argument: configs/tiny.py and the ImageNet-1k
# rung's configs/ilsvrc_s32.py.
ARGUMENT_CONFIGS = ('tiny', 'ilsvrc_s32')
ARCHS = tuple(arch.replace('/', '').lower() for arch in published.ARCHS) + ARGUMENT_CONFIGS
ABLATION_ROUTER = 'sinkhorn_tc'     # Paper Figure 3: Sinkhorn Token Choice, k = 1 and 2.
LOG_FILE = 'sweep.log'
DEFAULT_PYTHON = '.venv/bin/python'
LOG_TAIL_LINES = 20
POLL_SECONDS = 0.2
# The line a finished run's sweep.log ends with: its wall-clock time and how many runs ran at once.
FINISHED_LINE = '=== finished in {seconds:.1f} s with --jobs {jobs}\n'
FINISHED_LINE_RE = r'=== finished in ([0-9.]+) s with --jobs ([0-9]+)'


@dataclasses.dataclass(frozen=True)
class GridRun:
  """One cell of the grid: a router at a capacity (None for the dense baseline) and a seed."""
  arch: str
  router: str
  capacity: int | None
  seed: int = 0
  softmax_combine: bool = True
  router_module: str = ''     # The module registering a router of the user's own.

  @property
  def name(self) -> str:
    """'sinkhorn_tc_c2', 'sinkhorn_tc_c1_nosmc', 'soft_moe_c1_s2', 'dense', 'dense_s1'."""
    cell = self.router if self.router == declarations.DENSE else f'{self.router}_c{self.capacity}'
    return (cell + ('' if self.softmax_combine else '_nosmc') +
            (f'_s{self.seed}' if self.seed else ''))

  def workdir(self, root: str) -> str:
    return os.path.join(root, self.arch, self.name)


CommandFn = Callable[[GridRun, str], list[str]]


def make_grid(arch: str, seeds: int = 1, include_ablation: bool = False,
              routers: Sequence[str] | None = None,
              capacities: Sequence[int] | None = None, router_module: str = '') -> list[GridRun]:
  """The runs of one architecture: per seed, dense, the c = 1 block, the c = 2 block, the ablation.

  routers / capacities (None: all) keep the runs of those routers ('dense' included) and those
  capacities (the dense baseline has none, and is kept whatever the capacities). routers may
  name any registered router: the paper's six come first in the paper's order, the others
  after them in the order given; router_module registers a router of the user's own.
  """
  if arch not in ARCHS:
    raise ValueError(f'unknown arch {arch!r}; valid: {", ".join(ARCHS)}.')
  if seeds < 1:
    raise ValueError(f'--seeds must be >= 1, got {seeds}.')
  others = [r for r in routers or () if r not in (declarations.DENSE,) + published.ROUTERS]
  if others or router_module:
    _check_registered(others, router_module)
  unknown = sorted(set(capacities or ()) - set(published.CAPACITIES))
  if unknown:
    raise ValueError(f'unknown capacities {unknown}; the paper\'s grid has '
                     f'{", ".join(map(str, published.CAPACITIES))}.')
  runs = []
  for seed in range(seeds):
    runs.append(GridRun(arch, declarations.DENSE, None, seed))
    runs += [GridRun(arch, router, c, seed, router_module=router_module)
             for c in published.CAPACITIES for router in published.ROUTERS + tuple(others)]
    if include_ablation:
      runs += [GridRun(arch, ABLATION_ROUTER, c, seed, softmax_combine=False)
               for c in published.CAPACITIES]
  return [r for r in runs
          if (routers is None or r.router in routers) and
          (capacities is None or r.capacity is None or r.capacity in capacities)]


def _check_registered(routers: Sequence[str], router_module: str) -> None:
  """Routers outside the paper's must be declared (declarations.py, or router_module's own)."""
  user_module.import_router_module(router_module)
  unknown = sorted(set(routers) - set(declarations.DECLARED))
  if unknown:
    raise ValueError(f'unknown router(s) {", ".join(unknown)}; valid: {declarations.DENSE}, '
                     f'{", ".join(sorted(declarations.DECLARED))} (a router of your own: '
                     '--router-module PATH).')


def config_arg(run: GridRun) -> str:
  """The --config value: 'configs/b32_soft_moe.py:c=2', 'configs/b32_dense.py',
  'configs/tiny.py:router=soft_moe,c=2', 'configs/tiny.py:router=dense', and for a router
  without a paper config file 'configs/router_lab.py:arch=b32,router=NAME,c=1'; a router
  module is passed as router_module=PATH."""
  module = f',router_module={run.router_module}' if run.router_module else ''
  if run.arch in ARGUMENT_CONFIGS:
    return (f'configs/{run.arch}.py:router=dense' if run.router == declarations.DENSE else
            f'configs/{run.arch}.py:router={run.router},c={run.capacity}{module}')
  if run.router == declarations.DENSE:
    return f'configs/{run.arch}_dense.py'
  if run.router in published.ROUTERS:
    return f'configs/{run.arch}_{run.router}.py:c={run.capacity}'
  return (f'configs/router_lab.py:arch={run.arch},router={run.router},c={run.capacity}'
          f'{module}')


def main_py_command(run: GridRun, workdir: str, python: str = DEFAULT_PYTHON) -> list[str]:
  """The trainer's command line for `run` (the default command template)."""
  command = [python, 'main.py', f'--config={config_arg(run)}', f'--workdir={workdir}']
  if not run.softmax_combine:
    command.append('--config.moe.router.softmax_combine=False')
  if run.seed:
    command.append(f'--config.seed={run.seed}')
  return command


def start(command: Sequence[str], log_path: str) -> subprocess.Popen:
  """Starts `command` with stdout and stderr appended to `log_path` (under a dated header)."""
  with open(log_path, 'a', encoding='utf-8') as log:
    log.write(f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")} {shlex.join(command)}\n')
    log.flush()
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
  """The last `lines` lines of a log, indented."""
  with open(path, encoding='utf-8', errors='replace') as f:
    return ''.join('    ' + line for line in f.readlines()[-lines:])


def _outcome(status: int, workdir: str) -> str | None:
  """None if the run finished, 'interrupted' (by Ctrl-C or a preemption, its checkpoint saved),
  or why it failed."""
  finished = os.path.exists(os.path.join(workdir, run_outputs.SUMMARY_FILE))
  if run_outputs.stopped_early(status, finished) or status == -signal.SIGINT:
    return 'interrupted'
  if status == 0:
    return None
  if status > 0:
    return f'exit status {status}'
  return f'killed by signal {-status}'


def keep_record(workdir: str, run: GridRun, destination: str) -> None:
  """Copies a finished run's summary.json, and its sweep.log's header and finished lines (what
  it ran, when, and its wall time), to DESTINATION/<arch>/<run name>/: the record a study
  commits, without the checkpoints. Both are written atomically."""
  target = run.workdir(destination)
  with open(os.path.join(workdir, run_outputs.SUMMARY_FILE), 'rb') as f:
    atomic.write_bytes(os.path.join(target, run_outputs.SUMMARY_FILE), f.read())
  with open(os.path.join(workdir, LOG_FILE), encoding='utf-8', errors='replace') as f:
    lines = [line for line in f if line.startswith('=== ')]
  atomic.write_text(os.path.join(target, LOG_FILE), ''.join(lines))


@dataclasses.dataclass
class _Sweep:
  """A sweep under way: its settings, the runs it has started and what came of them."""
  runs: Sequence[GridRun]
  root: str
  command: CommandFn
  jobs: int
  dry_run: bool
  out: TextIO | None
  records: str | None
  running: dict = dataclasses.field(default_factory=dict)   # Popen -> (tag, run, log, began).
  failed: list = dataclasses.field(default_factory=list)
  ran: int = 0
  skipped: int = 0
  interrupted: bool = False

  def say(self, text: str) -> None:
    print(text, file=self.out or sys.stdout, flush=True)

  def start_next(self, i: int, run: GridRun) -> None:
    """Starts run `i` (1-based), or skips it if it has finished, or prints it (dry run)."""
    workdir = run.workdir(self.root)
    tag = f'[{i}/{len(self.runs)}] {run.arch}/{run.name}'
    if os.path.exists(os.path.join(workdir, run_outputs.SUMMARY_FILE)):
      self.say(f'{tag}: done ({run_outputs.SUMMARY_FILE} exists), skipped')
      self.skipped += 1
      if self.records and not self.dry_run:
        keep_record(workdir, run, self.records)
      return
    argv = self.command(run, workdir)
    if self.dry_run:
      self.say(f'{tag}: {shlex.join(argv)}')
      return
    os.makedirs(workdir, exist_ok=True)
    log_path = os.path.join(workdir, LOG_FILE)
    self.say(f'{tag}: running, log {log_path}')
    self.running[start(argv, log_path)] = (tag, run, log_path, time.perf_counter())

  def finish(self, process: subprocess.Popen) -> None:
    """Records how a finished run's process ended."""
    tag, run, log_path, began = self.running.pop(process)
    self.ran += 1
    elapsed = time.perf_counter() - began
    reason = _outcome(process.returncode, run.workdir(self.root))
    if reason is None:
      with open(log_path, 'a', encoding='utf-8') as log:
        log.write(FINISHED_LINE.format(seconds=elapsed, jobs=self.jobs))
      if self.records:
        keep_record(run.workdir(self.root), run, self.records)
      self.say(f'{tag}: finished in {elapsed:.0f} s')
    elif reason == 'interrupted':
      self.say(f'{tag}: interrupted (exit status {process.returncode}); rerun the same command '
               'to resume.')
      self.interrupted = True
    else:
      self.say(f'{tag}: FAILED ({reason}) after {elapsed:.0f} s; end of {log_path}:\n'
               f'{log_tail(log_path)}')
      self.failed.append(run)

  def run_all(self) -> None:
    """Starts the runs in order, up to `jobs` at once, until all ran or one was interrupted."""
    pending = list(enumerate(self.runs, 1))
    while pending or self.running:
      while pending and len(self.running) < self.jobs and not self.interrupted:
        self.start_next(*pending.pop(0))
      if (self.interrupted or not pending) and not self.running:
        break
      finished = [p for p in self.running if p.poll() is not None]
      if not finished:
        time.sleep(POLL_SECONDS)
      for process in finished:
        self.finish(process)


def run_sweep(runs: Sequence[GridRun], root: str, command: CommandFn = main_py_command, *,
              jobs: int = 1, dry_run: bool = False, out: TextIO | None = None,
              records: str | None = None) -> int:
  """Runs every unfinished run, up to `jobs` at once, in order; returns 0, 1 (some run failed)
  or 130 (interrupted: Ctrl-C, or a trainer that stopped early after checkpointing on Ctrl-C or
  a preemption notice, run_outputs.stopped_early; no further run starts, and the running ones
  are waited for). With `records`, each run that finishes (or had finished) is copied there by
  keep_record."""
  if jobs < 1:
    raise ValueError(f'--jobs must be >= 1, got {jobs}.')
  sweep = _Sweep(runs, root, command, jobs, dry_run, out, records)
  try:
    sweep.run_all()
  except KeyboardInterrupt:
    for process in sweep.running:     # They got the Ctrl-C too: let them checkpoint and exit.
      process.wait()
    sweep.say('sweep interrupted; rerun the same command to resume (finished runs are skipped).')
    return run_outputs.INTERRUPTED
  if sweep.interrupted:
    return run_outputs.INTERRUPTED
  if dry_run:
    return 0
  failed = sweep.failed
  sweep.say(f'sweep: {sweep.ran} ran, {sweep.skipped} skipped, {len(failed)} failed' +
            (': ' + ', '.join(f'{r.arch}/{r.name}' for r in failed) if failed else ''))
  return 1 if failed else 0


def check_repository(runs: Sequence[GridRun], python: str):
  """Fails before anything runs unless main.py, the configs and the interpreter are reachable."""
  missing = [p for p in ['main.py'] + sorted({config_arg(r).split(':')[0] for r in runs})
             if not os.path.exists(p)]
  if missing:
    raise SystemExit(f'not found from {os.getcwd()}: {", ".join(missing)}; run the sweep from '
                     'the repository root (make sweep ARCH=...).')
  if not os.path.exists(python):
    raise SystemExit(f'--python {python} not found; run `make install` or pass --python.')


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--arch', required=True, choices=ARCHS)
  parser.add_argument('--workdir-root', required=True, help='Runs go to ROOT/<arch>/<run name>.')
  parser.add_argument('--seeds', type=int, default=1, help='Seeds 0..N-1 (default 1).')
  parser.add_argument('--include-ablation', action='store_true',
                      help='Add sinkhorn_tc without softmax combine, c = 1 and 2 (Figure 3).')
  parser.add_argument('--routers', type=_names,
                      help=f'Comma-separated: any of {declarations.DENSE}, the paper\'s '
                      f'{",".join(published.ROUTERS)} (the default) and every other registered '
                      'router (vmoe/routing/lab_routers.py, or one of --router-module).')
  parser.add_argument('--router-module', default='', help='A .py file or dotted module that '
                      'registers routers of your own (docs/routers.md); passed to every run.')
  parser.add_argument('--capacities', type=_names, help='Comma-separated: keep these of 1,2.')
  parser.add_argument('--jobs', type=int, default=1, help='Runs at once (default 1).')
  parser.add_argument('--records', help='Copy each finished run\'s summary.json (and its '
                      'sweep.log lines) to RECORDS/<arch>/<run name>/, to commit.')
  parser.add_argument('--dry-run', action='store_true', help='Print the commands; run nothing.')
  parser.add_argument('--python', default=DEFAULT_PYTHON, help='Interpreter for main.py.')
  args, overrides = parser.parse_known_args(argv)
  bad = [a for a in overrides if not a.startswith('--config.')]
  if bad:
    parser.error(f'unrecognized arguments: {" ".join(bad)} (only --config.KEY=VALUE overrides '
                 'are passed on to every run)')
  if args.jobs < 1:
    parser.error(f'--jobs must be >= 1, got {args.jobs}.')
  try:
    capacities = None if args.capacities is None else [int(c) for c in args.capacities]
    runs = make_grid(args.arch, args.seeds, args.include_ablation, args.routers, capacities,
                     args.router_module)
  except ValueError as e:
    parser.error(str(e))
  check_repository(runs, args.python)
  command = lambda run, workdir: main_py_command(run, workdir, args.python) + overrides
  return run_sweep(runs, args.workdir_root, command, jobs=args.jobs, dry_run=args.dry_run,
                   records=args.records)


def _names(text: str) -> list[str]:
  """'dense, softmax_tc' -> ['dense', 'softmax_tc']."""
  return [name.strip() for name in text.split(',') if name.strip()]


if __name__ == '__main__':
  sys.exit(main())
