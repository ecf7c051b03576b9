"""Tests of the on-device RandAugment: each op against data/pp/randaug.py's TensorFlow op on 224 px
photo-like images at three levels, the batched layer and `distort` against the ops one by one, and
the draws."""
import functools
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from data.datasets import imagenet21k
from data.pp import randaug
from data.pp import randaug_device as rd
from data.pp import randaug_spec

SIZE = (224, 224)
# Level 0.3, 1 and 2. Not magnitude 5: its enhancement factor 1.8 * 0.5 + 0.1 = 1 makes the four
# blends the identity. Under the project's arithmetic Solarize is a no-op from magnitude 10
# (threshold 256), Posterize at 20; under the reference's, Solarize inverts every pixel at 10 and
# 20 (the threshold wraps to 0).
MAGNITUDES = (3, 10, 20)
# Geometric ops: at most this fraction of pixels may differ from TensorFlow's. Both sides compute
# the same float32 source coordinates and round them half away from zero, but XLA may fuse a
# product and a sum into one multiply-add (one rounding where TensorFlow rounds twice) and its sin
# and cos may differ in the last bit, so a coordinate within rounding of a half can round the
# other way and sample the neighbouring pixel. A rotation scatters such coordinates (~1e-4 of the
# pixels). A shear of 0.3 (magnitude 10) puts every 10th column (ShearY; rows for ShearX) on
# exact halves, 0.3 x = 1.5, 4.5, ..., and where the sum y - 0.3 x is small the fused multiply-add
# keeps float32(0.3)'s excess and rounds it the other way: 0.57% of the pixels under XLA:CPU's
# default flags (negative sign, when the layer is fused so), hence 1%. Measured under the tests'
# flags: no pixel differs, for every geometric op, sign and level.
GEOMETRIC_BOUND = 0.01
# Blends: at most 1 level. Both sides compute degenerate + factor * (image - degenerate) in float32
# and truncate, but XLA fuses the multiply and the add (one rounding) and Contrast's mean luma is
# summed in another order, so a value within an ulp of an integer can truncate one level lower or
# higher. Measured: Sharpness at magnitude 20 (factor 3.7) on 0.24% of the RGB photo's pixels and
# 0.02% of the grayscale one's; no other blend differs.
BLEND_BOUND = 1
# Lookup-table ops and Cutout are integer arithmetic (or the host's float formula evaluated on the
# 256 values): exact.
# AutoContrast under the reference's arithmetic, x * scale + offset with offset = -lo * scale:
# the host rounds the product, then the sum; XLA may fuse them into one multiply-add, rounded
# once. The product x * scale <= 255 * 255 / 1 < 2^16, so its rounding error is at most half an
# ulp there, 2^-9; the two results differ by at most that, far below 1, so their truncations
# differ by at most 1 level (only where the exact value lies within 2^-9 of an integer). Measured
# under XLA:CPU: 12.8% of the low-contrast photo's pixels (scale 255 / 153 = 5/3 puts every third
# value on an integer), 0.002% of the grayscale one's. Measured
# under XLA:CPU: 12.8% of the low-contrast photo's pixels (scale 255 / 153 = 5/3 puts every third
# value on an integer), 0.002% of the grayscale one's.
AUTO_CONTRAST_REFERENCE_BOUND = 1


def sharpness_reference_bound(level: float) -> int:
  """Sharpness under the reference's arithmetic: the smoothed image truncated. The host's float
  convolution (a chain of fused multiply-adds on this CPU) can fall just below the exact
  quotient where the 3x3 weighted sum is a multiple of 13, and truncate one level lower than the
  device's exact floor. A degenerate pixel one level apart moves the blend
  d + f (x - d) = f x + (1 - f) d by |1 - f|, plus the blend's own rounding (BLEND_BOUND's
  cause, far below a level); two reals that far apart truncate at most floor(|1 - f|) + 1
  levels apart (no factor of the table makes |1 - f| within rounding of an integer)."""
  factor = rd._factor(level)  # pylint: disable=protected-access
  return max(int(abs(1 - factor)) + 1, BLEND_BOUND)

