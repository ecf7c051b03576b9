"""The pp's tail on the accelerator (data.augment_on = 'device'): flip_lr, randaug, value_range,
onehot, multi_hot and keep, in jax.numpy, on the batches the host ships (data/pp/device_split.py).

`run_tail(split, batch)` runs the tail's ops in order on a whole batch: the same ops with the
same arguments and defaults as data/pp/ops.py's (device_augment_test pins the signatures). The
random op at place i of the pp string draws, per example, from fold_in(batch[AUGMENT_KEY], i):
  flip_lr       mirrors an image left-right when bernoulli(1/2) of its key is true;
  randaug       data/pp/randaug_device.py (the host's 16 ops, table and fill, batched);
  value_range   vmin + (x - in_min) * ((vmax - vmin) / (in_max - in_min)) in float32, the host's
                formula (XLA may fuse the multiply and add: within an ulp of the host's);
  onehot        the int32 id -> float32 (depth,) of `on` and `off`;
  multi_hot     int32 ids padded with -1 -> float32 multi-hot (depth,), a scatter (no (B, ids,
                depth) one-hot in between);
  keep          the named keys and the evaluation's 'mask'.
Flip and RandAugment draw other numbers than the host's TensorFlow ops; given the same draws each
RandAugment op agrees with the host's within data/pp/randaug_device.py's stated bounds. Jittable,
and sharded along the batch like any per-example computation: every example's output depends on
its own pixels and key only.
"""
import jax
import jax.numpy as jnp
import numpy as np

from data.pp import device_split
from data.pp import randaug_device


def _flip_lr():
  def op(batch, keys):
    flip = jax.vmap(jax.random.bernoulli)(keys)
    images = batch['image']
    return {**batch, 'image': jnp.where(flip[:, None, None, None], images[:, :, ::-1], images)}
  return op


def _randaug(num_layers: int = 2, magnitude: float = 15, arithmetic: str = 'project'):
  def op(batch, keys):
    return {**batch, 'image': randaug_device.distort(batch['image'], keys, num_layers,
                                                     float(magnitude), arithmetic)}
  return op


def _value_range(vmin: float = -1, vmax: float = 1, in_min: float = 0, in_max: float = 255,
                 clip_values: bool = False):
  low, scale = np.float32(vmin), np.float32((vmax - vmin) / (in_max - in_min))

  def op(batch):
    image = low + (batch['image'].astype(jnp.float32) - np.float32(in_min)) * scale
    if clip_values:
      image = jnp.clip(image, min(vmin, vmax), max(vmin, vmax))
    return {**batch, 'image': image}
  return op


def _onehot(depth: int, key: str = 'label', key_result: str = 'labels', on: float = 1.0,
            off: float = 0.0):
  def op(batch):
    hit = batch[key][:, None] == jnp.arange(depth, dtype=batch[key].dtype)
    return {**batch, key_result: jnp.where(hit, np.float32(on), np.float32(off))}
  return op


def _multi_hot(depth: int, key: str = 'labels', key_result: str = 'labels'):
  def op(batch):
    ids = batch[key]
    rows = jnp.broadcast_to(jnp.arange(ids.shape[0])[:, None], ids.shape)
    # Padding (-1) goes to column `depth`, outside the array: mode='drop' discards it.
    columns = jnp.where(ids < 0, depth, ids)
    hits = jnp.zeros((ids.shape[0], depth), jnp.float32).at[rows, columns].set(1.0, mode='drop')
    return {**batch, key_result: hits}
  return op


def _keep(*keys: str):
  def op(batch):
    return {k: batch[k] for k in keys + ('mask',) if k in batch}
  return op


# name -> (factory, random): data/pp/ops.py's OPS for the ops a tail may hold.
OPS = {'flip_lr': (_flip_lr, True), 'randaug': (_randaug, True),
       'value_range': (_value_range, False), 'onehot': (_onehot, False),
       'multi_hot': (_multi_hot, False), 'keep': (_keep, False)}


def run_tail(split: device_split.Split, batch: dict) -> dict:
  """The batch after `split`'s tail: from what the host ships (the shipped keys, leading batch
  axis) to what the pp string ends with ('image' float32 and 'labels' for training)."""
  keys = batch.get(device_split.AUGMENT_KEY)
  if split.random and keys is None:
    raise ValueError(f'the tail of {split.pp!r} is random: the batch needs '
                     f'{device_split.AUGMENT_KEY!r} (data.augment_on="device" ships it).')
  for call in split.tail:
    factory, random = OPS[call.name]
    op = factory(*call.args, **call.kwargs)
    if random:
      batch = op(batch, jax.vmap(jax.random.fold_in, (0, None))(keys, call.index))
    else:
      batch = op(batch)
  return batch


def tail_images(split: device_split.Split, images: jax.Array) -> jax.Array:
  """The images after a tail without random ops (evaluation's and few-shot's) and without
  label ops that make 'image'."""
  if split.random:
    raise ValueError(f'{split.pp!r}: an evaluation pp has no random ops.')
  for call in split.tail:
    if call.name in device_split.IMAGE_OPS:
      images = OPS[call.name][0](*call.args, **call.kwargs)({'image': images})['image']
  return images
