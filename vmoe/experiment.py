"""The experiment record: a run's config as typed sections, each owned by its module.

configs/experiment.py parses an ml-collections config into an `Experiment` once, at the start of
a run; library code then takes its own section (vit.ModelConfig, moe.MoeConfig, ...), never the
config tree. `to_dict()` has the config's layout, and `from_dict` reads it back: a recorded run's
config (its config.json or summary.json's resolved_config) becomes the same record again.
"""
import dataclasses
import json

from base import errors
from data import config as data_config
from evaluation import classify
from evaluation import fewshot
from vmoe import checkpointing
from vmoe import losses
from vmoe import moe as moe_lib
from vmoe import optim
from vmoe import sharding
from vmoe import vit
from vmoe.routing import names as router_names
from vmoe.routing import router as router_lib

WANDB_MODES = ('offline', 'online', 'disabled')
DENSE = router_names.DENSE


@dataclasses.dataclass(frozen=True)
class WandbConfig:
  """`config.wandb`: offline by default (no network); 'online' syncs, 'disabled' skips wandb."""
  project: str
  mode: str = 'offline'

  def __post_init__(self):
    if self.mode not in WANDB_MODES:
      raise ValueError(f'unknown wandb.mode {self.mode!r}; valid: {", ".join(WANDB_MODES)}.')


@dataclasses.dataclass(frozen=True)
class Experiment:
  """Run-level keys and the sections of one run.

  seed: the initialisation, data order and step keys. batch_size: images per step over all
  devices. loss: vmoe/losses.py LOSSES ('sigmoid_xent' for multi-label data). mixup_alpha: the
  mixup concentration (0: off). log_every_steps: how often metrics are written. config_arg: the
  config file's argument ('c=2,runlocal=False'), as recorded. The checks that span sections (MoE
  placement and capacity against the model, the mesh against the devices) are
  configs/experiment.py's `check`; batches into routing groups over devices, configs/batches.py.
  """
  seed: int
  batch_size: int
  num_train_steps: int
  loss: str
  mixup_alpha: float
  log_every_steps: int
  model: vit.ModelConfig
  moe: moe_lib.MoeConfig
  data: data_config.DataConfig
  optimizer: optim.OptimizerConfig
  schedule: optim.ScheduleConfig
  eval: classify.EvalConfig
  fewshot: fewshot.FewShotConfig
  checkpoint: checkpointing.CheckpointConfig
  wandb: WandbConfig
  mesh: sharding.MeshConfig
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
    return self.moe.router.name if self.moe.router is not None else DENSE

  def to_dict(self) -> dict:
    """The resolved config as JSON types (tuples as lists), in the config's layout."""
    return json.loads(json.dumps(dataclasses.asdict(self)))


# Config key -> the dataclass of that section (moe, which holds the router, is built apart).
SECTIONS = {
    'model': vit.ModelConfig,
    'data': data_config.DataConfig,
    'optimizer': optim.OptimizerConfig,
    'schedule': optim.ScheduleConfig,
    'eval': classify.EvalConfig,
    'fewshot': fewshot.FewShotConfig,
    'checkpoint': checkpointing.CheckpointConfig,
    'wandb': WandbConfig,
    'mesh': sharding.MeshConfig,
}


def from_dict(tree: dict) -> Experiment:
  """The record of a config in `to_dict()`'s layout, each section checked by its own dataclass;
  a UserError names an unknown, missing or bad key. The checks that span sections are
  configs/experiment.py's."""
  sections = {key: _build(cls, tree.get(key), key) for key, cls in SECTIONS.items()}
  moe = dict(_block(tree.get('moe'), 'moe'))
  router = moe.pop('router', None)
  dense = moe.get('num_experts') == 0
  moe['router'] = None if dense else _build(router_lib.RouterConfig, router, 'moe.router')
  sections['moe'] = _build(moe_lib.MoeConfig, moe, 'moe')
  run = {k: v for k, v in tree.items() if k not in sections}
  return _build(Experiment, {**run, **sections}, 'config')


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
  try:
    return cls(**values)
  except (TypeError, ValueError) as e:
    named = where == 'config' or prefix in str(e)     # The message already names the key.
    raise errors.UserError(str(e) if named else f'{where}: {e}') from None