LAYER = jax.jit(rd.apply_layer, static_argnums=(2, 3))
ONE_OP = jax.jit(rd.apply_op, static_argnums=(1, 2, 5))
DISTORT = jax.jit(rd.distort, static_argnums=(2, 3, 4))


def decode(jpeg: bytes, mode: str) -> np.ndarray:
  image = np.asarray(Image.open(io.BytesIO(jpeg)).convert(mode))
  return image.reshape(image.shape[:2] + (-1,))


@functools.cache
def images(channels: int) -> tuple:
  """224 px photo-like images: for RGB a photo (its channels span 0..255, so AutoContrast keeps
  it) and a low-contrast one (40..193, which AutoContrast stretches); for grayscale one photo."""
  if channels == 1:
    return (decode(imagenet21k.photo(2, SIZE), 'L'),)
  low_contrast = (decode(imagenet21k.photo(1, SIZE), 'RGB') * 0.6 + 40).astype(np.uint8)
  return decode(imagenet21k.photo(0, SIZE), 'RGB'), low_contrast


def tf_draws(seed: tf.Tensor, height: int, width: int):
  """The sign and the Cutout centre that data/pp/randaug.py's ops draw from `seed`."""
  draws = randaug.draw(seed, height, width)
  return float(draws.sign), [int(v) for v in draws.centre]


@functools.cache
def opposite_seeds() -> tuple:
  """Two host seeds whose draws have sign -1 and +1 (and two Cutout centres)."""
  by_sign = {}
  for s in range(100):
    seed = tf.constant([s, 7], tf.int64)
    by_sign.setdefault(tf_draws(seed, *SIZE)[0], seed)
  return by_sign[-1.0], by_sign[1.0]


def seeds_for(name: str) -> tuple:
  """Both signs for the ops that draw one (and two centres for Cutout); one seed for the others."""
  return opposite_seeds() if name in rd.MATRICES or name == 'Cutout' else opposite_seeds()[:1]


def assert_agrees(name: str, got: np.ndarray, want: np.ndarray, context, arithmetic='project',
                  level=None):
  diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
  if (name, arithmetic) == ('AutoContrast', 'reference'):
    assert diff.max() <= AUTO_CONTRAST_REFERENCE_BOUND, (name, context, diff.max())
  elif (name, arithmetic) == ('Sharpness', 'reference'):
    assert diff.max() <= sharpness_reference_bound(level), (name, context, diff.max())
  elif name in rd.DEGENERATES:
    assert diff.max() <= BLEND_BOUND, (name, context, diff.max())
  elif name in rd.MATRICES:
    differing = np.any(diff > 0, axis=-1).mean()
    assert differing <= GEOMETRIC_BOUND, (name, context, differing)
  else:
    np.testing.assert_array_equal(got, want, err_msg=f'{name} {context}')


def layer_draws(ops, signs, centres) -> rd.Draws:
  return rd.Draws(op=jnp.asarray(ops, jnp.int32), sign=jnp.asarray(signs, jnp.float32),
                  centre=jnp.asarray(centres, jnp.int32))


@pytest.mark.parametrize('arithmetic', randaug_spec.ARITHMETICS)
def test_each_side_executes_exactly_the_described_ops(arithmetic):
  assert tuple(randaug.op_table(arithmetic)) == randaug_spec.OPS
  # The three batched computations and Cutout cover each op once.
  luts, degenerates = rd.tables(arithmetic)
  groups = list(luts) + list(degenerates) + list(rd.MATRICES) + ['Cutout']
  assert sorted(groups) == sorted(randaug_spec.OPS)


