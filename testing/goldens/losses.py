"""Golden: V-MoE's classification losses and its routers' auxiliary losses.

- sigmoid_xent and softmax_xent: vmoe/train/trainer.py `get_loss_fn` (per example; the training
  step's `main_loss` is their batch mean). trainer.py does not import here (clu, vit_jax), so the
  function is compiled alone from the checkout's file.
- `_importance_auxiliary_loss(gates)` and `_load_auxiliary_loss(logits, logits_noisy, noise_std,
  num_selected_experts)` of vmoe/nn/routing.py `NoisyTopExpertsPerItemRouter`, one value per
  routing group (the router vmaps them over the groups), with the router's noise
  std = noise_std / E = 1 / 8 (i21k: noise_std 1.0, E = 8) drawn here, outside, and given.
"""
import functools

import numpy as np

REFERENCE = ('vmoe/train/trainer.py get_loss_fn (sigmoid_xent, softmax_xent); vmoe/nn/routing.py '
             'NoisyTopExpertsPerItemRouter._importance_auxiliary_loss, _load_auxiliary_loss')

BATCH, CLASSES = 8, 12
GROUPS, TOKENS, EXPERTS = 4, 32, 8
NOISE_STD = 1.0 / EXPERTS


def classification_inputs() -> dict:
  """Logits from -12 to 12 (the i21k head starts at -10), and three kinds of labels: one-hot,
  multi-hot (sigmoid only) and mixup's two-example blends."""
  rng = np.random.default_rng(550)
  logits = (rng.normal(size=(BATCH, CLASSES)) * 4 - 2).clip(-12, 12).astype(np.float32)
  onehot = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, BATCH)]
  multihot = (rng.random((BATCH, CLASSES)) < 0.25).astype(np.float32)
  weight = rng.uniform(0.5, 1.0, (BATCH, 1)).astype(np.float32)
  mixed = (weight * onehot + (1 - weight) * np.roll(onehot, -1, axis=0)).astype(np.float32)
  return {'logits': logits, 'labels_onehot': onehot, 'labels_multihot': multihot,
          'labels_mixed': mixed}


def routing_inputs() -> dict:
  """(G, T, E) router logits, their noisy copies and the clean softmax gates; the groups range
  from nearly balanced to one expert taking most tokens."""
  rng = np.random.default_rng(551)
  skew = np.linspace(0.0, 3.0, GROUPS)[:, None, None] * (np.arange(EXPERTS) == 0)
  logits = (rng.normal(size=(GROUPS, TOKENS, EXPERTS)) * 0.5 + skew).astype(np.float32)
  noise = (NOISE_STD * rng.normal(size=logits.shape)).astype(np.float32)
  return {'router_logits': logits, 'router_logits_noisy': logits + noise}


def generate(context) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import optax  # pylint: disable=import-outside-toplevel
  ensemble = context.module('vmoe.evaluate.ensemble', 'vmoe')
  routing = context.module('vmoe.nn.routing', 'vmoe')
  get_loss_fn = context.function_alone(
      'vmoe', 'vmoe/train/trainer.py', 'get_loss_fn',
      {'functools': functools, 'jnp': jnp, 'optax': optax, 'ensemble': ensemble})
  arrays = classification_inputs()
  for name in ('sigmoid_xent', 'softmax_xent'):
    train_loss, _, _ = get_loss_fn(name)
    kinds = ('onehot', 'multihot', 'mixed') if name == 'sigmoid_xent' else ('onehot', 'mixed')
    for kind in kinds:
      per_example = train_loss(arrays['logits'], arrays[f'labels_{kind}'])
      arrays[f'{name}_{kind}'] = np.asarray(per_example, np.float32)
      arrays[f'{name}_{kind}_mean'] = np.asarray(jnp.mean(per_example), np.float32)
  arrays.update(routing_inputs())
  router = routing.NoisyTopExpertsPerItemRouter
  importance = router._importance_auxiliary_loss  # pylint: disable=protected-access
  load_loss = router._load_auxiliary_loss  # pylint: disable=protected-access
  gates = jax.nn.softmax(arrays['router_logits'])
  arrays['router_gates'] = np.asarray(gates, np.float32)
  arrays['importance_loss'] = np.asarray(jax.vmap(importance)(gates), np.float32)
  for k in (1, 2):
    load = jax.vmap(functools.partial(load_loss, num_selected_experts=k, noise_std=NOISE_STD))
    arrays[f'load_loss_k{k}'] = np.asarray(
        load(arrays['router_logits'], arrays['router_logits_noisy']), np.float32)
  arrays['noise_std'] = np.float32(NOISE_STD)
  return arrays
