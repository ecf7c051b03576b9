"""The experiment record, and `parse`: the one way from a config to a record valid by construction.

A run's config becomes an `Experiment` once, at the start of the run (main.py), and library code
then takes its own section (vit_config.ModelConfig, moe_config.MoeConfig, ...), never the config
tree, and trusts it: the rules below are checked here and nowhere else. The sections' classes
import no JAX, each beside what it configures, so that configs/ load without JAX.

`parse(tree, num_devices)` runs every check, in this order, each written once:
  1. the keys: an unknown or missing key is named, and so is a number that is not finite
     (`_build`);
  2. each section's own values: its owner's frozen dataclass checks them as it is built
     (vit_config.ModelConfig, moe_config.MoeConfig holding a router_config.RouterConfig,
     data.config.DataConfig, optim_config.*Config, eval_config.EvalConfig,
     fewshot.FewShotConfig, checkpoint_config.CheckpointConfig, wandb_config.WandbConfig,
     mesh_config.MeshConfig; and the run-level keys, `Experiment`); the router's module (a
     user's) is imported first, and its implementation must be registered;
  3. the rules that span sections (`_check_across_sections`): the model's classes are the data's,
     MoE layers fit the model's blocks, the router's allocations accept its T and E (expert
     choice has its C tokens to choose within a routing group's T), the warm-up ends before
     training does;
  4. the mesh: its automatic sizes become this run's numbers and it must fit the devices and split
     the experts (vmoe/model/mesh_config.py `resolve`);
  5. the batch sizes: each a whole number of routing groups on every device (`fit_batches`);
  6. the pp strings, cut once for where their tails run (`Experiment.pp_splits`): under
     data.augment_on = 'device', every pp's tail must be one the accelerator runs.
Errors are base/errors.py UserErrors naming the key to change (main.py: one line, exit status 2).
The sections' own checks raise ValueError (they also guard programmatic use), which `parse` turns
into UserErrors.

`to_dict()` has the config's layout, so a recorded run's config (its config.json, or
summary.json's resolved_config) parses back into the same record. configs/blocks.py
`config_block(section)` goes the other way: the configs build their blocks from the section
dataclasses, so every default lives in one place, the dataclass.
"""
from collections.abc import Collection, Mapping
import dataclasses
import functools
import json
import math
import typing

from absl import logging
import jax
import ml_collections as mlc

from base import errors
from data import config as data_config
from data.pp import device_split
from evaluation import eval_config
from evaluation import fewshot
from vmoe.model import mesh_config
from vmoe.model import moe_config
from vmoe.model import vit_config
from vmoe.routing import declarations
from vmoe.routing import registry
from vmoe.routing import router as router_lib
from vmoe.routing import router_config
from vmoe.routing import user_module
from vmoe.run import checkpoint_config
from vmoe.run import wandb_config
from vmoe.train import losses
from vmoe.train import optim_config


