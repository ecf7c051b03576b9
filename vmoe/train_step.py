"""The pure training step `(state, batch, rng) -> (state, metrics)` and its optional wrappers.

Batches are dicts {'image': (B, H, W, C) float32, 'labels': (B, K) one-hot or multi-hot}.
"""
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from evaluation import classify

StepFn = Callable[[Any, dict, jax.Array], tuple[Any, dict]]


@flax.struct.dataclass
class TrainState:
  """Everything a resumed run needs besides the data position: step, parameters, optimizer."""
  step: jax.Array
  params: Any
  opt_state: Any


def init_fn(model: nn.Module, tx: optax.GradientTransformation, image_shape: tuple):
  """rng -> a fresh TrainState for batches of images of `image_shape` (B, H, W, C)."""
  def init(rng: jax.Array) -> TrainState:
    params = model.init(rng, jnp.zeros(image_shape, jnp.float32), train=False)['params']
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
  return init


def classification_loss(logits: jax.Array, labels: jax.Array, kind: str) -> jax.Array:
  """Batch mean of the per-example loss `kind` ('sigmoid_xent' for multi-label sources such as JFT
  and ImageNet-21k, as V-MoE; 'softmax_xent'): the evaluator's own definitions."""
  return jnp.mean(classify.get_loss(kind)(logits, labels))


def router_summary(router_metrics: dict) -> dict:
  """Per MoE block scalars for logging: dropped tokens, experts per token, load imbalance."""
  out = {}
  for block, m in router_metrics.items():
    for key in ('dropped_tokens', 'experts_per_token_mean', 'experts_per_token_min',
                'experts_per_token_max'):
      out[f'router/{block}/{key}'] = m[key]
    load = m['expert_load']   # max/mean load: 1 is perfect balance.
    out[f'router/{block}/load_max_over_mean'] = jnp.max(load) / jnp.maximum(jnp.mean(load), 1e-9)
  return out


def make_train_step(model: nn.Module, tx: optax.GradientTransformation, loss_kind: str) -> StepFn:
  """Returns the pure step. rng is this step's key (the driver folds the step into the seed)."""

  def train_step(state: TrainState, batch: dict, rng: jax.Array):
    dropout_rng, gating_rng = jax.random.split(rng)

    def loss_fn(params):
      logits, aux = model.apply({'params': params}, batch['image'], train=True,
                                rngs={'dropout': dropout_rng, 'gating': gating_rng})
      xent = classification_loss(logits, batch['labels'], loss_kind)
      return xent + aux['aux_loss'], (xent, aux)

    (loss, (xent, aux)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {'loss': loss, 'xent': xent, 'aux_loss': aux['aux_loss'],
               'grad_norm': optax.global_norm(grads), **router_summary(aux['router'])}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def mixup(batch: dict, rng: jax.Array, alpha: float) -> dict:
  """Mixes each example with the batch rolled by one, weight lambda ~ Beta(alpha, alpha).

  One lambda per batch (as big_vision's mixup); the labels mix with the same weight.
  """
  lam = jax.random.beta(rng, alpha, alpha)
  mix = lambda v: lam * v + (1.0 - lam) * jnp.roll(v, 1, axis=0)
  return {**batch, 'image': mix(batch['image']), 'labels': mix(batch['labels'])}


def with_mixup(step: StepFn, alpha: float) -> StepFn:
  """Wraps a step so that it trains on mixed-up batches; the signature is unchanged."""
  if alpha <= 0:
    return step

  def mixup_step(state, batch, rng):
    mix_rng, step_rng = jax.random.split(rng)
    return step(state, mixup(batch, mix_rng, alpha), step_rng)

  return mixup_step
