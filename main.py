"""Pretrains and evaluates one config: python main.py --config=configs/b32_sinkhorn_ec.py --workdir=DIR.

Overrides work as ml-collections users expect, e.g. --config.num_train_steps=100 or
--config=configs/b32_sinkhorn_ec.py:c=2 for capacity factor 2 (k=2 for token choice routers).

A user error (base/errors.py UserError: a bad flag, config, workdir or missing data) prints one
message saying what to change and exits with status 2; --verbose or VMOE_VERBOSE=1 adds its
traceback. Any other exception is a bug and keeps its traceback.

The console shows the run's header, progress, evaluations and summary (vmoe/console.py); the
libraries' INFO logs go to WORKDIR/log.txt, and --verbose shows them too (vmoe/run_log.py).
"""
import os
import sys
import traceback

from absl import app
from absl import flags
from ml_collections import config_flags

from base import errors
from configs import experiment as experiment_parser
from vmoe import run_log
from vmoe import sharding

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Config file, optionally with an argument: configs/FILE.py:c=2.',
    lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and summary.json.')
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

USER_ERROR_STATUS = 2   # As for a usage error (argparse, absl's UsageError).


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}; use --config.KEY=VALUE.')
  # A quiet console: library INFO logs are held from here on, for the workdir's log file.
  run_log.hold(verbose=_VERBOSE.value or _verbose([]))   # [] : the flag, or VMOE_VERBOSE.
  sharding.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  # The config is parsed into typed sections once; a bad one fails here, in seconds: the
  # trainer's imports (TensorFlow, clu, wandb) come after. Batch sizes the user set are kept;
  # the config file's are fitted to the devices (configs/batches.py).
  overrides = config_flags.get_override_values(flags.FLAGS['config'])
  experiment = experiment_parser.parse(_CONFIG.value, fixed=set(overrides))
  run_log.to_workdir(_WORKDIR.value)
  with run_log.native_stderr_to_log():   # TensorFlow's C++ start-up lines.
    from vmoe import trainer  # pylint: disable=g-import-not-at-top
  config_file = flags.FLAGS['config'].config_filename.partition(':')[0]
  trainer.train_and_evaluate(experiment, _WORKDIR.value, config_file)


def parse_flags(argv: list[str]) -> list[str]:
  """app.run's flags parser: a bad flag or config becomes a UserError, not absl's FATAL exit.

  The config file runs while its flag is parsed: ml-collections re-raises its errors as the
  same type with the traceback pasted into the message, and absl wraps that in a flags.Error,
  so a UserError the config raised is the innermost of the chain, and its message is the one to
  show. A KeyError or IndexError from an override (--config.modle.x=1) carries ml-collections'
  "did you mean" text. Any other error raised in a config's get_config is a bug: re-raised.
  """
  try:
    return flags.FLAGS(argv)
  except (flags.Error, KeyError, IndexError) as e:
    user_error = _innermost_user_error(e)
    if user_error is not None:
      raise errors.UserError(str(user_error)) from e
    if _raised_in_get_config(e):
      raise
    if isinstance(e, flags.Error):
      raise errors.UserError(str(e)) from e
    what = str(e.args[0] if e.args else e).replace('\n', '. ')
    raise errors.UserError(f'a --config override names a key the config lacks: {what} (write '
                           '--config.KEY=VALUE with KEY dotted, e.g. --config.moe.group_size=8).'
                           ) from e


def _chain(error: BaseException | None):
  """error, then the exceptions it was raised from or while handling, innermost last."""
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def _innermost_user_error(error: BaseException) -> errors.UserError | None:
  found = [e for e in _chain(error) if isinstance(e, errors.UserError)]
  return found[-1] if found else None


def _raised_in_get_config(error: BaseException) -> bool:
  """Whether a config file's get_config (or the code it calls) raised `error` or its causes."""
  return any(frame.name == 'get_config' for e in _chain(error)
             for frame in traceback.extract_tb(e.__traceback__))


def _verbose(argv: list[str]) -> bool:
  # Read from argv, not the flag: a flag error happens before the flags are parsed.
  return os.environ.get('VMOE_VERBOSE', '') not in ('', '0') or '--verbose' in argv


def run(argv: list[str] | None = None) -> None:
  """app.run(main), with a UserError reported as one message on stderr and exit status 2."""
  argv = sys.argv if argv is None else argv
  try:
    app.run(main, argv, flags_parser=parse_flags)
  except errors.UserError as e:
    if _verbose(argv):
      traceback.print_exc()
    sys.stderr.write(f'Error: {e}\n')
    sys.exit(USER_ERROR_STATUS)


if __name__ == '__main__':
  run()
