"""The accelerator's tail of the training pp: flip, RandAugment, value range and one-hot."""
import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from data import device_augment
from data import ops

KEYS = jax.vmap(jax.random.PRNGKey)(jnp.arange(64))


def _images(batch=64, size=16):
  return jnp.asarray(np.random.default_rng(0).integers(0, 256, (batch, size, size, 3)), jnp.uint8)


def test_without_randaugment_each_image_is_the_hosts_value_range_of_it_or_its_mirror():
  images, labels = _images(), jnp.arange(64) % 10
  out = jax.jit(lambda i, l, k: device_augment.augment(i, l, k, 10, num_layers=0))(
      images, labels, KEYS)
  host = lambda image: ops.value_range(-1, 1)({'image': tf.constant(image)})['image'].numpy()
  flipped = 0
  for i in range(64):
    plain, mirror = host(np.asarray(images[i])), host(np.asarray(images[i])[:, ::-1])
    # value_range is one multiply and one add in float32: equal, or within an ulp where the
    # compiler fuses them.
    is_mirror = np.allclose(out['image'][i], mirror, rtol=0, atol=1e-6)
    assert is_mirror or np.allclose(out['image'][i], plain, rtol=0, atol=1e-6)
    flipped += is_mirror
  # Half of 64 images flip: a binomial(64, 1/2) lies in 32 +- 4 sd (4 x 4) almost surely.
  assert 16 <= flipped <= 48
  np.testing.assert_array_equal(out['labels'], jax.nn.one_hot(labels, 10))
  assert out['image'].dtype == jnp.float32 and out['image'].shape == (64, 16, 16, 3)


def test_keys_decide_everything():
  images, labels = _images(8, 32), jnp.zeros(8, jnp.int32)
  run = jax.jit(lambda k: device_augment.augment(images, labels, k, 4, 2, 20)['image'])
  np.testing.assert_array_equal(run(KEYS[:8]), run(KEYS[:8]))
  assert not np.array_equal(run(KEYS[:8]), run(KEYS[8:16]))
  assert float(jnp.min(run(KEYS[:8]))) >= -1 and float(jnp.max(run(KEYS[:8]))) <= 1