@dataclasses.dataclass(frozen=True)
class Experiment:
  """Run-level keys and the sections of one run.

  seed: the initialisation, data order and step keys. batch_size: images per step over all
  devices. loss: vmoe/train/losses.py LOSSES ('sigmoid_xent' for multi-label data). mixup_alpha: the
  mixup concentration (0: off). log_every_steps: how often metrics are written. config_arg: the
  config file's argument ('c=2,runlocal=False'), as recorded. Built by `parse`, which also checks
  what spans sections.
  """
  seed: int
  batch_size: int
  num_train_steps: int
  loss: str
  mixup_alpha: float
  log_every_steps: int
  model: vit_config.ModelConfig
  moe: moe_config.MoeConfig
  data: data_config.DataConfig
  optimizer: optim_config.OptimizerConfig
  schedule: optim_config.ScheduleConfig
  eval: eval_config.EvalConfig
  fewshot: fewshot.FewShotConfig
  checkpoint: checkpoint_config.CheckpointConfig
  wandb: wandb_config.WandbConfig
  mesh: mesh_config.MeshConfig
  config_arg: str = ''

  def __post_init__(self):
    if not isinstance(self.seed, int) or self.seed < 0:
      raise ValueError(f'seed must be a non-negative int, got {self.seed!r}.')
    for key in ('batch_size', 'num_train_steps', 'log_every_steps'):
      if getattr(self, key) < 1:
        raise ValueError(f'{key} must be >= 1, got {getattr(self, key)}.')
    losses.get_loss(self.loss)     # An unknown loss fails listing the valid ones.
    if self.mixup_alpha < 0:
      raise ValueError(f'mixup_alpha must be >= 0 (0 turns mixup off), got {self.mixup_alpha}.')

  @property
  def router_name(self) -> str:
    """The router's name, or 'dense' for a model without MoE layers."""
    return self.moe.router.name if self.moe.router is not None else declarations.DENSE

  @functools.cached_property
  def pp_splits(self) -> dict[str, device_split.Split | None]:
    """Each pp string of the run (data.pp_train, data.pp_eval, every eval.sets pp, fewshot.pp)
    -> the Split whose tail the accelerator runs, or None where the host runs the whole string
    (data.augment_on = 'host', or a pp ending in the host's ops: data/pp/device_split.py). The
    pipeline, the training program and the evaluations take their Split from here. Derived from
    the sections and not a field, so to_dict() and the run's record leave it out; `parse` builds
    it, so a pp whose tail the accelerator cannot run fails there, naming its key."""
    pps = {'data.pp_train': self.data.pp_train, 'data.pp_eval': self.data.pp_eval,
           **{f'eval.sets.{name}': entry[2] for name, entry in self.eval.sets.items()},
           'fewshot.pp': self.fewshot.pp}
    splits = {}
    for key, pp in pps.items():
      if pp in splits:     # pp_eval is often pp_train: each string is cut once.
        continue
      try:
        splits[pp] = device_split.tail_on_device(pp, self.data.augment_on)
      except ValueError as e:
        raise ValueError(f'{key}: {e}') from None
    return splits

  def to_dict(self) -> dict:
    """The resolved config as JSON types (tuples as lists), in the config's layout."""
    return json.loads(json.dumps(dataclasses.asdict(self), default=_mapping_as_dict))


def parse(config: mlc.ConfigDict | dict, num_devices: int | None = None,
          fixed: Collection[str] | None = None) -> Experiment:
  """The experiment record of `config` (a config, or a recorded one: the dict of a run's
  config.json), after every check (module docstring), for `num_devices` devices (default: all of
  jax.devices()); fails with a UserError naming the key to change.

  The record holds numbers for the mesh's automatic sizes, and batch sizes fitted to the devices:
  the mesh the run builds, its console header and its record (WORKDIR/config.json) all show them.
  fixed: the dotted keys the user set on the command line (main.py): batch sizes among them are
  never changed, only refused (`fit_batches`). None: every key is fixed.
  """
  num_devices = jax.device_count() if num_devices is None else num_devices
  tree = config.to_dict() if isinstance(config, mlc.ConfigDict) else dict(config)
  experiment = _sections(tree)
  try:
    _check_across_sections(experiment)
    mesh = mesh_config.resolve(experiment.mesh, num_devices, experiment.moe.num_experts)
  except ValueError as e:
    raise errors.UserError(str(e)) from None
  experiment = fit_batches(dataclasses.replace(experiment, mesh=mesh), num_devices, fixed)
  try:
    experiment.pp_splits    # pylint: disable=pointless-statement  # Built and checked here, once.
  except ValueError as e:
    raise errors.UserError(str(e)) from None
  return experiment


