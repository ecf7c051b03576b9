"""Checks a config before anything compiles; every error says which value to change.

main.py -> trainer.train_and_evaluate calls `validate(config)` first (re-exported by
configs/common.py). Checked: the architecture and patch size, pooling and loss names, the router
(name, capacity factor in the paper's set, k <= E), and that every batch the model sees splits
into whole routing groups on each device.
"""
import jax

from vmoe import moe as moe_lib
from vmoe import vit
from vmoe.routing import router as routing

# The paper's capacities ("Models" subsection): c (or k) in {1, 2}.
CAPACITIES = (1, 2)
LOSSES = ('sigmoid_xent', 'softmax_xent')
DISPATCHES = ('indices', 'einsum')


def validate(config, num_devices: int | None = None) -> None:
  """Raises ValueError naming the key to change if `config` cannot train.

  num_devices: devices the batch is split over (default: all of jax.devices()); every device
  gets batch_size // num_devices images, which must be whole routing groups.
  """
  num_devices = jax.device_count() if num_devices is None else num_devices
  depth, patch_size = _check_model(config.model)
  if config.loss not in LOSSES:
    raise ValueError(f'unknown loss {config.loss!r}; set loss to one of {", ".join(LOSSES)}.')
  if config.model.num_classes != config.data.num_classes:
    raise ValueError(f'model.num_classes={config.model.num_classes} but the data has '
                     f'{config.data.num_classes} classes (data.num_classes); make them equal.')
  if config.mixup_alpha < 0:
    raise ValueError(f'mixup_alpha must be >= 0 (0 turns mixup off), got {config.mixup_alpha}.')
  if config.moe.num_experts > 0:
    tokens_per_image = (config.model.image_size // patch_size) ** 2 + (config.model.pool == 'tok')
    _check_moe(config.moe, depth, tokens_per_image)
  batches = {'batch_size': config.batch_size, 'eval.batch_size': config.eval.batch_size,
             'fewshot.batch_size': config.fewshot.batch_size}
  for key, batch_size in batches.items():
    _check_batch(key, batch_size, num_devices, config.moe)


def _check_model(model) -> tuple[int, int]:
  """Architecture, patch size and pooling; returns (depth, patch size)."""
  arch = vit.decode_variant(model.variant)
  patch_size = model.patch_size or arch['patch_size']
  if patch_size is None:
    raise ValueError(f'model.variant={model.variant!r} names no patch size; set model.patch_size '
                     'or use SIZE/PATCH (e.g. B/32).')
  if patch_size < 1 or model.image_size % patch_size:
    raise ValueError(f'patch size {patch_size} does not divide model.image_size='
                     f'{model.image_size}; change model.patch_size (or the variant\'s /PATCH) '
                     'or model.image_size.')
  if model.pool not in vit.POOLS:
    raise ValueError(f'unknown model.pool {model.pool!r}; valid: {", ".join(vit.POOLS)}.')
  return arch['depth'], patch_size


def _check_moe(moe, depth: int, tokens_per_image: int) -> None:
  """Router, capacity, k <= E, placement and dispatch of an MoE model."""
  if moe.dispatch not in DISPATCHES:
    raise ValueError(f'unknown moe.dispatch {moe.dispatch!r}; valid: {", ".join(DISPATCHES)}.')
  if moe.expert_init not in moe_lib.EXPERT_INITS:
    raise ValueError(f'unknown moe.expert_init {moe.expert_init!r}; valid: '
                     f'{", ".join(moe_lib.EXPERT_INITS)}.')
  if moe.router.name not in routing.ROUTERS:
    raise ValueError(f'unknown router moe.router.name={moe.router.name!r}; valid: '
                     f'{", ".join(sorted(routing.ROUTERS))} (or moe.num_experts=0 for a dense '
                     'model).')
  router = routing.RouterConfig(**moe.router)     # Checks the router's own values.
  if router.capacity_factor not in CAPACITIES:
    raise ValueError(f'capacity factor c={router.capacity_factor:g} is not one of the paper\'s '
                     f'{CAPACITIES}; use the config argument c=1 or c=2 '
                     '(moe.router.capacity_factor).')
  if router.spec.allocation == 'token_choice' and router.capacity_factor > moe.num_experts:
    raise ValueError(f'router {router.name} selects k={router.capacity_factor:g} experts per '
                     f'token but only moe.num_experts={moe.num_experts} exist; lower k (c) or '
                     'raise moe.num_experts.')
  if moe.every < 1 or moe.every > depth:
    raise ValueError(f'moe.every={moe.every} places no MoE layer in a {depth}-block model; use '
                     f'1 <= moe.every <= {depth} (2 is the paper\'s Every-2), or '
                     'moe.num_experts=0 for a dense model.')
  images_per_group = 1 if router.spec.allocation == 'soft' else moe.group_size
  router.capacity(images_per_group * tokens_per_image, moe.num_experts)


def _check_batch(key: str, batch_size: int, num_devices: int, moe) -> None:
  """Each device's share of the batch is a whole number of routing groups."""
  if batch_size < 1 or batch_size % num_devices:
    raise ValueError(f'{key}={batch_size} does not split over {num_devices} devices; use a '
                     f'positive multiple of {num_devices}.')
  per_device = batch_size // num_devices
  if moe.num_experts > 0 and (moe.group_size < 1 or per_device % moe.group_size):
    raise ValueError(f'{key}={batch_size} gives {per_device} images per device, not a multiple '
                     f'of moe.group_size={moe.group_size} images per routing group; change '
                     f'{key} to a multiple of {num_devices * max(moe.group_size, 1)} or change '
                     'moe.group_size.')
