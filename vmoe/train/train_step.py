"""The pure training step `(state, batch, rng) -> (state, metrics)` and its optional wrappers.

Batches are dicts {'image': (B, H, W, C) float32, 'labels': (B, K) one-hot or multi-hot}; under
data.augment_on = 'device', what the host ships, which with_device_tail turns into them.
"""
import functools
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from data.pp import device_augment
from data.pp import device_split
from vmoe.model import sharding
from vmoe.routing import router as router_lib
from vmoe.train import losses

StepFn = Callable[[Any, dict, jax.Array], tuple[Any, dict]]


@flax.struct.dataclass
class TrainState:
  """Everything a resumed run needs besides the data position: step, parameters, optimizer, and
  the routers' state (router.ROUTER_STATE: non-gradient arrays a router keeps across steps, {}
  when no router has any). The router state is not trained: it stays out of the optimizer, the
  gradients and their norm, and the routers update it in the step itself."""
  step: jax.Array
  params: Any
  opt_state: Any
  router_state: Any = flax.struct.field(default_factory=dict)


def model_variables(state: TrainState) -> dict:
  """The variables every apply of the model takes: the parameters and the routers' state."""
  return {'params': state.params, router_lib.ROUTER_STATE: state.router_state}


def init_fn(model: nn.Module, tx: optax.GradientTransformation, image_shape: tuple):
  """rng -> a fresh TrainState for batches of images of `image_shape` (B, H, W, C)."""
  def init(rng: jax.Array) -> TrainState:
    variables = model.init(rng, jnp.zeros(image_shape, jnp.float32), train=False)
    params = variables['params']
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      router_state=dict(variables.get(router_lib.ROUTER_STATE, {})))
  return init


def training_loss(model: nn.Module, params, images: jax.Array, labels: jax.Array, rng: jax.Array,
                  loss_kind: str, router_state=None):
  """(classification loss + the MoE auxiliary loss, (classification loss, model aux, the routers'
  updated state)) of one batch in training mode: dropout and router noise on, drawn from `rng`."""
  dropout_rng, gating_rng = jax.random.split(rng)
  (logits, aux), updated = model.apply(
      {'params': params, router_lib.ROUTER_STATE: router_state or {}}, images, train=True,
      rngs={'dropout': dropout_rng, 'gating': gating_rng}, mutable=[router_lib.ROUTER_STATE])
  xent = losses.classification_loss(logits, labels, loss_kind)
  return xent + aux['aux_loss'], (xent, aux, dict(updated.get(router_lib.ROUTER_STATE, {})))


def router_summary(router_metrics: dict) -> dict:
  """Per MoE block scalars for logging: dropped tokens, experts per token, load imbalance, and
  every scalar metric of the router's own (the sparsity-constrained solver's row error and
  fallback count, a registered router's RouterSpec.extras); not the auxiliary loss, logged
  whole."""
  out = {}
  for block, m in router_metrics.items():
    for key, value in m.items():
      if key not in ('expert_load', 'aux_loss') and jnp.ndim(value) == 0:
        out[f'router/{block}/{key}'] = value
    load = m['expert_load']   # max/mean load: 1 is perfect balance.
    out[f'router/{block}/load_max_over_mean'] = jnp.max(load) / jnp.maximum(jnp.mean(load), 1e-9)
  return out