def resolve_recorded(recorded: dict) -> dict:
  """The resolved config (`Experiment.to_dict()`) of a recorded one, a run's config.json or
  summary.json's resolved_config, as this code parses it, for comparing runs: a key the record
  lacks counts as its default, so a run recorded before a key was added is the same experiment
  as one recorded after. It is parsed for the devices its mesh spans, with its batch sizes as
  recorded. A record this code cannot parse (no resolved mesh, a key since removed, a value now
  refused) is returned as it is, so that a comparison names what differs.

  So each config key added from now on needs a default that reproduces the behaviour of the code
  before it, and a test that shows it (for a routing key, say, the layer at the default equals a
  transcription of the computation before the key existed).
  """
  mesh = recorded.get('mesh')
  sizes = [mesh.get(axis) for axis in ('data', 'expert')] if isinstance(mesh, dict) else []
  if len(sizes) != 2 or not all(isinstance(n, int) and n >= 1 for n in sizes):
    return recorded
  try:
    return parse(recorded, num_devices=sizes[0] * sizes[1]).to_dict()
  except errors.UserError:
    return recorded


# Config key -> the dataclass of that section (moe, which holds the router, is built apart).
SECTIONS = {
    'model': vit_config.ModelConfig,
    'data': data_config.DataConfig,
    'optimizer': optim_config.OptimizerConfig,
    'schedule': optim_config.ScheduleConfig,
    'eval': eval_config.EvalConfig,
    'fewshot': fewshot.FewShotConfig,
    'checkpoint': checkpoint_config.CheckpointConfig,
    'wandb': wandb_config.WandbConfig,
    'mesh': mesh_config.MeshConfig,
}


def _sections(tree: dict) -> Experiment:
  """The record of a config in `to_dict()`'s layout, each section checked by its own dataclass;
  a UserError names an unknown, missing or bad key."""
  sections = {key: _build(cls, tree.get(key), key) for key, cls in SECTIONS.items()}
  moe = dict(_block(tree.get('moe'), 'moe'))
  router = moe.pop('router', None)
  dense = moe.get('num_experts') == 0
  moe['router'] = None if dense else _router(router)
  sections['moe'] = _build(moe_config.MoeConfig, moe, 'moe')
  run = {k: v for k, v in tree.items() if k not in sections}
  return _build(Experiment, {**run, **sections}, 'config')


def _router(values) -> router_config.RouterConfig:
  """The router's section, after importing the module that declares it (a user's router) and
  finding its implementation in the registry."""
  values = _block(values, 'moe.router')
  try:
    user_module.import_router_module(values.get('module', ''))
  except ValueError as e:
    raise errors.UserError(f'moe.router: {e}') from None
  router = _build(router_config.RouterConfig, values, 'moe.router')
  try:
    registry.get(router.name)
  except ValueError as e:
    raise errors.UserError(f'moe.router: {e}') from None
  return router


def _block(values, where: str) -> dict:
  if not isinstance(values, dict):
    raise errors.UserError(f'config.{where} is missing or not a block; build it with the '
                           'configs/common.py helpers.')
  return values


def _build(cls, values, where: str):
  """cls(**values), with unknown and missing keys and the class's own errors named."""
  values = _block(values, where)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  prefix = '' if where == 'config' else f'{where}.'
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise errors.UserError(f'unknown config key(s) {", ".join(prefix + k for k in unknown)}; '
                           f'valid: {", ".join(prefix + k for k in fields)}.')
  required = [name for name, f in fields.items() if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING and name not in values]
  if required:
    raise errors.UserError(f'the config lacks {", ".join(prefix + k for k in required)}.')
  # NaN passes every comparison-based check (nan <= 0 is False), so no number is left to them.
  for name, value in values.items():
    if not _finite(value):
      raise errors.UserError(f'{prefix}{name} must be a finite number, got {value!r}.')
  try:
    return cls(**values)
  except (TypeError, ValueError) as e:
    named = where == 'config' or prefix in str(e)     # The message already names the key.
    raise errors.UserError(str(e) if named else f'{where}: {e}') from None


def _finite(value) -> bool:
  """Whether every float in `value` (a number, or a tuple or list of them) is finite."""
  if isinstance(value, (tuple, list)):
    return all(_finite(v) for v in value)
  return not isinstance(value, float) or math.isfinite(value)


