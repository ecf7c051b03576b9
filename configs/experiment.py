"""From a config (ml-collections) to the typed experiment record, once per run; and back.

`parse(config)` builds a vmoe.experiment.Experiment: every section through its owner's frozen
dataclass, which checks its own values (vit.ModelConfig, moe.MoeConfig holding a
router.RouterConfig, data.config.DataConfig, ...), then `check` runs the checks that span
sections. Errors name the key to change. main.py calls `parse` before anything compiles.

`section(instance)` goes the other way: the configs build their blocks from the section
dataclasses (configs/common.py), so every default lives in one place, the dataclass.
"""
import dataclasses
import typing

import jax
import ml_collections as mlc

from data import config as data_config
from evaluation import classify
from evaluation import fewshot
from vmoe import checkpointing
from vmoe import experiment as experiment_lib
from vmoe import moe as moe_lib
from vmoe import optim
from vmoe import sharding
from vmoe import vit
from vmoe.routing import router as router_lib

# Config key -> the dataclass of that section (moe, which holds the router, is built apart).
SECTIONS = {
    'model': vit.ModelConfig,
    'data': data_config.DataConfig,
    'optimizer': optim.OptimizerConfig,
    'schedule': optim.ScheduleConfig,
    'eval': classify.EvalConfig,
    'fewshot': fewshot.FewShotConfig,
    'checkpoint': checkpointing.CheckpointConfig,
    'wandb': experiment_lib.WandbConfig,
    'mesh': sharding.MeshConfig,
}


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


def parse(config: mlc.ConfigDict | dict,
          num_devices: int | None = None) -> experiment_lib.Experiment:
  """The experiment record of `config` (a config, or a recorded one: the dict of a run's
  config.json), checked (see `check`); fails naming the key to change."""
  tree = config.to_dict() if isinstance(config, mlc.ConfigDict) else dict(config)
  sections = {key: _build(cls, tree.get(key), key) for key, cls in SECTIONS.items()}
  moe = dict(_block(tree.get('moe'), 'moe'))
  router = moe.pop('router', None)
  dense = moe.get('num_experts') == 0
  moe['router'] = None if dense else _build(router_lib.RouterConfig, router, 'moe.router')
  sections['moe'] = _build(moe_lib.MoeConfig, moe, 'moe')
  run = {k: v for k, v in tree.items() if k not in sections}
  experiment = _build(experiment_lib.Experiment, {**run, **sections}, 'config')
  check(experiment, num_devices)
  return experiment


def _block(values, where: str) -> dict:
  if not isinstance(values, dict):
    raise ValueError(f'config.{where} is missing or not a block; build it with the '
                     'configs/common.py helpers.')
  return values


def _build(cls, values, where: str):
  """cls(**values), with unknown and missing keys and the class's own errors named."""
  values = _block(values, where)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  prefix = '' if where == 'config' else f'{where}.'
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise ValueError(f'unknown config key(s) {", ".join(prefix + k for k in unknown)}; valid: '
                     f'{", ".join(prefix + k for k in fields)}.')
  required = [name for name, f in fields.items() if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING and name not in values]
  if required:
    raise ValueError(f'the config lacks {", ".join(prefix + k for k in required)}.')
  try:
    return cls(**values)
  except (TypeError, ValueError) as e:
    named = where == 'config' or prefix in str(e)     # The message already names the key.
    raise ValueError(str(e) if named else f'{where}: {e}') from None


def check(experiment: experiment_lib.Experiment, num_devices: int | None = None) -> None:
  """The checks that span sections; each error says which value to change.

  The model's classes are the data's; MoE layers fit the model (placement, capacity of the
  routing groups' tokens); and every batch the model sees (training, eval, few-shot) splits over
  `num_devices` (default: all of jax.devices()) into whole routing groups on each device.
  """
  num_devices = jax.device_count() if num_devices is None else num_devices
  model, moe = experiment.model, experiment.moe
  if model.num_classes != experiment.data.num_classes:
    raise ValueError(f'model.num_classes={model.num_classes} but the data has '
                     f'{experiment.data.num_classes} classes (data.num_classes); make them equal.')
  vit.build_model(model, moe)     # Fails when moe.every places no MoE layer in the model.
  if moe.num_experts > 0:
    moe.router.capacity(moe.images_per_group * model.tokens_per_image, moe.num_experts)
  batches = {'batch_size': experiment.batch_size, 'eval.batch_size': experiment.eval.batch_size,
             'fewshot.batch_size': experiment.fewshot.batch_size}
  for key, batch_size in batches.items():
    _check_batch(key, batch_size, num_devices, moe)


def _check_batch(key: str, batch_size: int, num_devices: int, moe: moe_lib.MoeConfig) -> None:
  """Each device's share of the batch is a whole number of routing groups."""
  if batch_size < 1 or batch_size % num_devices:
    raise ValueError(f'{key}={batch_size} does not split over {num_devices} devices; use a '
                     f'positive multiple of {num_devices}.')
  per_device = batch_size // num_devices
  if moe.num_experts > 0 and per_device % moe.group_size:
    raise ValueError(f'{key}={batch_size} gives {per_device} images per device, not a multiple '
                     f'of moe.group_size={moe.group_size} images per routing group; change '
                     f'{key} to a multiple of {num_devices * moe.group_size} or change '
                     'moe.group_size.')
