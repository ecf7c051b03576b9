"""A run's workdir, checked before anything compiles: writable, and holding no other run.

WORKDIR/config.json (run_outputs.CONFIG_FILE) records the run's resolved config when it starts;
a rerun of the same command resumes only if its config is the same, so that one workdir never
mixes two experiments' checkpoints and metrics.
"""
import json
import os
import tempfile

import jax

from base import atomic
from base import errors
from vmoe import experiment as experiment_lib
from vmoe import run_outputs


def claim(workdir: str, experiment: experiment_lib.Experiment) -> None:
  """A run's start in `workdir`: prepare() then guard(). Idempotent: a workdir claimed again (a
  rerun, or an in-process caller's second run) is accepted while it holds the same config."""
  prepare(workdir)
  guard(workdir, experiment)


def prepare(workdir: str) -> None:
  """Creates `workdir` and writes a probe file in it, so that a path the user cannot write fails
  now, as a UserError naming it, not at the first checkpoint."""
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise errors.UserError(f'cannot write in --workdir={workdir} ({e.strerror or e}); give a '
                           'directory you can create and write.') from e


def guard(workdir: str, experiment: experiment_lib.Experiment) -> None:
  """Refuses a workdir that holds a run of a different config, or one an older trainer wrote;
  records the resolved config (in the config's layout: vmoe/experiment.py parses it back)
  otherwise."""
  path = os.path.join(workdir, run_outputs.CONFIG_FILE)
  current = experiment.to_dict()
  if not os.path.exists(path):
    if jax.process_index() == 0:
      with errors.disk_full_is_user_error(workdir, f'writing {path}',
                                          lambda: 'Free some space there and rerun.'):
        atomic.write_json(path, current)
    return
  with open(path, encoding='utf-8') as f:
    previous = json.load(f)
  # The mesh is resolved when the config is parsed; older trainers recorded -1 for its automatic
  # sizes, and their workdirs are not resumed.
  if any(size < 0 for size in previous.get('mesh', {}).values()):
    raise errors.UserError(
        f'{path} records its mesh with automatic (-1) sizes: it was written by an older trainer, '
        'whose runs this one does not resume. Use a new --workdir (or delete this one to start '
        'over).')
  if previous != current:
    changed = sorted(k for k in set(previous) | set(current) if previous.get(k) != current.get(k))
    raise errors.UserError(f'{workdir} holds a run of a different config (differences under: '
                           f'{", ".join(changed)}); use a new --workdir, or delete this one to '
                           'start over.')