def _check_across_sections(experiment: Experiment) -> None:
  """The rules that span sections (each section checked its own values as it was built); a
  ValueError says which value to change."""
  model, moe, data = experiment.model, experiment.moe, experiment.data
  if model.num_classes != data.num_classes:
    raise ValueError(f'model.num_classes={model.num_classes} but the data has {data.num_classes} '
                     'classes (data.num_classes); make them equal.')
  if moe.num_experts > 0:
    _check_moe_fits_the_model(moe, model)
  warmup_steps, num_train_steps = experiment.schedule.warmup_steps, experiment.num_train_steps
  if warmup_steps >= num_train_steps:
    raise ValueError(f'schedule.warmup_steps={warmup_steps} must be in '
                     f'[0, num_train_steps={num_train_steps}); lower it or train longer.')


def _check_moe_fits_the_model(moe: moe_config.MoeConfig, model: vit_config.ModelConfig) -> None:
  """MoE layers are placed in the model's blocks, and expert choice has C tokens to choose."""
  depth = model.size.depth
  if moe.every > depth:
    raise ValueError(f'moe.every={moe.every} places no MoE layer in a {depth}-block model; '
                     f'use 1 <= moe.every <= {depth} (2 is the paper\'s Every-2), or '
                     'moe.num_experts=0 for a dense model.')
  num_every = len(vit_config.moe_layer_indices(depth, moe.every))
  if moe.last > num_every:
    raise ValueError(f'moe.last={moe.last} but Every-{moe.every} places {num_every} MoE layers in '
                     f'a {depth}-block model; use 0 <= moe.last <= {num_every}.')
  # Each allocation checks what it needs of T and E (expert choice: C <= T tokens to choose).
  router_lib.check_allocations(moe.router, moe.images_per_group * model.tokens_per_image,
                               moe.num_experts)


# Batch sizes that split into whole routing groups on every device: fitted, or one error.
#
# Every batch the model sees (training, eval, few-shot) is split over all devices, and each
# device's share must be a whole number of routing groups (moe.group_size images; one image for a
# dense model), so the sizes that work are the multiples of `batch_unit` = devices x group size.
# A batch size that the config file set is a default for the devices it was written for: where it
# does not fit this run's devices it is rounded up to the next multiple of the unit, with a
# warning, so that e.g. `--config.mesh.expert=8` on 8 devices needs no other override. A size the
# user chose on the command line is kept; when such sizes do not fit, one error names every
# override needed. The resolved sizes are what the run records (WORKDIR/config.json), so a fitted
# run is not mistaken for one at the config file's sizes.

BATCH_KEYS = ('batch_size', 'eval.batch_size', 'fewshot.batch_size')


def batch_unit(num_devices: int, group_size: int, num_experts: int) -> int:
  """The batch sizes that fit are the positive multiples of this: a routing group per device."""
  return num_devices * (group_size if num_experts > 0 else 1)


def fitted_batch_size(batch_size: int, step: int) -> int:
  """The smallest multiple of `step` that is >= batch_size (and >= step)."""
  return max(1, math.ceil(batch_size / step)) * step


def fit_batches(experiment: Experiment, num_devices: int,
                fixed: Collection[str] | None = None) -> Experiment:
  """`experiment` with its batch sizes fitted to `num_devices` (the comment above BATCH_KEYS).

  fixed: the keys (BATCH_KEYS' spelling) the user chose; a size among them that does not fit
  fails. None: every key is fixed (fail rather than change a value; for callers with no command
  line).
  """
  moe = experiment.moe
  step = batch_unit(num_devices, moe.group_size, moe.num_experts)
  sizes = {key: _get(experiment, key) for key in BATCH_KEYS}
  misfits = {key: size for key, size in sizes.items() if size % step}
  refused = {key: size for key, size in misfits.items() if fixed is None or key in fixed}
  if refused:
    raise errors.UserError(_misfit_message(refused, num_devices, moe, step))
  for key, size in misfits.items():
    fitted = fitted_batch_size(size, step)
    logging.warning('%s=%d does not split into whole routing groups over %d devices; using %d '
                    '(set --config.%s to choose).', key, size, num_devices, fitted, key)
    experiment = _replace(experiment, key, fitted)
  return experiment