@pytest.mark.parametrize('arithmetic', randaug.ARITHMETICS)
@pytest.mark.parametrize('channels', [3, 1])
@pytest.mark.parametrize('magnitude', MAGNITUDES)
def test_each_op_matches_tensorflow(magnitude, channels, arithmetic):
  # One batched layer (the device computation) gives every image its op; each image is compared
  # with the host op run on it with the seed whose draws the layer was given.
  level = magnitude / randaug.MAX_LEVEL
  host_ops = randaug.op_table(arithmetic)
  cases = [(image, op, seed) for image in images(channels) for op, name in enumerate(rd.NAMES)
           for seed in seeds_for(name)]
  draws = [tf_draws(seed, *SIZE) for _, _, seed in cases]
  batch = jnp.asarray(np.stack([image for image, _, _ in cases]))
  out = LAYER(batch, layer_draws([op for _, op, _ in cases], *zip(*draws)), level, arithmetic)
  for (image, op, seed), got in zip(cases, np.asarray(out)):
    name = rd.NAMES[op]
    want = host_ops[name](tf.constant(image), level, randaug.draw(seed, *SIZE)).numpy()
    assert_agrees(name, got, want, (magnitude, channels, seed.numpy().tolist()), arithmetic,
                  level)


@pytest.mark.parametrize('arithmetic', randaug.ARITHMETICS)
@pytest.mark.parametrize('name', ['AutoContrast', 'Equalize', 'Sharpness', 'Contrast', 'Color'])
def test_edge_cases_match_tensorflow(name, arithmetic):
  # Branches the photos do not reach: a flat channel (AutoContrast and Equalize keep it), fewer
  # than 256 pixels (Equalize's step is 0: unchanged), an image that is mostly its border (which
  # Sharpness keeps; the host's Sharpness fails on images under 3 pixels high or wide).
  rng = np.random.default_rng(7)
  flat = np.full((8, 8, 3), 77, np.uint8)
  flat[..., 1] = rng.integers(0, 256, (8, 8))
  small = rng.integers(0, 256, (10, 12, 1), dtype=np.uint8)
  thin = rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)
  level = 0.3
  for image in (flat, small, thin):
    got = np.asarray(ONE_OP(jnp.asarray(image[None]), name, level, None, None, arithmetic))[0]
    want = randaug.op_table(arithmetic)[name](tf.constant(image), level, None).numpy()
    assert_agrees(name, got, want, image.shape, arithmetic, level)


@pytest.mark.parametrize('name', ['Posterize', 'Solarize'])
def test_reference_tables_match_tensorflow_at_every_magnitude(name):
  # The wrapped Solarize threshold and the clamped Posterize shift at the magnitudes the golden
  # covers (0-2: no bits kept; 25: 10 bits; 15 and 25: thresholds 384 and 640).
  image = images(3)[0]
  for magnitude in (0, 1, 2, 3, 5, 10, 15, 20, 25):
    level = magnitude / randaug.MAX_LEVEL
    got = np.asarray(ONE_OP(jnp.asarray(image[None]), name, level, None, None, 'reference'))[0]
    want = randaug.op_table('reference')[name](tf.constant(image), level, None).numpy()
    np.testing.assert_array_equal(got, want, err_msg=f'{name} {magnitude}')


def keys(count: int, seed: int = 0) -> jax.Array:
  return jax.random.split(jax.random.PRNGKey(seed), count)


def test_distort_equals_the_chosen_ops_one_by_one():
  # The batched layers (lookup tables, blends, one warp with the Cutout mask, each the identity
  # for the other images) against each image's ops applied alone, with the same draws.
  magnitude, num_layers = 9, 4    # Level 0.9: no op is a no-op (Posterize keeps 3 bits).
  level = magnitude / randaug.MAX_LEVEL
  batch = np.stack([decode(imagenet21k.photo(seed, (32, 32)), 'RGB') for seed in range(24)])
  batch_keys = keys(len(batch), seed=1)
  draws = jax.tree.map(np.asarray, rd.draw(batch_keys, num_layers, 32, 32))
  assert set(draws.op.ravel()) == set(range(len(rd.NAMES)))    # These keys draw every op.
  out = np.asarray(DISTORT(jnp.asarray(batch), batch_keys, num_layers, magnitude))
  for b, image in enumerate(batch):
    expected = jnp.asarray(image[None])
    for layer in range(num_layers):
      sign, centre = draws.sign[b, layer, None], draws.centre[b, layer, None]
      expected = ONE_OP(expected, int(draws.op[b, layer]), level, sign, centre)
    np.testing.assert_array_equal(out[b], np.asarray(expected)[0], err_msg=str(draws.op[b]))


