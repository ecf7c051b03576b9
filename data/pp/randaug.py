"""RandAugment (Cubuk et al. 2020, arXiv:1909.13719) on uint8 (H, W, C) images, C = 1 or 3.

Each of `num_layers` layers picks one of the 16 ops below uniformly and always applies it: the
variant of the TPU EfficientNet reference that ViT and V-MoE train with ("randaug(2, 20)" in V-MoE's
ImageNet-21k config). The reference's `distort_image_with_randaugment`
(tensorflow/tpu models/official/efficientnet/autoaugment.py) draws a probability from U(0.2, 0.8)
for every op, but `_parse_policy_info` hands it back unused (`func, _, args = ...`) and the selected
op runs unconditionally (`tf.cond(tf.equal(i, op_to_select), ...)`); only AutoAugment's policies
apply their ops with a probability. A magnitude is a level on the reference's 0..10 scale and is
not clipped: magnitude 20 doubles each op's level-10 strength (60 degree rotations, 0.6 shear,
enhancement factors up to 3.7).

Two arithmetics (`ARITHMETICS`, the pp op's `arithmetic` argument). 'reference' is what the
reference's code computes; testing/goldens/randaug.npz holds its outputs (big_vision's runnable
fork of autoaugment.py), which it equals bit for bit on the golden's CPU kind. 'project', the
default (so a recorded pp string keeps its meaning), differs in six ops (docs/fidelity.md D12):
  op            'reference' (the golden's)                  'project'
  Solarize      threshold int(256 * level) cast to uint8,    the threshold as it is: the identity
                so it wraps (256 and 512 become 0: every      from magnitude 10 on
                pixel inverted; big_vision issue #110)
  Posterize     the shift 8 - bits, cast to uint8 and        black at 0 bits (magnitudes 0-2),
                clamped to 7 by TensorFlow: 0 bits or more    the identity above 8
                than 8 keep the top bit
  AutoContrast  x * scale + offset, offset = -lo * scale     (x - lo) * scale
  Contrast      toward uint8(pixel count / 256) (the          toward the mean luma
                histogram's total over 256 bins; 196 at 224 px)
  Color         toward the grey image quantised to uint8      toward the float grey image
                (tf.image.rgb_to_grayscale)
  Sharpness     the smoothed image truncated to uint8         the smoothed image rounded
Under 'project', magnitude 20 makes Posterize (8 bits) and Solarize (threshold 512) no-ops, and
AutoContrast is the identity on an image whose every channel already spans 0..255 (scale 1); every
other op changes a random 32x32 image at magnitude 20. So one layer leaves a random image unchanged
with probability (2 + q) / 16, q the chance that all its channels span 0..255 (randaug_test checks
it). Under 'reference', Solarize inverts every pixel at magnitude 20.

The op list and its order, the level -> argument table (level = magnitude / 10), the grey fill
128 and the pixel constants are data/pp/randaug_spec.py's, which the accelerator's RandAugment reads
too. Geometric ops sample nearest pixels.
"""
import math
from typing import NamedTuple

import tensorflow as tf

from data.pp import randaug_spec

# data/pp/randaug_spec.py's, named here for this module's callers.
MAX_LEVEL = randaug_spec.MAX_LEVEL
ARITHMETICS = randaug_spec.ARITHMETICS


class Draws(NamedTuple):
  """One layer's random draws for its op: the sign of Rotate's, Shear's and Translate's argument
  (float32 -1 or +1) and Cutout's centre (int32 (row, column))."""
  sign: tf.Tensor
  centre: tf.Tensor


def draw(seed: tf.Tensor, height, width) -> Draws:
  """The draws from one op seed: the sign is -1 where uniform(seed) < 0.5; the centre's row and
  column are uniform over the image from the two halves of split(seed)."""
  sign = tf.where(tf.random.stateless_uniform([], seed) < 0.5, -1.0, 1.0)
  y_seed, x_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  centre = tf.stack([tf.random.stateless_uniform([], y_seed, 0, height, tf.int32),
                     tf.random.stateless_uniform([], x_seed, 0, width, tf.int32)])
  return Draws(sign, centre)


