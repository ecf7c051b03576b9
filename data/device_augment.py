"""The training pp's random tail on the accelerator: flip, RandAugment, value range and one-hot,
in jax.numpy, for a batch of uint8 images the host cropped (decode|inception_crop).

`augment(images, labels, keys, ...)` does what the host's `flip_lr|randaug(n, m)|value_range(-1,
1)|onehot(classes)` does, image by image, from one raw PRNG key per example: the flip from one
half of the key, RandAugment (data/randaug_device.py) from the other. The host computes the keys
from the run's seed, the process and the example's position in the data order, so a resumed run
draws the same ones. Not yet called by the training program: bench/device_augment.py times it
beside the step it would run in.
"""
import jax
import jax.numpy as jnp

from data import randaug_device


def flip_lr(images: jax.Array, keys: jax.Array) -> jax.Array:
  """Each image (B, H, W, C) mirrored left-right with probability 1/2, from its key (B, 2)."""
  flip = jax.vmap(lambda key: jax.random.bernoulli(key))(keys)
  return jnp.where(flip[:, None, None, None], images[:, :, ::-1, :], images)


def augment(images: jax.Array, labels: jax.Array, keys: jax.Array, num_classes: int,
            num_layers: int = 2, magnitude: float = 20, value_range=(-1.0, 1.0)) -> dict:
  """{'image': float32 (B, H, W, C) in value_range, 'labels': float32 one-hot (B, classes)} of
  uint8 images (B, H, W, C) and int label ids (B,), keys (B, 2) uint32 raw keys; num_layers 0
  skips RandAugment."""
  flip_keys, randaug_keys = jnp.split(jax.vmap(jax.random.split)(keys), 2, axis=1)
  images = flip_lr(images, flip_keys[:, 0])
  if num_layers:
    images = randaug_device.distort(images, randaug_keys[:, 0], num_layers, magnitude)
  low, high = value_range
  scaled = images.astype(jnp.float32) * ((high - low) / 255.0) + low
  return {'image': scaled, 'labels': jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)}
