"""The pp's tail on the accelerator (data.augment_on = 'device'): flip_lr, randaug, value_range,
onehot, multi_hot and keep, in jax.numpy, on the batches the host ships (data/pp/device_split.py).

`run_tail(split, batch)` runs the tail's ops in order on a whole batch: data/pp/op_specs.py's ops,
with its arguments and defaults, as data/pp/ops.py's are. The random op at place i of the pp string
draws, per example, from fold_in(batch[AUGMENT_KEY], i):
  flip_lr       mirrors an image left-right when bernoulli(1/2) of its key is true;
  randaug       data/pp/randaug_device.py (the host's 16 ops, table and fill, batched);
  value_range   vmin + (x - in_min) * ((vmax - vmin) / (in_max - in_min)) in float32, the host's
                formula (XLA may fuse the multiply and add: within an ulp of the host's);
  onehot        the int32 id -> float32 (depth,) of `on` and `off`;
  multi_hot     int32 ids padded with -1 -> float32 multi-hot (depth,), a scatter (no (B, ids,
                depth) one-hot in between);
  keep          the named keys and the evaluation's 'mask'.
`run_tail_in_chunks(split, chunk, batch)` is the same tail as lax.map over chunks of the batch, what
the training step runs on each device's shard (vmoe/train/train_step.py with_device_tail).
Flip and RandAugment draw other numbers than the host's TensorFlow ops; given the same draws each
RandAugment op agrees with the host's within data/pp/randaug_device.py's stated bounds. Jittable,
and sharded along the batch like any per-example computation: every example's output depends on
its own pixels and key only.
"""
import jax
import jax.numpy as jnp
import numpy as np

from data.pp import device_split
from data.pp import op_specs
from data.pp import randaug_device


@op_specs.takes('flip_lr')
def _flip_lr():
  def op(batch, keys):
    flip = jax.vmap(jax.random.bernoulli)(keys)
    images = batch['image']
    return {**batch, 'image': jnp.where(flip[:, None, None, None], images[:, :, ::-1], images)}
  return op


@op_specs.takes('randaug')
def _randaug(num_layers: int, magnitude: float, arithmetic: str):
  def op(batch, keys):
    return {**batch, 'image': randaug_device.distort(batch['image'], keys, num_layers,
                                                     float(magnitude), arithmetic)}
  return op


@op_specs.takes('value_range')
def _value_range(vmin: float, vmax: float, in_min: float, in_max: float, clip_values: bool):
  low, scale = np.float32(vmin), np.float32((vmax - vmin) / (in_max - in_min))

  def op(batch):
    image = low + (batch['image'].astype(jnp.float32) - np.float32(in_min)) * scale
    if clip_values:
      image = jnp.clip(image, min(vmin, vmax), max(vmin, vmax))
    return {**batch, 'image': image}
  return op


@op_specs.takes('onehot')
def _onehot(depth: int, key: str, key_result: str, on: float, off: float):
  def op(batch):
    hit = batch[key][:, None] == jnp.arange(depth, dtype=batch[key].dtype)
    return {**batch, key_result: jnp.where(hit, np.float32(on), np.float32(off))}
  return op


@op_specs.takes('multi_hot')
def _multi_hot(depth: int, key: str, key_result: str):
  def op(batch):
    ids = batch[key]
    rows = jnp.broadcast_to(jnp.arange(ids.shape[0])[:, None], ids.shape)
    # Padding (-1) goes to column `depth`, outside the array: mode='drop' discards it.
    columns = jnp.where(ids < 0, depth, ids)
    hits = jnp.zeros((ids.shape[0], depth), jnp.float32).at[rows, columns].set(1.0, mode='drop')
    return {**batch, key_result: hits}
  return op


@op_specs.takes('keep')
def _keep(*keys: str):
  def op(batch):
    return {k: batch[k] for k in keys + ('mask',) if k in batch}
  return op


# name -> factory: the accelerator's executor of each of data/pp/op_specs.py's DEVICE_OPS.
OPS = {'flip_lr': _flip_lr, 'randaug': _randaug, 'value_range': _value_range, 'onehot': _onehot,
       'multi_hot': _multi_hot, 'keep': _keep}


def run_tail(split: device_split.Split, batch: dict) -> dict:
  """The batch after `split`'s tail: from what the host ships (the shipped keys, leading batch
  axis) to what the pp string ends with ('image' float32 and 'labels' for training)."""
  keys = batch.get(device_split.AUGMENT_KEY)
  if split.random and keys is None:
    raise ValueError(f'the tail of {split.pp!r} is random: the batch needs '
                     f'{device_split.AUGMENT_KEY!r} (data.augment_on="device" ships it).')
  for call in split.tail:
    op = OPS[call.name](*call.args, **call.kwargs)
    if op_specs.OPS[call.name].random:
      batch = op(batch, jax.vmap(jax.random.fold_in, (0, None))(keys, call.index))
    else:
      batch = op(batch)
  return batch


# Images a device's tail holds at once in training (run_tail_in_chunks). XLA:TPU's compile time
# grows with the images one program augments: the paper's tail for 64 images compiles in 71.9
# CPU-s for a TPU v4 as one program, and in 18.5 in chunks of 8 (20.2 at 512 images), holding 0.36
# MB of temporaries an image (0.80 at 512) against 1.23 (bench/results/tail_memory.json,
# tail_memory_chunked.json).
CHUNK = 8


def run_tail_in_chunks(split: device_split.Split, chunk: int, batch: dict) -> dict:
  """run_tail(split, batch) as lax.map over consecutive chunks of the batch: of `chunk` examples,
  or of the largest size under it that divides the batch. Every output is per example (its
  pixels, its key), so the values are run_tail's: integers equal, floats within an ulp (XLA may
  fuse value_range's multiply and add in one program and not the other)."""
  size = next(iter(batch.values())).shape[0]
  chunk = max(d for d in range(1, min(chunk, size) + 1) if size % d == 0)
  if chunk == size:
    return run_tail(split, batch)
  parts = jax.tree.map(lambda x: x.reshape((size // chunk, chunk) + x.shape[1:]), batch)
  out = jax.lax.map(lambda part: run_tail(split, part), parts)
  return jax.tree.map(lambda x: x.reshape((size,) + x.shape[2:]), out)


def tail_images(split: device_split.Split, images: jax.Array) -> jax.Array:
  """The images after a tail without random ops (evaluation's and few-shot's) and without
  label ops that make 'image'."""
  if split.random:
    raise ValueError(f'{split.pp!r}: an evaluation pp has no random ops.')
  for call in split.tail:
    if call.name in device_split.IMAGE_OPS:
      images = OPS[call.name](*call.args, **call.kwargs)({'image': images})['image']
  return images
