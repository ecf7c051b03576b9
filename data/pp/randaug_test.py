"""Tests of RandAugment: every op on 1 and 3 channels, hand-worked values, determinism."""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from data.pp import randaug

SEED = tf.constant([3, 4], tf.int64)


def op(name: str, image: np.ndarray, magnitude: float, seed=SEED,
       arithmetic: str = 'project') -> np.ndarray:
  level = magnitude / randaug.MAX_LEVEL
  draws = randaug.draw(seed, *image.shape[:2])
  return randaug.op_table(arithmetic)[name](tf.constant(image, tf.uint8), level, draws).numpy()


@pytest.mark.parametrize('channels', [1, 3])
def test_every_op_keeps_shape_and_dtype(channels):
  image = np.random.default_rng(0).integers(0, 256, (20, 24, channels), dtype=np.uint8)
  for name in randaug.OPS:
    for magnitude, arithmetic in itertools.product((0, 10, 20), randaug.ARITHMETICS):
      out = op(name, image, magnitude, arithmetic=arithmetic)
      assert out.shape == image.shape and out.dtype == np.uint8, (name, magnitude, arithmetic)


def test_reference_op_list():
  # autoaugment.py distort_image_with_randaugment's `available_ops`, in its order: a layer draws
  # an index into this list, so the order is part of the recipe.
  assert list(randaug.OPS) == [
      'AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize', 'Color',
      'Contrast', 'Brightness', 'Sharpness', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY',
      'Cutout', 'SolarizeAdd']


def test_pixel_ops_hand_worked():
  image = np.array([[[100], [200], [120], [127]]], np.uint8)
  np.testing.assert_array_equal(op('Invert', image, 5).ravel(), [155, 55, 135, 128])
  # Magnitude 5 -> level 0.5. Posterize keeps int(4 * 0.5) = 2 bits: 100 = 0b01100100 -> 64,
  # 200 = 0b11001000 -> 192, 120 = 0b01111000 -> 64, 127 -> 64.
  np.testing.assert_array_equal(op('Posterize', image, 5).ravel(), [64, 192, 64, 64])
  # Solarize: threshold int(256 * 0.5) = 128; 200 -> 255 - 200 = 55.
  np.testing.assert_array_equal(op('Solarize', image, 5).ravel(), [100, 55, 120, 127])
  # SolarizeAdd: + int(110 * 0.5) = 55 below 128: 100 -> 155, 120 -> 175, 127 -> 182.
  np.testing.assert_array_equal(op('SolarizeAdd', image, 5).ravel(), [155, 200, 175, 182])
  # Magnitude 20 (level 2): 8 bits kept, threshold 512: both no-ops under the project's
  # arithmetic (not the reference's: see the next test).
  np.testing.assert_array_equal(op('Posterize', image, 20), image)
  np.testing.assert_array_equal(op('Solarize', image, 20), image)


def test_reference_solarize_and_posterize_hand_worked():
  # The reference compares a uint8 image with int(256 * level) cast to uint8: 512 (magnitude 20)
  # and 256 (10) wrap to 0, so every pixel is inverted; 384 (15) wraps to 128.
  image = np.array([[[0], [100], [200], [255]]], np.uint8)
  for magnitude in (10, 20):
    np.testing.assert_array_equal(op('Solarize', image, magnitude, arithmetic='reference'),
                                  255 - image)
  np.testing.assert_array_equal(op('Solarize', image, 15, arithmetic='reference').ravel(),
                                [0, 100, 55, 0])
  # Posterize at magnitude 0-2 keeps int(4 * level) = 0 bits: shift 8, which TensorFlow clamps to
  # 7, keeping the top bit (200 -> 128, 100 -> 0). At magnitude 25 (10 bits) the shift -2 is cast
  # to uint8 (254) and clamped to 7 as well; at 20 (8 bits, shift 0) the image stays.
  for magnitude in (0, 2, 25):
    np.testing.assert_array_equal(
        op('Posterize', image, magnitude, arithmetic='reference').ravel(), [0, 0, 128, 128])
  np.testing.assert_array_equal(op('Posterize', image, 20, arithmetic='reference'), image)