def with_recorded_batches(experiment: Experiment, recorded: dict,
                          fixed: Collection[str] | None = None) -> Experiment:
  """`experiment` resuming a run recorded as `recorded` (its resolved config): the batch sizes
  are the recorded ones, except those the user set on the command line (`fixed`, as in
  `parse`; None: every key fixed), so that a run resumed on another number of devices keeps its
  global batch, schedule and data order instead of refitting the config file's sizes. A
  UserError if they do not split over this run's devices (the mesh's)."""
  for key in BATCH_KEYS:
    if fixed is not None and key not in fixed:
      node = recorded
      for part in key.split('.'):
        node = node.get(part) if isinstance(node, dict) else None
      if isinstance(node, int):
        experiment = _replace(experiment, key, node)
  return fit_batches(experiment, experiment.mesh.data * experiment.mesh.expert)


def _misfit_message(refused: dict, num_devices: int, moe: moe_config.MoeConfig, step: int) -> str:
  """One error for every refused size: why each fails, then all the overrides that fix them."""
  reasons = []
  for key, size in refused.items():
    per_device = size / num_devices
    if size % num_devices:
      reasons.append(f'{key}={size} does not split over {num_devices} devices')
    else:
      reasons.append(f'{key}={size} gives {per_device:.0f} images per device, not a multiple of '
                     f'moe.group_size={moe.group_size} images per routing group')
  overrides = ' '.join(f'--config.{key}={fitted_batch_size(size, step)}'
                       for key, size in refused.items())
  group = f' x moe.group_size={moe.group_size}' if moe.num_experts > 0 else ''
  return (f'{"; ".join(reasons)}. Set {overrides} (any positive multiple of {step} = '
          f'{num_devices} devices{group})'
          + (', or change moe.group_size.' if moe.num_experts > 0 else '.'))


def _get(node, key: str):
  """The value at the dotted `key` of nested dataclasses."""
  for part in key.split('.'):
    node = getattr(node, part)
  return node


def _replace(node, key: str, value):
  """A copy of the frozen dataclass `node` with the dotted `key` set to `value`."""
  head, _, rest = key.partition('.')
  if not rest:
    return dataclasses.replace(node, **{head: value})
  return dataclasses.replace(node, **{head: _replace(getattr(node, head), rest, value)})


def recorded_defaults() -> dict:
  """What a recorded config that lacks a key means, for code that compares records without
  JAX (results/summaries.py reads it from DEFAULTS_FILE): {'keys': {dotted key: default} of
  every section field with a default, 'router_options': {router: its options' defaults}} of the
  built-in routers. A key added to the config keeps the behaviour before it at its default, so a
  record without it is a record at the default."""
  keys = _field_defaults(Experiment, '')
  options = {name: dict(declared.options)
             for name, declared in sorted(declarations.BUILT_IN.items())}
  return json.loads(json.dumps({'keys': keys, 'router_options': options},
                               default=_mapping_as_dict))


# Where recorded_defaults() is committed (experiment_test pins it): JSON that reporting code reads.
DEFAULTS_FILE = 'configs/recorded_defaults.json'


def _field_defaults(cls, prefix: str) -> dict:
  hints = typing.get_type_hints(cls)
  out = {}
  for field in dataclasses.fields(cls):
    key = prefix + field.name
    if field.default is not dataclasses.MISSING:
      out[key] = field.default
    elif field.default_factory is not dataclasses.MISSING:
      out[key] = field.default_factory()
    else:
      section = [t for t in (typing.get_args(hints[field.name]) or (hints[field.name],))
                 if dataclasses.is_dataclass(t)]
      if section:
        out.update(_field_defaults(section[0], key + '.'))
  return out


def _mapping_as_dict(value) -> dict:
  """json.dumps's fallback: a mapping that is not a dict, written as one."""
  if isinstance(value, Mapping):
    return dict(value)
  raise TypeError(f'{type(value).__name__} is not JSON serializable')
