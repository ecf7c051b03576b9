"""Upstream evaluation: precision@1 and mean loss over a held-out split, padding excluded.

The loss is the caller's (training's, vmoe/train/losses.py): this module defines only the metric.

precision@1 is the paper's upstream metric ("top-1 classification accuracy (Prec@1)" on
JFT-300M; V-MoE's): an example counts as correct when its highest-scoring class is one of its
true labels. On single-label data that is top-1 accuracy; on multi-label data (JFT, ImageNet-21k)
any of the true labels is a hit.

Per-batch sums run jitted where the logits live (a 4096 x 21843 logits batch never leaves the
device); only three scalars per batch reach the host, where they accumulate in float64.
"""
import functools
from typing import Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from evaluation import eval_config

LossFn = Callable[[jax.Array, jax.Array], jax.Array]   # (logits, labels) -> (B,) losses.
def targets(labels: jax.Array, num_classes: int) -> jax.Array:
  """(B, C) float targets: int labels (B,) become one-hot; (B, C) one-/multi-hot pass through."""
  if labels.ndim == 1:
    return jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)
  if labels.shape[-1] != num_classes:
    raise ValueError(f'labels have {labels.shape[-1]} classes but the logits {num_classes}.')
  return labels.astype(jnp.float32)


def precision_at_1(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """(B,) 1.0 where the top-1 class of `logits` (B, C) is among the true labels, else 0.0."""
  hot = targets(labels, logits.shape[-1])
  top1 = jnp.argmax(logits, axis=-1)
  return (jnp.take_along_axis(hot, top1[:, None], axis=-1)[:, 0] > 0).astype(jnp.float32)


@functools.partial(jax.jit, static_argnames='loss')
def batch_sums(logits: jax.Array, labels: jax.Array, mask: jax.Array, loss: LossFn) -> dict:
  """Masked sums over one batch: {'correct', 'loss', 'count'} (padding rows have mask 0)."""
  mask = mask.astype(jnp.float32)
  return {'correct': jnp.sum(precision_at_1(logits, labels) * mask),
          'loss': jnp.sum(loss(logits, labels) * mask),
          'count': jnp.sum(mask)}


class ClassifyEvaluator:
  """precision@1 and mean loss of a classifier on a held-out split.

  `run(predict_fn, batches)` yields ('{prefix}/prec@1', fraction) and ('{prefix}/loss', mean
  loss per example), the means over the unmasked examples of every batch.
  """

  def __init__(self, loss: LossFn, prefix: str = eval_config.UPSTREAM):
    """loss(logits, labels) -> (B,) per-example losses, jittable (a fixed function: batch_sums
    compiles once per function)."""
    self.loss = loss
    self.prefix = prefix

  def run(self, predict_fn: Callable[[jax.Array], jax.Array],
          batches: Iterable[dict]) -> Iterator[tuple[str, float]]:
    """predict_fn(images) -> (B, C) logits; batches: dicts with 'image', 'mask' and 'labels'
    ((B, C) one-/multi-hot) or 'label' ((B,) int)."""
    totals = {'correct': 0.0, 'loss': 0.0, 'count': 0.0}
    for batch in batches:
      label_key = 'labels' if 'labels' in batch else 'label'
      missing = {'image', 'mask', label_key} - set(batch)
      if missing:
        raise KeyError(f'eval batches need image, mask and labels (or label); missing '
                       f'{sorted(missing)} (got {sorted(batch)}).')
      sums = batch_sums(predict_fn(batch['image']), jnp.asarray(batch[label_key]),
                        jnp.asarray(batch['mask']), self.loss)
      for key, value in jax.device_get(sums).items():
        totals[key] += float(np.asarray(value, np.float64))
    if totals['count'] == 0:
      raise ValueError('the eval split held no unmasked examples; check its batches and masks.')
    yield f'{self.prefix}/prec@1', totals['correct'] / totals['count']
    yield f'{self.prefix}/loss', totals['loss'] / totals['count']
