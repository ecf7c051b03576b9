"""Batch sizes that split into whole routing groups on every device: fitted, or one error.

Every batch the model sees (training, eval, few-shot) is split over all devices, and each
device's share must be a whole number of routing groups (moe.group_size images; one image for a
dense model), so the sizes that work are the multiples of `unit` = devices x group size. A batch
size that the config file set is a default for the devices it was written for: where it does not
fit this run's devices it is rounded up to the next multiple of the unit, with a warning, so that
e.g. `--config.mesh.expert=8` on 8 devices needs no other override. A size the user chose on the
command line is kept; when such sizes do not fit, one error names every override needed. The
resolved sizes are what the run records (WORKDIR/config.json), so a fitted run is not mistaken
for one at the config file's sizes.
"""
from collections.abc import Collection
import dataclasses
import math

from absl import logging

from base import errors
from vmoe import experiment as experiment_lib

KEYS = ('batch_size', 'eval.batch_size', 'fewshot.batch_size')


def unit(num_devices: int, group_size: int, num_experts: int) -> int:
  """The batch sizes that fit are the positive multiples of this: a routing group per device."""
  return num_devices * (group_size if num_experts > 0 else 1)


def fitted(batch_size: int, step: int) -> int:
  """The smallest multiple of `step` that is >= batch_size (and >= step)."""
  return max(1, math.ceil(batch_size / step)) * step


def fit(experiment: experiment_lib.Experiment, num_devices: int,
        fixed: Collection[str] | None = None) -> experiment_lib.Experiment:
  """`experiment` with its batch sizes fitted to `num_devices` (see the module docstring).

  fixed: the keys (KEYS' spelling) the user chose; a size among them that does not fit fails.
  None: every key is fixed (fail rather than change a value; for callers with no command line).
  """
  moe = experiment.moe
  step = unit(num_devices, moe.group_size, moe.num_experts)
  sizes = {key: _get(experiment, key) for key in KEYS}
  misfits = {key: size for key, size in sizes.items() if size % step}
  refused = {key: size for key, size in misfits.items() if fixed is None or key in fixed}
  if refused:
    raise errors.UserError(_message(refused, num_devices, moe, step))
  for key, size in misfits.items():
    logging.warning('%s=%d does not split into whole routing groups over %d devices; using %d '
                    '(set --config.%s to choose).', key, size, num_devices, fitted(size, step), key)
    experiment = _replace(experiment, key, fitted(size, step))
  return experiment


def _message(refused: dict, num_devices: int, moe, step: int) -> str:
  """One error for every refused size: why each fails, then all the overrides that fix them."""
  reasons = []
  for key, size in refused.items():
    per_device = size / num_devices
    if size % num_devices:
      reasons.append(f'{key}={size} does not split over {num_devices} devices')
    else:
      reasons.append(f'{key}={size} gives {per_device:.0f} images per device, not a multiple of '
                     f'moe.group_size={moe.group_size} images per routing group')
  overrides = ' '.join(f'--config.{key}={fitted(size, step)}' for key, size in refused.items())
  group = f' x moe.group_size={moe.group_size}' if moe.num_experts > 0 else ''
  return (f'{"; ".join(reasons)}. Set {overrides} (any positive multiple of {step} = '
          f'{num_devices} devices{group})'
          + (', or change moe.group_size.' if moe.num_experts > 0 else '.'))


def _get(experiment, key: str) -> int:
  node = experiment
  for part in key.split('.'):
    node = getattr(node, part)
  return node


def _replace(node, key: str, value):
  """A copy of the frozen dataclass `node` with the dotted `key` set to `value`."""
  head, _, rest = key.partition('.')
  if not rest:
    return dataclasses.replace(node, **{head: value})
  return dataclasses.replace(node, **{head: _replace(getattr(node, head), rest, value)})
