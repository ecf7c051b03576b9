"""Classification losses of training (config.loss), per example and as the step's batch mean.

The upstream evaluator reports the same loss on held-out data; it receives the function from here
(evaluation/ knows no loss names).
"""
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from evaluation import classify


def softmax_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """(B,) softmax cross-entropy; `labels` int or a distribution over classes (one-hot)."""
  hot = classify.targets(labels, logits.shape[-1])
  return optax.softmax_cross_entropy(logits.astype(jnp.float32), hot)


def sigmoid_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """(B,) sigmoid cross-entropy summed over classes (multi-label; V-MoE's 'sigmoid_xent')."""
  hot = classify.targets(labels, logits.shape[-1])
  return jnp.sum(optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), hot), axis=-1)


LOSSES = {'softmax_xent': softmax_xent, 'sigmoid_xent': sigmoid_xent}


def get_loss(name: str) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """The per-example loss called `name`; an unknown name fails listing the valid ones."""
  if name not in LOSSES:
    raise ValueError(f'unknown loss {name!r}; valid: {", ".join(LOSSES)}.')
  return LOSSES[name]


def classification_loss(logits: jax.Array, labels: jax.Array, kind: str) -> jax.Array:
  """Batch mean of the per-example loss `kind` ('sigmoid_xent' for multi-label sources such as JFT
  and ImageNet-21k, as V-MoE; 'softmax_xent')."""
  return jnp.mean(get_loss(kind)(logits, labels))
