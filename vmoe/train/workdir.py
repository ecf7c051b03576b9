"""A run's workdir, checked before anything compiles: writable, and holding no other run.

WORKDIR/config.json (run_outputs.CONFIG_FILE) records the run's resolved config when it starts;
a rerun resumes only if its config is the same but for the mesh, so that one workdir never mixes
two experiments' checkpoints and metrics, while a run may go on over another number of devices
with its recorded batch sizes (`guard`).
"""
from collections.abc import Collection
import json
import os
import tempfile

import jax

from base import atomic
from base import errors
from vmoe.run import run_outputs
from vmoe.train import experiment as experiment_lib

SHOWN_KEYS = 8   # The differing keys a refusal names.
MESH = 'mesh'    # The config's section that is no part of a run's identity (guard).


def claim(workdir: str, experiment: experiment_lib.Experiment,
          fixed: Collection[str] | None = None) -> experiment_lib.Experiment:
  """A run's start in `workdir`: prepare() then guard(); returns the experiment to run. Idempotent:
  a workdir claimed again (a rerun, or an in-process caller's second run) is accepted while it
  holds the same config."""
  prepare(workdir)
  return guard(workdir, experiment, fixed)


def check_claimed(workdir: str, experiment: experiment_lib.Experiment) -> None:
  """Raises ValueError unless `workdir` was claimed for `experiment` (its config.json holds the
  same run, the mesh aside): the trainer trains in a claimed workdir and does not claim it again.
  """
  path = os.path.join(workdir, run_outputs.CONFIG_FILE)
  if not os.path.exists(path):
    raise ValueError(f'{workdir} is not claimed: call vmoe.train.workdir.claim(workdir, '
                     'experiment) first and train the experiment it returns, as main.py does.')
  with open(path, encoding='utf-8') as f:
    recorded = experiment_lib.resolve_recorded(json.load(f))
  changed = [key for key in run_outputs.config_differences(recorded, experiment.to_dict())
             if not key.startswith(f'{MESH}.')]
  if changed:
    raise ValueError(f'{workdir} was claimed for another run (it differs in '
                     f'{", ".join(changed[:SHOWN_KEYS])}); train the experiment claim returned.')


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


def guard(workdir: str, experiment: experiment_lib.Experiment,
          fixed: Collection[str] | None = None) -> experiment_lib.Experiment:
  """The experiment to run in `workdir`: `experiment` itself in a new workdir, whose config it
  records (in the config's layout: vmoe/train/experiment.py parses it back); in a workdir that holds
  a run, `experiment` resuming it, or a UserError if that run's config differs.

  What identifies the run is its resolved config less the mesh: a run resumes on another number
  of devices with its recorded batch sizes (experiment.with_recorded_batches; `fixed`: the keys
  the user set on the command line, which stay theirs). The recorded config is compared as this
  code resolves it (experiment.resolve_recorded): keys added since it was written count as their
  defaults.
  """
  path = os.path.join(workdir, run_outputs.CONFIG_FILE)
  if not os.path.exists(path):
    if jax.process_index() == 0:
      with errors.disk_full_is_user_error(workdir, f'writing {path}',
                                          lambda: 'Free some space there and rerun.'):
        atomic.write_json(path, experiment.to_dict())
    return experiment
  with open(path, encoding='utf-8') as f:
    previous = json.load(f)
  # The mesh is resolved when the config is parsed; older trainers recorded -1 for its automatic
  # sizes, and their workdirs are not resumed.
  if any(size < 0 for size in previous.get('mesh', {}).values()):
    raise errors.UserError(
        f'{path} records its mesh with automatic (-1) sizes: it was written by an older trainer, '
        'whose runs this one does not resume. Use a new --workdir (or delete this one to start '
        'over).')
  previous = experiment_lib.resolve_recorded(previous)
  experiment = experiment_lib.with_recorded_batches(experiment, previous, fixed)
  changed = [key for key in run_outputs.config_differences(previous, experiment.to_dict())
             if key.split('.')[0] != MESH]
  if changed:
    more = f', ... ({len(changed)} keys)' if len(changed) > SHOWN_KEYS else ''
    raise errors.UserError(f'{workdir} holds a run of a different config (differences under: '
                           f'{", ".join(changed[:SHOWN_KEYS])}{more}); use a new --workdir, or '
                           'delete this one to start over.')
  return experiment
