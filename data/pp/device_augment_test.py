"""The pp's tail on the accelerator, against the host's ops on the same batches."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.pp import device_augment
from data.pp import device_split
from data.pp import randaug_device
from data.stream import pipeline
from testing.data import data_config

KEYS = jax.vmap(jax.random.PRNGKey)(jnp.arange(64))
LABELS = 'onehot(10)|keep("image", "labels")'
# value_range is one multiply and one add in float32; XLA may fuse them into one rounding, so a
# value in [-1, 1] may differ from the host's by an ulp of 1: 2^-23.
VALUE_RANGE_ATOL = 2.0 ** -23


def _images(batch=64, size=16):
  return jnp.asarray(np.random.default_rng(0).integers(0, 256, (batch, size, size, 3)), jnp.uint8)


def _tail(pp: str):
  return jax.jit(lambda batch: device_augment.run_tail(device_split.split(pp), batch))


def _host_and_device(config, pp: str, n: int = 3, **iterator):
  """n training batches of `pp` as the host makes them, and as the device path makes them."""
  make = lambda cut: pipeline.make_train_iterator(
      dataclasses.replace(config, pp_train=pp), cut=cut, **iterator)
  host, device = make(None), make(device_split.split(pp))
  tail = _tail(pp)
  return [(next(host), next(device), tail) for _ in range(n)]


def test_a_tail_without_random_ops_gives_the_hosts_batches(digits_dir):
  pp = f'decode(channels=1)|value_range(-1, 1)|{LABELS}'
  for host, shipped, tail in _host_and_device(data_config(data_dir=digits_dir), pp,
                                              batch_size=64, seed=3):
    assert sorted(shipped) == ['image', 'label'] and shipped['image'].dtype == np.uint8
    out = tail(shipped)
    assert sorted(out) == ['image', 'labels']
    np.testing.assert_allclose(out['image'], host['image'], rtol=0, atol=VALUE_RANGE_ATOL)
    np.testing.assert_array_equal(out['labels'], host['labels'])


def test_multi_hot_on_the_device_is_the_hosts(multilabel):
  pp = 'decode|resize(4)|value_range(0, 1)|multi_hot(8)|keep("image", "labels")'
  for host, shipped, tail in _host_and_device(multilabel, pp, batch_size=8, seed=0):
    assert shipped['labels'].shape == (8, device_split.MAX_LABEL_IDS)
    np.testing.assert_array_equal(tail(shipped)['labels'], host['labels'])


def test_the_flip_mirrors_about_half_the_images_and_keeps_the_rest():
  pp = f'decode|flip_lr|value_range(-1, 1)|{LABELS}'
  images = _images()
  out = _tail(pp)({'image': images, 'label': jnp.arange(64) % 10,
                   device_split.AUGMENT_KEY: KEYS})['image']
  plain = np.asarray(images, np.float32) * np.float32(2 / 255) - 1
  mirrored = [np.allclose(o, p[:, ::-1], rtol=0, atol=VALUE_RANGE_ATOL) for o, p in
              zip(np.asarray(out), plain)]
  same = [np.allclose(o, p, rtol=0, atol=VALUE_RANGE_ATOL) for o, p in zip(np.asarray(out), plain)]
  assert all(m or s for m, s in zip(mirrored, same))
  # 64 fair flips: a binomial(64, 1/2) lies within 32 +- 16 (4 standard deviations) almost surely.
  assert 16 <= sum(mirrored) <= 48


def test_each_random_op_draws_from_its_place_in_the_string():
  # The flip at place 1 draws from fold_in(key, 1): move it to place 2 and other images flip.
  images, labels = _images(), jnp.zeros(64, jnp.int32)
  batch = {'image': images, 'label': labels, device_split.AUGMENT_KEY: KEYS}
  first = _tail(f'decode|flip_lr|value_range(0, 255)|{LABELS}')(batch)['image']
  second = _tail(f'decode|value_range(0, 255)|flip_lr|{LABELS}')(
      {**batch, 'image': images})['image']
  flips = lambda out: np.asarray(jnp.any(out != images.astype(jnp.float32), axis=(1, 2, 3)))
  assert not np.array_equal(flips(first), flips(second))
  expected = jax.vmap(jax.random.bernoulli)(jax.vmap(jax.random.fold_in, (0, None))(KEYS, 1))
  np.testing.assert_array_equal(flips(first), expected)


def test_keys_decide_the_augmentation():
  pp = f'decode|flip_lr|randaug(2, 20)|value_range(-1, 1)|{LABELS}'
  batch = lambda keys: {'image': _images(8, 32), 'label': jnp.zeros(8, jnp.int32),
                        device_split.AUGMENT_KEY: keys}
  run = lambda keys: _tail(pp)(batch(keys))['image']
  np.testing.assert_array_equal(run(KEYS[:8]), run(KEYS[:8]))
  assert not np.array_equal(run(KEYS[:8]), run(KEYS[8:16]))
  assert float(jnp.min(run(KEYS[:8]))) >= -1 and float(jnp.max(run(KEYS[:8]))) <= 1
  with pytest.raises(ValueError, match='augment_key'):
    device_augment.run_tail(device_split.split(pp), {'image': _images(8, 32)})


def test_evaluation_images_take_the_tails_image_ops():
  pp = 'decode|resize(16)|value_range(0, 1, clip_values=True)|keep("image", "label")'
  images = _images(4)
  # x times float32(1/255) against x / 255: the scale's rounding (relative 2^-24) and one
  # rounding of the result (half an ulp, <= 2^-25 below 1) on one side, one on the other: within
  # 2^-23 of each other for results in [0, 1].
  np.testing.assert_allclose(device_augment.tail_images(device_split.split(pp), images),
                             np.asarray(images, np.float32) / 255, rtol=0, atol=2.0 ** -23)
  with pytest.raises(ValueError, match='no random ops'):
    device_augment.tail_images(device_split.split(f'decode|flip_lr|{LABELS}'), images)


def test_randaug_carries_its_arithmetic_to_the_device():
  # randaug(..., arithmetic='reference') in the pp string runs randaug_device.distort with that
  # arithmetic on its own key (its place in the string, 1); the default is the project's.
  images = _images(8, 32)
  batch = {'image': images, 'label': jnp.zeros(8, jnp.int32), device_split.AUGMENT_KEY: KEYS[:8]}
  keys = jax.vmap(jax.random.fold_in, (0, None))(KEYS[:8], 1)
  outs = {}
  for arithmetic in ('project', 'reference'):
    pp = f"decode|randaug(1, 20, arithmetic='{arithmetic}')|value_range(0, 255)|{LABELS}"
    outs[arithmetic] = np.asarray(_tail(pp)(batch)['image'])
    expected = randaug_device.distort(images, keys, 1, 20.0, arithmetic)
    np.testing.assert_array_equal(outs[arithmetic], np.asarray(expected, np.float32))
  default = np.asarray(_tail(f'decode|randaug(1, 20)|value_range(0, 255)|{LABELS}')(batch)['image'])
  np.testing.assert_array_equal(default, outs['project'])
  assert not np.array_equal(outs['project'], outs['reference'])


@pytest.mark.parametrize('size,chunk,expected', [(16, 8, 8), (12, 8, 6), (8, 8, 8)])
def test_the_tail_in_chunks_is_the_tail_on_the_whole_batch(size, chunk, expected):
  # Every output is per example (its pixels, its key), so lax.map over chunks gives run_tail's
  # values: 16 images in chunks of 8, 12 in chunks of 6 (the largest size under 8 dividing 12),
  # 8 at once. Integers are equal; floats within an ulp of 1 (2^-23): XLA may fuse value_range's
  # multiply and add in one program and not the other (D20).
  split = device_split.split(f'decode|flip_lr|randaug(2, 20)|value_range(-1, 1)|{LABELS}')
  batch = {'image': _images(size, 32), 'label': jnp.arange(size) % 10,
           device_split.AUGMENT_KEY: KEYS[:size]}
  whole = jax.jit(lambda b: device_augment.run_tail(split, b))(batch)
  parts = jax.jit(lambda b: device_augment.run_tail_in_chunks(split, chunk, b))
  program = parts.lower(batch).as_text()
  # The images enter the loop as (size / expected, expected, 32, 32, 3).
  assert (f'tensor<{size // expected}x{expected}x32x32x3xui8>' in program) == (expected < size)
  out = parts(batch)
  assert sorted(out) == sorted(whole) == ['image', 'labels']
  for key, value in out.items():
    ulp = VALUE_RANGE_ATOL if np.issubdtype(value.dtype, np.floating) else 0
    np.testing.assert_allclose(np.asarray(value), np.asarray(whole[key]), rtol=0, atol=ulp)