def distort(image: tf.Tensor, seed: tf.Tensor, num_layers: int, magnitude: float,
            arithmetic: str = 'project') -> tf.Tensor:
  """Applies `num_layers` random RandAugment ops of strength `magnitude` to a uint8 image, with
  the ops of `arithmetic` (ARITHMETICS)."""
  if image.dtype != tf.uint8:
    raise ValueError(f'randaug works on uint8 images (0..255), got {image.dtype.name}; put it '
                     'before value_range in the pp string.')
  if image.shape.rank != 3 or image.shape[-1] not in (1, 3):
    raise ValueError(f'randaug needs (H, W, 1) or (H, W, 3) images with a known channel count, '
                     f'got shape {image.shape}; decode with decode(channels=1) or (channels=3).')
  ops = op_table(arithmetic)
  if num_layers == 0:
    return image
  level = magnitude / MAX_LEVEL
  height, width = tf.shape(image)[0], tf.shape(image)[1]
  layer_seeds = tf.random.experimental.stateless_split(seed, num_layers)

  def layer(i, image):
    choice_seed, op_seed = tf.unstack(tf.random.experimental.stateless_split(layer_seeds[i], 2))
    choice = tf.random.stateless_uniform([], choice_seed, 0, len(randaug_spec.OPS), tf.int32)
    draws = draw(op_seed, height, width)
    branches = [_branch(ops[name], image, level, draws) for name in randaug_spec.OPS]
    return i + 1, tf.switch_case(choice, branches)   # Always applied, as in the reference.

  # A loop, not a Python for: the 16 branches are traced once, not once per layer.
  _, image = tf.while_loop(lambda i, _: i < num_layers, layer, (tf.constant(0), image))
  return image


def _branch(fn, image, level, draws):
  shape = image.shape
  return lambda: tf.ensure_shape(fn(image, level, draws), shape)


# ---------------------------------------------------------------------------------------------
# Helpers.


def _to_uint8(x: tf.Tensor) -> tf.Tensor:
  """Clips a float image to 0..255 and truncates to uint8 (as the reference's blend does)."""
  return tf.cast(tf.clip_by_value(x, 0.0, 255.0), tf.uint8)


def _blend(degenerate: tf.Tensor, image: tf.Tensor, factor: float) -> tf.Tensor:
  """degenerate + factor * (image - degenerate): 0 gives degenerate, 1 the image, >1 more."""
  degenerate = tf.cast(degenerate, tf.float32)
  return _to_uint8(degenerate + factor * (tf.cast(image, tf.float32) - degenerate))


def _grayscale(image: tf.Tensor) -> tf.Tensor:
  """Float luma, broadcast back to the image's channels (a 1-channel image is its own luma)."""
  image = tf.cast(image, tf.float32)
  if image.shape[-1] == 1:
    return image
  luma = tf.reduce_sum(image * tf.constant(randaug_spec.LUMA), axis=-1, keepdims=True)
  return tf.broadcast_to(luma, tf.shape(image))


def _transform(image: tf.Tensor, transform) -> tf.Tensor:
  """Projective transform [a0 a1 a2 b0 b1 b2 0 0]: output (x, y) samples input
  ((a0 x + a1 y + a2), (b0 x + b1 y + b2)); uncovered pixels get FILL."""
  transform = tf.cast(tf.reshape(tf.stack(transform), [1, 8]), tf.float32)
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=image[None], transforms=transform, output_shape=tf.shape(image)[:2],
      fill_value=float(randaug_spec.FILL), interpolation='NEAREST', fill_mode='CONSTANT')
  return out[0]


def _size(image: tf.Tensor, axis: int) -> tf.Tensor:
  return tf.cast(tf.shape(image)[axis], tf.float32)


# ---------------------------------------------------------------------------------------------
# The 16 ops: (image uint8, level, draws) -> image uint8 of the same shape.


def auto_contrast(image, level, draws):
  """Stretches each channel's min..max to 0..255 (channels with min == max are kept)."""
  del level, draws
  x = tf.cast(image, tf.float32)
  lo = tf.reduce_min(x, axis=[0, 1], keepdims=True)
  hi = tf.reduce_max(x, axis=[0, 1], keepdims=True)
  scale = 255.0 / tf.maximum(hi - lo, 1.0)
  return tf.where(hi > lo, _to_uint8((x - lo) * scale), image)


