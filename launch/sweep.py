"""One architecture's grid of paper runs, one after another, resumable.

  python -m launch.sweep --arch b32 --workdir-root workdirs [--seeds 1] [--include-ablation]
                         [--dry-run] [--config.KEY=VALUE ...]

The grid (paper Sec. 4.1): the six routers x capacity c in {1, 2} (k for token choice), 12 runs;
with --include-ablation also Sinkhorn Token Choice without softmax combine at k = 1 and 2 (the
paper's Figure 3). Seeds 0..N-1 with --seeds N, seed by seed. Each run is one command,
  .venv/bin/python main.py --config=configs/b32_sinkhorn_tc.py:c=2 \\
      --workdir=workdirs/b32/sinkhorn_tc_c2_nosmc_s1 \\
      --config.moe.router.softmax_combine=False --config.seed=1
(tiny: --config=configs/tiny.py:router=sinkhorn_tc,c=2), run from the repository root. Extra
--config.KEY=VALUE arguments (e.g. --config.mesh.expert=32 on a TPU v3-32) go to every run.

Resumable: a run whose workdir holds summary.json (the trainer writes it atomically as its last
act) is skipped, so a killed sweep, rerun, starts no finished run again; an unfinished run starts
again and the trainer resumes it from its newest checkpoint. Each run's output goes to
WORKDIR/sweep.log (appended, one header per attempt). A failing run is reported with the end of
its log and the sweep goes on; the exit status is 1 if any run failed. Ctrl-C reaches the running
trainer too (same process group): the sweep waits for it to checkpoint and exit, then stops.
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

from results import paper
from vmoe import run_protocol

ARCHS = ('b32', 'b16', 'l16', 'tiny')
ABLATION_ROUTER = 'sinkhorn_tc'     # Paper Figure 3: Sinkhorn Token Choice, k = 1 and 2.
LOG_FILE = 'sweep.log'
DEFAULT_PYTHON = '.venv/bin/python'
LOG_TAIL_LINES = 20


@dataclasses.dataclass(frozen=True)
class Run:
  """One cell of the grid."""
  arch: str
  router: str
  capacity: int
  seed: int = 0
  softmax_combine: bool = True

  @property
  def name(self) -> str:
    """'sinkhorn_tc_c2', 'sinkhorn_tc_c1_nosmc', 'soft_moe_c1_s2'."""
    return (f'{self.router}_c{self.capacity}' + ('' if self.softmax_combine else '_nosmc') +
            (f'_s{self.seed}' if self.seed else ''))

  def workdir(self, root: str) -> str:
    return os.path.join(root, self.arch, self.name)


CommandFn = Callable[[Run, str], list[str]]


def make_grid(arch: str, seeds: int = 1, include_ablation: bool = False) -> list[Run]:
  """The runs of one architecture: per seed, the c = 1 block, the c = 2 block, the ablation."""
  if arch not in ARCHS:
    raise ValueError(f'unknown arch {arch!r}; valid: {", ".join(ARCHS)}.')
  if seeds < 1:
    raise ValueError(f'--seeds must be >= 1, got {seeds}.')
  runs = []
  for seed in range(seeds):
    runs += [Run(arch, router, c, seed) for c in paper.CAPACITIES for router in paper.ROUTERS]
    if include_ablation:
      runs += [Run(arch, ABLATION_ROUTER, c, seed, softmax_combine=False)
               for c in paper.CAPACITIES]
  return runs


def config_arg(run: Run) -> str:
  """The --config value: 'configs/b32_soft_moe.py:c=2' or 'configs/tiny.py:router=soft_moe,c=2'."""
  if run.arch == 'tiny':
    return f'configs/tiny.py:router={run.router},c={run.capacity}'
  return f'configs/{run.arch}_{run.router}.py:c={run.capacity}'


def main_py_command(run: Run, workdir: str, python: str = DEFAULT_PYTHON) -> list[str]:
  """The trainer's command line for `run` (the default command template)."""
  command = [python, 'main.py', f'--config={config_arg(run)}', f'--workdir={workdir}']
  if not run.softmax_combine:
    command.append('--config.moe.router.softmax_combine=False')
  if run.seed:
    command.append(f'--config.seed={run.seed}')
  return command