@pytest.mark.parametrize('channels', [1, 3])
def test_distort_jits_keeps_dtype_and_shape_and_follows_the_keys(channels):
  batch = jnp.asarray(np.random.default_rng(channels).integers(0, 256, (6, 24, 20, channels)),
                      jnp.uint8)
  out = DISTORT(batch, keys(6), 2, 20.0)
  assert out.shape == batch.shape and out.dtype == jnp.uint8
  np.testing.assert_array_equal(out, DISTORT(batch, keys(6), 2, 20.0))
  assert not np.array_equal(out, DISTORT(batch, keys(6, seed=1), 2, 20.0))
  np.testing.assert_array_equal(DISTORT(batch, keys(6), 0, 20.0), batch)
  np.testing.assert_array_equal(rd.distort(batch, keys(6), 0, 20.0), batch)


def test_draws_are_uniform():
  # Each of the n = 4096 * 4 draws picks op k with probability p = 1/16: its frequency has the
  # binomial std sqrt(p (1 - p) / n) = 0.0019, and 4.5 std (0.0085) fails a correct draw with
  # probability 7e-6 per op (1e-4 for all 16). The sign is -1 with probability 1/2 (std 0.0039).
  n_keys, num_layers, height, width = 4096, 4, 28, 40
  draws = jax.jit(rd.draw, static_argnums=(1, 2, 3))(keys(n_keys), num_layers, height, width)
  n = n_keys * num_layers
  frequency = np.bincount(np.asarray(draws.op).ravel(), minlength=len(rd.NAMES)) / n
  p = 1 / len(rd.NAMES)
  np.testing.assert_array_less(np.abs(frequency - p), 4.5 * np.sqrt(p * (1 - p) / n))
  signs = np.asarray(draws.sign)
  assert set(np.unique(signs)) == {-1.0, 1.0}
  assert abs((signs < 0).mean() - 0.5) < 4.5 * np.sqrt(0.25 / n)
  centre = np.asarray(draws.centre)
  for axis, size in ((0, height), (1, width)):   # Every row (column) of the image, none outside.
    assert set(np.unique(centre[..., axis])) == set(range(size))


def test_rejects_what_it_cannot_augment():
  with pytest.raises(ValueError, match='uint8'):
    rd.distort(jnp.zeros((2, 8, 8, 3)), keys(2), 2, 10.0)
  with pytest.raises(ValueError, match='batch'):
    rd.distort(jnp.zeros((2, 8, 8, 2), jnp.uint8), keys(2), 2, 10.0)
  with pytest.raises(ValueError, match='raw threefry2x32'):     # New-style typed keys.
    rd.distort(jnp.zeros((2, 8, 8, 3), jnp.uint8), jax.random.split(jax.random.key(0)), 2, 10.0)
  with pytest.raises(ValueError, match='one key per image'):
    rd.distort(jnp.zeros((2, 8, 8, 3), jnp.uint8), keys(3), 2, 10.0)
  with pytest.raises(ValueError, match='Unknown'):
    rd.apply_op(jnp.zeros((2, 8, 8, 3), jnp.uint8), 'Mirror', 1.0)
  with pytest.raises(ValueError, match='arithmetic'):
    rd.distort(jnp.zeros((2, 8, 8, 3), jnp.uint8), keys(2), 2, 10.0, 'pil')