def _equalize_channel(channel: tf.Tensor) -> tf.Tensor:
  """PIL's ImageOps.equalize on one uint8 channel (H, W)."""
  hist = tf.math.bincount(tf.cast(channel, tf.int32), minlength=256, maxlength=256)
  nonzero = tf.boolean_mask(hist, hist > 0)
  # PIL: step = (pixels - count of the last occupied value) // 255;
  # lut[i] = (step // 2 + cdf[i - 1]) // step.
  step = (tf.reduce_sum(nonzero) - nonzero[-1]) // 255
  safe_step = tf.maximum(step, 1)
  cdf_before = tf.concat([[0], tf.cumsum(hist)[:-1]], axis=0)
  lut = tf.clip_by_value((cdf_before + safe_step // 2) // safe_step, 0, 255)
  equalized = tf.cast(tf.gather(lut, tf.cast(channel, tf.int32)), tf.uint8)
  return tf.where(step > 0, equalized, channel)


def equalize(image, level, draws):
  """Histogram equalisation of each channel."""
  del level, draws
  return tf.stack([_equalize_channel(image[..., c]) for c in range(image.shape[-1])], axis=-1)


def invert(image, level, draws):
  del level, draws
  return 255 - image


def rotate(image, level, draws):
  """Rotation about the centre by 30 * level degrees, random sign."""
  angle = draws.sign * randaug_spec.rotate_degrees(level) * (math.pi / 180.0)
  cos, sin = tf.cos(angle), tf.sin(angle)
  w, h = _size(image, 1) - 1, _size(image, 0) - 1
  # Output (x, y) samples input R(angle) (x - c) + c, c the centre ((w/2, h/2) here in 0-based px).
  x_offset = (w - (cos * w - sin * h)) / 2
  y_offset = (h - (sin * w + cos * h)) / 2
  return _transform(image, [cos, -sin, x_offset, sin, cos, y_offset, 0.0, 0.0])


def posterize(image, level, draws):
  """Keeps the int(4 * level) most significant bits of each pixel."""
  del draws
  shift = 8 - randaug_spec.posterize_bits(level)
  if shift <= 0:
    return image
  if shift >= 8:
    return tf.zeros_like(image)
  return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def _invert_from(image, threshold: int):
  """Inverts the pixels >= threshold (compared as int32: no uint8 wrap here)."""
  return tf.where(tf.cast(image, tf.int32) < threshold, image, 255 - image)


def solarize(image, level, draws):
  """Inverts pixels >= int(256 * level)."""
  del draws
  return _invert_from(image, randaug_spec.solarize_threshold(level))


def solarize_add(image, level, draws):
  """Adds int(110 * level) to pixels below 128 (clipped at 255)."""
  del draws
  added = tf.cast(image, tf.int32) + randaug_spec.solarize_addition(level)
  added = tf.cast(tf.clip_by_value(added, 0, 255), tf.uint8)
  return tf.where(image < 128, added, image)


_factor = randaug_spec.enhancement_factor


def color(image, level, draws):
  """Saturation: blend with the grayscale image."""
  del draws
  return _blend(_grayscale(image), image, _factor(level))


def contrast(image, level, draws):
  """Blend with a flat image at the mean luma."""
  del draws
  mean = tf.reduce_mean(_grayscale(image))
  return _blend(tf.fill(tf.shape(image), mean), image, _factor(level))


def brightness(image, level, draws):
  """Blend with black."""
  del draws
  return _blend(tf.zeros_like(image), image, _factor(level))


def _sharpness(image, level, quantise):
  """Blend with PIL's SMOOTH-filtered image ([[1,1,1],[1,5,1],[1,1,1]] / 13, border kept), its
  float convolution made integers by `quantise`."""
  x = tf.cast(image, tf.float32)[None]
  kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
  kernel = tf.tile(kernel[:, :, None, None], [1, 1, image.shape[-1], 1])
  smooth = quantise(tf.nn.depthwise_conv2d(x, kernel, strides=[1, 1, 1, 1], padding='VALID')[0])
  # The 3x3 filter has no value on the 1-pixel border: keep the original pixels there.
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  padded = tf.pad(smooth, [[1, 1], [1, 1], [0, 0]])
  rows, cols = tf.range(h)[:, None, None], tf.range(w)[None, :, None]
  interior = (rows > 0) & (rows < h - 1) & (cols > 0) & (cols < w - 1)
  degenerate = tf.where(interior, padded, tf.cast(image, tf.float32))
  return _blend(degenerate, image, _factor(level))


def sharpness(image, level, draws):
  """Sharpness with the smoothed image rounded (PIL's filtered image is uint8)."""
  del draws
  return _sharpness(image, level, tf.round)


def shear_x(image, level, draws):
  s = draws.sign * randaug_spec.shear(level)
  return _transform(image, [1.0, s, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def shear_y(image, level, draws):
  s = draws.sign * randaug_spec.shear(level)
  return _transform(image, [1.0, 0.0, 0.0, s, 1.0, 0.0, 0.0, 0.0])


def translate_x(image, level, draws):
  dx = draws.sign * randaug_spec.translate_fraction(level) * _size(image, 1)
  return _transform(image, [1.0, 0.0, dx, 0.0, 1.0, 0.0, 0.0, 0.0])


def translate_y(image, level, draws):
  dy = draws.sign * randaug_spec.translate_fraction(level) * _size(image, 0)
  return _transform(image, [1.0, 0.0, 0.0, 0.0, 1.0, dy, 0.0, 0.0])


def cutout(image, level, draws):
  """Fills a square of half-side 40 px * level (at 224 px) around the drawn centre with grey."""
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  half = tf.cast(randaug_spec.cutout_fraction(level) * tf.cast(tf.minimum(h, w), tf.float32),
                 tf.int32)
  cy, cx = draws.centre[0], draws.centre[1]
  rows, cols = tf.range(h)[:, None, None], tf.range(w)[None, :, None]
  inside = (rows >= cy - half) & (rows < cy + half) & (cols >= cx - half) & (cols < cx + half)
  return tf.where(inside, tf.constant(randaug_spec.FILL, tf.uint8), image)


# Each op's TensorFlow executor, in data/pp/randaug_spec.py's order (the index a layer draws).
OPS = randaug_spec.in_order({
    'AutoContrast': auto_contrast,
    'Equalize': equalize,
    'Invert': invert,
    'Rotate': rotate,
    'Posterize': posterize,
    'Solarize': solarize,
    'Color': color,
    'Contrast': contrast,
    'Brightness': brightness,
    'Sharpness': sharpness,
    'ShearX': shear_x,
    'ShearY': shear_y,
    'TranslateX': translate_x,
    'TranslateY': translate_y,
    'Cutout': cutout,
    'SolarizeAdd': solarize_add,
})

# ---------------------------------------------------------------------------------------------
# The reference's arithmetic, where it differs from the project's (the module docstring's table).


def auto_contrast_reference(image, level, draws):
  """AutoContrast in the reference's form x * scale + offset, offset = -lo * scale (rounded
  twice; (x - lo) * scale can differ by one level)."""
  del level, draws
  x = tf.cast(image, tf.float32)
  lo = tf.reduce_min(x, axis=[0, 1], keepdims=True)
  hi = tf.reduce_max(x, axis=[0, 1], keepdims=True)
  scale = 255.0 / tf.maximum(hi - lo, 1.0)   # hi - lo >= 1 wherever it is used.
  offset = -lo * scale
  return tf.where(hi > lo, _to_uint8(x * scale + offset), image)


def posterize_reference(image, level, draws):
  """Posterize with the reference's clamped shift."""
  del draws
  shift = randaug_spec.reference_posterize_shift(level)
  return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def solarize_reference(image, level, draws):
  """Inverts pixels >= the wrapped threshold (all of them at magnitudes 10 and 20)."""
  del draws
  return _invert_from(image, randaug_spec.reference_solarize_threshold(level))


def color_reference(image, level, draws):
  """Blend with tf.image.rgb_to_grayscale's uint8 grey image, as the reference does (a
  1-channel image is its own grey: unchanged)."""
  del draws
  if image.shape[-1] == 1:
    return image
  grey = tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image))
  return _blend(grey, image, _factor(level))


def reference_contrast_level(height, width) -> tf.Tensor:
  """The grey level the reference's Contrast blends toward: the sum of a 256-bin histogram of
  the grey image (its pixel count) over 256, clipped to 255 and truncated to uint8 (196 at
  224 x 224), whatever the image holds."""
  count = tf.cast(height * width, tf.float32)
  return tf.cast(tf.clip_by_value(count / 256.0, 0.0, 255.0), tf.uint8)


def contrast_reference(image, level, draws):
  """Blend with a flat image at reference_contrast_level."""
  del draws
  level_value = reference_contrast_level(tf.shape(image)[0], tf.shape(image)[1])
  return _blend(tf.fill(tf.shape(image), level_value), image, _factor(level))


def sharpness_reference(image, level, draws):
  """Sharpness with the smoothed image clipped and truncated to uint8, as the reference does."""
  del draws
  return _sharpness(image, level, lambda x: tf.floor(tf.clip_by_value(x, 0.0, 255.0)))


REFERENCE_OPS = {**OPS, 'AutoContrast': auto_contrast_reference,
                 'Posterize': posterize_reference, 'Solarize': solarize_reference,
                 'Color': color_reference, 'Contrast': contrast_reference,
                 'Sharpness': sharpness_reference}


def op_table(arithmetic: str) -> dict:
  """The 16 ops, in the reference's order, of one of ARITHMETICS."""
  randaug_spec.check_arithmetic(arithmetic)
  return dict(zip(ARITHMETICS, (OPS, REFERENCE_OPS)))[arithmetic]