def execute(command: Sequence[str], log_path: str) -> int:
  """Runs `command` with stdout and stderr appended to `log_path`; returns its exit status.

  On Ctrl-C (which the child receives too) waits for the child to finish its own shutdown
  before re-raising, so the trainer's interrupt checkpoint is not cut short.
  """
  with open(log_path, 'a', encoding='utf-8') as log:
    log.write(f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")} {shlex.join(command)}\n')
    log.flush()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    try:
      return process.wait()
    except KeyboardInterrupt:
      process.wait()
      raise


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
  """The last `lines` lines of a log, indented."""
  with open(path, encoding='utf-8', errors='replace') as f:
    return ''.join('    ' + line for line in f.readlines()[-lines:])


def run_sweep(runs: Sequence[Run], root: str, command: CommandFn = main_py_command, *,
              dry_run: bool = False, out: TextIO | None = None) -> int:
  """Runs every unfinished run in order; returns 0, 1 (some run failed) or 130 (interrupted:
  Ctrl-C, or a trainer that exited 130 after checkpointing on SIGINT/SIGTERM)."""
  failed, ran, skipped = [], 0, 0
  say = lambda text: print(text, file=out or sys.stdout, flush=True)
  for i, run in enumerate(runs, 1):
    workdir = run.workdir(root)
    tag = f'[{i}/{len(runs)}] {run.arch}/{run.name}'
    if os.path.exists(os.path.join(workdir, run_protocol.SUMMARY_FILE)):
      say(f'{tag}: done ({run_protocol.SUMMARY_FILE} exists), skipped')
      skipped += 1
      continue
    argv = command(run, workdir)
    if dry_run:
      say(f'{tag}: {shlex.join(argv)}')
      continue
    os.makedirs(workdir, exist_ok=True)
    log_path = os.path.join(workdir, LOG_FILE)
    say(f'{tag}: running, log {log_path}')
    start = time.perf_counter()
    try:
      status = execute(argv, log_path)
    except KeyboardInterrupt:
      say(f'{tag}: interrupted; rerun the same command to resume (finished runs are skipped).')
      return run_protocol.INTERRUPTED
    ran += 1
    elapsed = time.perf_counter() - start
    if status in (run_protocol.INTERRUPTED, -signal.SIGINT):   # Trainer stopped by Ctrl-C / SIGINT.
      say(f'{tag}: interrupted (exit status {status}); rerun the same command to resume.')
      return run_protocol.INTERRUPTED
    if status == 0 and os.path.exists(os.path.join(workdir, run_protocol.SUMMARY_FILE)):
      say(f'{tag}: finished in {elapsed:.0f} s')
      continue
    if status > 0:
      reason = f'exit status {status}'
    elif status < 0:
      reason = f'killed by signal {-status}'
    else:
      reason = f'exited 0 without writing {run_protocol.SUMMARY_FILE}'
    say(f'{tag}: FAILED ({reason}) after {elapsed:.0f} s; end of {log_path}:\n'
        f'{log_tail(log_path)}')
    failed.append(run)
  if dry_run:
    return 0
  say(f'sweep: {ran} ran, {skipped} skipped, {len(failed)} failed' +
      (': ' + ', '.join(f'{r.arch}/{r.name}' for r in failed) if failed else ''))
  return 1 if failed else 0


def check_repository(runs: Sequence[Run], python: str):
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
  parser.add_argument('--dry-run', action='store_true', help='Print the commands; run nothing.')
  parser.add_argument('--python', default=DEFAULT_PYTHON, help='Interpreter for main.py.')
  args, overrides = parser.parse_known_args(argv)
  bad = [a for a in overrides if not a.startswith('--config.')]
  if bad:
    parser.error(f'unrecognized arguments: {" ".join(bad)} (only --config.KEY=VALUE overrides '
                 'are passed on to every run)')
  runs = make_grid(args.arch, args.seeds, args.include_ablation)
  check_repository(runs, args.python)
  command = lambda run, workdir: main_py_command(run, workdir, args.python) + overrides
  return run_sweep(runs, args.workdir_root, command, dry_run=args.dry_run)


if __name__ == '__main__':
  sys.exit(main())
