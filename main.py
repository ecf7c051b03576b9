"""Pretrains and evaluates one config.

  python main.py --config=configs/b32_sinkhorn_ec.py --workdir=DIR

Overrides work as ml-collections users expect, e.g. --config.num_train_steps=100 or
--config=configs/b32_sinkhorn_ec.py:c=2 for capacity factor 2 (k=2 for token choice routers).

A user error (base/errors.py UserError: a bad flag, config, workdir or missing data) prints one
message saying what to change and exits with status 2; --verbose or VMOE_VERBOSE=1 adds its
traceback (vmoe/run/cli.py). Any other exception is a bug and keeps its traceback.

The console shows the run's header, progress, evaluations and summary (vmoe/run/console.py); the
libraries' INFO logs go to WORKDIR/log.txt, and --verbose shows them too (vmoe/run/run_log.py).
"""
import os
import sys

# This directory goes first on sys.path: the project's top-level packages have generic names
# (base, configs, data, evaluation, launch, results, vmoe), and an installed package of the same
# name found earlier (on PYTHONPATH under PYTHONSAFEPATH or -P, say) must not stand in for them.
_REPO = os.path.dirname(os.path.abspath(__file__))
if not sys.path or os.path.abspath(sys.path[0] or os.curdir) != _REPO:
  sys.path.insert(0, _REPO)

# pylint: disable=wrong-import-position
from absl import app
from absl import flags
from ml_collections import config_flags

from vmoe.model import sharding
from vmoe.run import cli
from vmoe.run import run_log
from vmoe.train import experiment as experiment_lib
from vmoe.train import workdir as workdir_lib

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file, optionally with an argument: configs/FILE.py:c=2.',
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for checkpoints, metrics and summary.json.')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None, 'host:port of process 0 when several processes run without '
    'SLURM or Cloud TPU (default: JAX_COORDINATOR_ADDRESS; unset: one process).')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', None, 'Processes in the run (default: JAX_NUM_PROCESSES).')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', None, 'This process, 0 .. num_processes - 1 (default: JAX_PROCESS_ID).')
_VERBOSE = flags.DEFINE_bool(
    'verbose', False, 'Show the traceback of a user error too, and the libraries\' INFO logs '
    '(always in WORKDIR/log.txt) on the console (or set VMOE_VERBOSE=1).')
flags.mark_flags_as_required(['config', 'workdir'])

def parse_experiment() -> experiment_lib.Experiment:
  """The experiment of the parsed --config and its overrides, every check run
  (vmoe/train/experiment.py parse): batch sizes the user set are kept, the config file's fitted to
  the devices."""
  return experiment_lib.parse(_CONFIG.value, fixed=_overrides())


def _overrides() -> set[str]:
  """The dotted config keys set on the command line (--config.KEY=VALUE)."""
  return set(config_flags.get_override_values(flags.FLAGS['config']))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}; use --config.KEY=VALUE.')
  # A quiet console: library INFO logs are held from here on, for the workdir's log file.
  run_log.hold(verbose=_VERBOSE.value or cli.verbose([]))   # [] : the flag, or VMOE_VERBOSE.
  sharding.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  # The config is parsed into typed sections once; a bad one fails here, in seconds: the
  # trainer's imports (TensorFlow, TFDS, orbax) come after.
  experiment = parse_experiment()
  # So do the workdir's checks, and a run it holds sets the batch sizes the user did not; the
  # data's need TensorFlow (trainer.train_and_evaluate's stage 1, in two parts).
  experiment = workdir_lib.claim(_WORKDIR.value, experiment, fixed=_overrides())
  run_log.to_workdir(_WORKDIR.value)
  with run_log.native_stderr_to_log():   # TensorFlow's C++ start-up lines.
    from vmoe.train import trainer  # pylint: disable=g-import-not-at-top
  config_file = flags.FLAGS['config'].config_filename.partition(':')[0]
  trainer.train_and_evaluate(experiment, _WORKDIR.value, config_file)


if __name__ == '__main__':
  cli.run(main)