def test_reference_blends_hand_worked():
  # Contrast blends toward pixel count / 256, truncated, whatever the image: 4 pixels give 0
  # (0.015625), so at factor 0.1 (magnitude 0) 200 -> 0 + 0.1 * 200 = 20. At 224 x 224 the
  # level is 50176 / 256 = 196.
  image = np.array([[[0], [100], [200], [255]]], np.uint8)
  np.testing.assert_array_equal(op('Contrast', image, 0, arithmetic='reference').ravel(),
                                [0, 10, 20, 25])
  assert int(randaug.reference_contrast_level(224, 224)) == 196
  # Color's grey is uint8: pure red's luma 0.2989 * 255 = 76.2 becomes
  # trunc(0.2989 * 255.5) = 76 (tf.image's float -> uint8 scale), so factor 0.1 gives
  # 76 + 0.1 * (255 - 76) = 93.9 -> 93 and 76 * 0.9 = 68.4 -> 68 (the project's float grey: 94).
  red = np.zeros((1, 1, 3), np.uint8)
  red[..., 0] = 255
  np.testing.assert_array_equal(op('Color', red, 0, arithmetic='reference').ravel(), [93, 68, 68])


def test_reference_sharpness_truncates_and_auto_contrast_adds_an_offset():
  # A 3 x 3 image of 10s with 17 in the centre, its one interior pixel: smoothed
  # (8 * 10 + 5 * 17) / 13 = 12.69, truncated 12 (the reference), rounded 13 (the project).
  # Factor 0.1 (magnitude 0): 12 + 0.1 * (17 - 12) = 12.5 -> 12 against 13 + 0.4 = 13.4 -> 13.
  image = np.full((3, 3, 1), 10, np.uint8)
  image[1, 1] = 17
  assert op('Sharpness', image, 0, arithmetic='reference')[1, 1, 0] == 12
  assert op('Sharpness', image, 0)[1, 1, 0] == 13
  # AutoContrast: lo 50, hi 150: scale 2.55, offset -127.5; 100 * 2.55 - 127.5 = 127.5 -> 127.
  image = np.array([[[50], [100], [150]]], np.uint8)
  np.testing.assert_array_equal(op('AutoContrast', image, 0, arithmetic='reference').ravel(),
                                [0, 127, 255])


def test_unknown_arithmetic_is_refused():
  with pytest.raises(ValueError, match='arithmetic'):
    randaug.op_table('pil')


def test_enhance_ops_hand_worked():
  # Magnitude 0: factor 1.8 * 0 + 0.1 = 0.1.
  image = np.array([[[0], [100]]], np.uint8)
  # Brightness: 0.1 * 100 = 10.
  np.testing.assert_array_equal(op('Brightness', image, 0).ravel(), [0, 10])
  # Contrast: mean 50; 50 + 0.1 * (0 - 50) = 45, 50 + 0.1 * 50 = 55.
  np.testing.assert_array_equal(op('Contrast', image, 0).ravel(), [45, 55])
  # Color of a grayscale image blends it with itself: unchanged.
  np.testing.assert_array_equal(op('Color', image, 0), image)
  # Magnitude 5: factor 1.0, the identity.
  rgb = np.random.default_rng(1).integers(0, 256, (5, 6, 3), dtype=np.uint8)
  for name in ('Brightness', 'Contrast', 'Color', 'Sharpness'):
    np.testing.assert_array_equal(op(name, rgb, 5), rgb, err_msg=name)
  # Color at factor 0.1 of pure red (luma 0.2989 * 255 = 76.2): 76.2 + 0.1 * (255 - 76.2) = 94.1.
  red = np.zeros((1, 1, 3), np.uint8)
  red[..., 0] = 255
  np.testing.assert_array_equal(op('Color', red, 0).ravel(), [94, 68, 68])  # 76.2 * 0.9 = 68.6


