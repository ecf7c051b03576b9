"""From a config (ml-collections) to the typed experiment record, once per run; and back.

`parse(config)` builds a vmoe.experiment.Experiment (its `from_dict`): every section through its
owner's frozen dataclass, which checks its own values (vit.ModelConfig, moe.MoeConfig holding a
router.RouterConfig, data.config.DataConfig, ...), then `check` runs the checks that span
sections, the mesh's automatic sizes become numbers (vmoe/sharding.py `resolve`), and the batch
sizes are fitted to the devices (configs/batches.py). Errors are base/errors.py UserErrors
naming the key to change: the sections' own checks raise ValueError (they also guard programmatic
use), and `parse`, where a user's config comes in, turns those into UserErrors. main.py calls
`parse` before anything compiles.

`section(instance)` goes the other way: the configs build their blocks from the section
dataclasses (configs/common.py), so every default lives in one place, the dataclass.
"""
from collections.abc import Collection
import dataclasses
import typing

import jax
import ml_collections as mlc

from base import errors
from configs import batches
from vmoe import experiment as experiment_lib
from vmoe import sharding
from vmoe import vit


def section(instance) -> mlc.ConfigDict:
  """A section dataclass as a config block: every field, nested sections as blocks, and None
  fields as typed placeholders (so that --config.KEY=VALUE can set them)."""
  values = {}
  for field in dataclasses.fields(instance):
    value = getattr(instance, field.name)
    if dataclasses.is_dataclass(value):
      value = section(value)
    elif value is None:
      value = mlc.config_dict.placeholder(_optional_type(field.type))
    values[field.name] = value
  return mlc.ConfigDict(values)


def _optional_type(annotation) -> type:
  """int for `int | None` (the type a placeholder takes)."""
  types = [t for t in typing.get_args(annotation) if t is not type(None)]
  return types[0] if len(types) == 1 else object


def parse(config: mlc.ConfigDict | dict, num_devices: int | None = None,
          fixed: Collection[str] | None = None) -> experiment_lib.Experiment:
  """The experiment record of `config` (a config, or a recorded one: the dict of a run's
  config.json), checked (see `check`) and with its batch sizes fitted to `num_devices` (default:
  all of jax.devices()) and its mesh's automatic sizes resolved (vmoe/sharding.py `resolve`);
  fails with a UserError naming the key to change.

  fixed: the dotted keys the user set on the command line (main.py): batch sizes among them are
  never changed, only refused (configs/batches.py `fit`). None: every key is fixed.
  """
  num_devices = jax.device_count() if num_devices is None else num_devices
  tree = config.to_dict() if isinstance(config, mlc.ConfigDict) else dict(config)
  experiment = experiment_lib.from_dict(tree)
  # The mesh's automatic sizes (-1) become this run's numbers: the mesh it builds, its console
  # header and its record (WORKDIR/config.json) all show the devices along each axis.
  experiment = dataclasses.replace(experiment, mesh=check(experiment, num_devices))
  return batches.fit(experiment, num_devices, fixed)


def check(experiment: experiment_lib.Experiment,
          num_devices: int | None = None) -> sharding.MeshConfig:
  """The checks that span sections, but the batch sizes' (configs/batches.py); each error is a
  UserError saying which value to change. Returns the mesh with its automatic sizes resolved
  (vmoe/sharding.py `resolve`), the one the checks passed.

  The model's classes are the data's; MoE layers fit the model (placement, capacity of the
  routing groups' tokens); the mesh, its automatic sizes resolved, fits `num_devices` (default:
  all of jax.devices()) and its expert axis splits the experts.
  """
  num_devices = jax.device_count() if num_devices is None else num_devices
  model, moe = experiment.model, experiment.moe
  if model.num_classes != experiment.data.num_classes:
    raise errors.UserError(f'model.num_classes={model.num_classes} but the data has '
                           f'{experiment.data.num_classes} classes (data.num_classes); make them '
                           'equal.')
  try:
    vit.build_model(model, moe)     # Fails when moe.every places no MoE layer in the model.
    if moe.num_experts > 0:
      moe.router.capacity(moe.images_per_group * model.tokens_per_image, moe.num_experts)
    mesh = sharding.resolve(experiment.mesh, num_devices, moe.num_experts)
  except ValueError as e:
    raise errors.UserError(str(e)) from None
  if moe.num_experts % mesh.expert:
    raise errors.UserError(f'moe.num_experts={moe.num_experts} experts do not split over '
                           f'mesh.expert={mesh.expert} devices; set '
                           f'--config.mesh.expert to a divisor of {moe.num_experts}.')
  return mesh