def make_train_step(model: nn.Module, tx: optax.GradientTransformation, loss_kind: str) -> StepFn:
  """Returns the pure step. rng is this step's key (the driver folds the step into the seed)."""

  def train_step(state: TrainState, batch: dict, rng: jax.Array):
    loss_fn = lambda params: training_loss(model, params, batch['image'], batch['labels'], rng,
                                           loss_kind, state.router_state)
    (loss, (xent, aux, router_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
    metrics = {'loss': loss, 'xent': xent, 'aux_loss': aux['aux_loss'],
               'grad_norm': optax.global_norm(grads), **router_summary(aux['router'])}
    return apply_gradients(tx, state.replace(router_state=router_state), grads), metrics

  return train_step


def apply_gradients(tx: optax.GradientTransformation, state: TrainState, grads) -> TrainState:
  """The optimizer's update of `state` by `grads`: the step's work per parameter, which does not
  depend on the batch (bench/paper_step.py times it alone)."""
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                       opt_state=opt_state)


# V-MoE mixes each example with one other (configs/vmoe_paper/common.py get_mixup_config: size = 2;
# pretrain_imagenet21k.py: mixup_size = 2).
MIXUP_SIZE = 2


def mixup_weights(rng: jax.Array, concentration: float, num_chunks: int, size: int) -> jax.Array:
  """(num_chunks, size) mixing weights: one Dirichlet(concentration) draw per chunk, sorted
  descending.

  V-MoE (vmoe/train/trainer.py, `mixup` and `wrap_train_step_with_mixup`, granularity 'device'):
  one draw per device, largest weight first. The largest weight goes to the example itself, so
  every example stays the dominant one of its mix (weight >= 1/size); unsorted, a draw near
  (0, 1) would replace an example by its neighbour and lose it (V-MoE's comment on the sort).
  """
  draws = jax.random.dirichlet(rng, jnp.full((num_chunks, size), concentration, jnp.float32))
  return -jnp.sort(-draws, axis=-1)


def mix(batch: dict, weights: jax.Array) -> dict:
  """Mixes 'image' and 'labels' within consecutive chunks of the batch, one weight row per chunk.

  weights: (K, M), K chunks of B / K examples. Example i of chunk k becomes
  sum_j weights[k, j] * example (i + j) mod (B / K) of the same chunk (V-MoE rolls the per-device
  batch by -j). With K the number of devices along the batch axes, each chunk is one device's
  shard (batch_sharding splits the leading axis into K consecutive pieces), so this is V-MoE's
  per-device mixup and needs no communication between devices.
  """
  num_chunks, size = weights.shape

  def mix_array(v):
    if v.shape[0] % num_chunks:
      raise ValueError(f'mixup: a batch of {v.shape[0]} does not split into {num_chunks} chunks '
                       '(one per device); use a batch_size divisible by the device count.')
    chunks = v.reshape((num_chunks, v.shape[0] // num_chunks) + v.shape[1:])
    w = weights.reshape(weights.shape + (1,) * (chunks.ndim - 1)).astype(v.dtype)   # (K, M, 1..)
    mixed = sum(w[:, j] * jnp.roll(chunks, -j, axis=1) for j in range(size))   # (K, B / K, ...)
    return mixed.reshape(v.shape)

  return {**batch, 'image': mix_array(batch['image']), 'labels': mix_array(batch['labels'])}


def mixup(batch: dict, rng: jax.Array, concentration: float, num_chunks: int) -> dict:
  """V-MoE's per-device mixup of a global batch: Dirichlet(concentration) weights per chunk of the
  per-device size, sorted so the original example dominates; the labels mix with the same weights.

  The (num_chunks, 2) weights are drawn replicated: every device draws all rows (a few gamma
  samples each) and keeps its own. Drawn sharded, the gamma sampler's rejection loop would
  all-reduce its stopping test over the devices at every iteration (V-MoE warns that
  jax.random.gamma does not shard well).
  """
  weights = mixup_weights(rng, concentration, num_chunks, MIXUP_SIZE)
  return mix(batch, sharding.constrain(weights, sharding.P()))


def tail_per_device(split: device_split.Split) -> Callable[[dict], dict]:
  """batch -> the batch after `split`'s tail (data.augment_on = 'device'), as the training step
  runs it: each device on its own shard (sharding.per_device), in chunks of device_augment.CHUNK
  images (run_tail_in_chunks), so that what the compiler holds for it does not grow with the
  per-device batch."""
  return sharding.per_device(
      functools.partial(device_augment.run_tail_in_chunks, split, device_augment.CHUNK))


def with_device_tail(step: StepFn, split: device_split.Split) -> StepFn:
  """Wraps a step so that it trains on the batch after `split`'s tail (tail_per_device), before
  mixup."""
  tail = tail_per_device(split)

  def augmented_step(state, batch, rng):
    return step(state, tail(batch), rng)
  return augmented_step


def with_mixup(step: StepFn, concentration: float, num_chunks: int) -> StepFn:
  """Wraps a step so that it trains on mixed-up batches; the signature is unchanged.

  concentration: config.mixup_alpha, the Dirichlet concentration (V-MoE mixup.concentration;
  0 turns mixup off, as in V-MoE). num_chunks: devices along the batch axes
  (sharding.batch_shards), so that each device's shard is mixed on its own.
  """
  if concentration <= 0:
    return step

  def mixup_step(state, batch, rng):
    mix_rng, step_rng = jax.random.split(rng)
    return step(state, mixup(batch, mix_rng, concentration, num_chunks), step_rng)

  return mixup_step