def test_sharpness_keeps_border_and_flat_images():
  flat = np.full((6, 6, 3), 77, np.uint8)
  np.testing.assert_array_equal(op('Sharpness', flat, 0), flat)
  image = np.random.default_rng(2).integers(0, 256, (6, 7, 1), dtype=np.uint8)
  out = op('Sharpness', image, 0)
  np.testing.assert_array_equal(out[0], image[0])
  np.testing.assert_array_equal(out[:, -1], image[:, -1])


def test_auto_contrast_and_equalize_hand_worked():
  # (x - 50) * 255 / 100: 50 -> 0, 100 -> 127.5 -> 127, 150 -> 255. A flat channel is kept.
  image = np.array([[[50, 9], [100, 9], [150, 9]]], np.uint8)
  np.testing.assert_array_equal(op('AutoContrast', image, 0)[..., 0].ravel(), [0, 127, 255])
  np.testing.assert_array_equal(op('AutoContrast', image, 0)[..., 1].ravel(), [9, 9, 9])
  # 260 pixels of 10 and 260 of 20: step = (520 - 260) // 255 = 1; lut[10] = 0 (nothing below),
  # lut[20] = min(260, 255) = 255.
  image = np.array([10] * 260 + [20] * 260, np.uint8).reshape(1, 520, 1)
  out = op('Equalize', image, 0).ravel()
  assert set(out[:260]) == {0} and set(out[260:]) == {255}
  # Fewer than 256 pixels: step 0, unchanged (PIL's rule).
  np.testing.assert_array_equal(op('Equalize', image[:, :100], 0), image[:, :100])


def test_geometric_ops():
  image = np.random.default_rng(3).integers(0, 256, (9, 9, 1), dtype=np.uint8)
  for name in ('Rotate', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY'):
    np.testing.assert_array_equal(op(name, image, 0), image, err_msg=name)   # Level 0.
  # Magnitude 30: 90 degrees, either direction.
  out = op('Rotate', image, 30)
  assert np.array_equal(out, np.rot90(image, 1)) or np.array_equal(out, np.rot90(image, -1))
  # At 224 px, magnitude 10 translates by exactly 100 px (either direction); grey 128 fills.
  row = (np.arange(224) % 200).astype(np.uint8).reshape(1, 224, 1)
  out = op('TranslateX', row, 10).ravel()
  left = np.concatenate([row.ravel()[100:], np.full(100, 128)])
  right = np.concatenate([np.full(100, 128), row.ravel()[:124]])
  assert np.array_equal(out, left) or np.array_equal(out, right)


def test_cutout_fills_one_grey_square():
  # Magnitude 10 at 224 px: half-side 40 px, so at most 80 x 80 grey pixels (fewer at an edge).
  out = op('Cutout', np.zeros((224, 224, 3), np.uint8), 10)
  rows, cols = np.nonzero(out[..., 0] == 128)
  assert 0 < len(rows) <= 80 * 80
  assert len(rows) == (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)  # A rectangle.
  assert set(np.unique(out)) <= {0, 128}


@pytest.mark.parametrize('channels', [1, 3])
def test_distort_is_deterministic_per_seed(channels):
  image = tf.constant(np.random.default_rng(4).integers(0, 256, (16, 16, channels)), tf.uint8)
  distort = tf.function(lambda seed: randaug.distort(image, seed, 2, 20.0))
  outs = [distort(tf.constant([s, 0], tf.int64)).numpy() for s in range(6)]
  assert all(o.shape == (16, 16, channels) and o.dtype == np.uint8 for o in outs)
  np.testing.assert_array_equal(outs[0], distort(tf.constant([0, 0], tf.int64)).numpy())
  assert len({o.tobytes() for o in outs}) > 1
  np.testing.assert_array_equal(randaug.distort(image, SEED, 0, 20.0), image)


def test_distort_rejects_float_and_unknown_channels():
  with pytest.raises(ValueError, match='uint8'):
    randaug.distort(tf.zeros([4, 4, 3]), SEED, 2, 10.0)
  with pytest.raises(ValueError, match='channel'):
    randaug.distort(tf.zeros([4, 4, 2], tf.uint8), SEED, 2, 10.0)


# At magnitude 20 (level 2) the project's arithmetic makes two ops exact no-ops on any image:
# Posterize keeps int(4 * 2) = 8 bits and Solarize's threshold is int(256 * 2) = 512 > 255. (The
# reference's Solarize wraps the threshold to 0 and inverts every pixel.)
NO_OPS_AT_20 = ('Posterize', 'Solarize')


def full_range_probability(pixels: int) -> float:
  """P(pixels iid uniform 0..255 include both 0 and 255), by inclusion-exclusion:
  1 - P(no 0) - P(no 255) + P(neither) = 1 - 2 (255/256)^n + (254/256)^n."""
  return 1 - 2 * (255 / 256) ** pixels + (254 / 256) ** pixels


def test_every_op_changes_a_random_image_at_magnitude_20_except_the_no_ops():
  rng = np.random.default_rng(5)
  # Pixels in 16..239: no channel spans 0..255, so AutoContrast stretches it.
  image = rng.integers(16, 240, (32, 32, 3), dtype=np.uint8)
  for i, name in enumerate(randaug.OPS):
    out = op(name, image, 20, seed=tf.constant([i, 1], tf.int64))
    assert np.array_equal(out, image) == (name in NO_OPS_AT_20), name
  # A channel holding both 0 and 255 maps through (x - 0) * 255 / 255: AutoContrast is then the
  # identity, in the reference (scale 1, offset 0) as here, under both arithmetics.
  image[0, 0], image[0, 1] = 0, 255
  np.testing.assert_array_equal(op('AutoContrast', image, 20), image)
  np.testing.assert_array_equal(op('AutoContrast', image, 20, arithmetic='reference'), image)


def test_distort_always_applies_the_chosen_op():
  # One layer at magnitude 20 picks each of the 16 ops with probability 1/16 and applies it (the
  # reference draws a probability from U(0.2, 0.8) and discards it; the project's arithmetic,
  # where Posterize and Solarize are no-ops at 20). An image comes out unchanged
  # iff the op was Posterize or Solarize, or AutoContrast on an image whose 3 channels each span
  # 0..255 (probability q = full_range_probability(32 * 32)^3 = 0.8958 for uniform pixels; the
  # other 13 ops change a random image, see the test above). So P(unchanged) = p = (2 + q) / 16
  # = 0.1810, and over N independent images the unchanged fraction has std sqrt(p (1 - p) / N)
  # (binomial); at N = 1000 that is 0.0122, and the bound of 4 std (0.049) fails a correct
  # implementation with probability 6e-5. Applying each op with probability U(0.2, 0.8) instead
  # gives 0.5 + 0.5 p = 0.590, 33 std away.
  n = 1000
  q = full_range_probability(32 * 32) ** 3
  p = (len(NO_OPS_AT_20) + q) / len(randaug.OPS)
  std = np.sqrt(p * (1 - p) / n)
  images = tf.constant(np.random.default_rng(6).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8))
  seeds = tf.stack([tf.range(n, dtype=tf.int64), tf.fill([n], tf.constant(11, tf.int64))], axis=1)
  distort = tf.function(lambda images, seeds: tf.map_fn(
      lambda args: randaug.distort(args[0], args[1], 1, 20.0), (images, seeds),
      fn_output_signature=tf.uint8))
  unchanged = np.all(distort(images, seeds).numpy() == images.numpy(), axis=(1, 2, 3)).mean()
  assert abs(unchanged - p) < 4 * std, (unchanged, p, std)
