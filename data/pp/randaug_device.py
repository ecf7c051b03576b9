"""RandAugment in jax.numpy, batched, to run inside the jitted training program on the accelerator.

The same augmentation as the host's TensorFlow RandAugment (data/pp/randaug.py, whose docstring
states the recipe): data/pp/randaug_spec.py's 16 ops in its order (NAMES; an op index means the same
op on both sides), level -> argument table, grey FILL = 128 for uncovered pixels, pixel constants
scaled with the image size and LUMA weights, which both sides read; a uniform op choice per layer
that is always applied, and nearest sampling for the geometric ops. Images are uint8
(B, H, W, C), C = 1 or 3; a 1-channel image is its own grayscale (Color leaves it unchanged, as on
the host).

Design. vmapping a 16-way lax.switch runs every branch on every image, so a layer is three batched
computations instead, each of them an identity for the images whose op it does not cover:
  1. per-channel lookup tables (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd):
     one 256-entry table per image and channel, the identity for other ops, applied by a gather;
  2. blends with a degenerate image (Color, Contrast, Brightness, Sharpness): the four degenerate
     images are cheap, so each is computed for the batch and selected per image with jnp.where;
     images whose op is not a blend keep their pixels;
  3. one 3x3 projective matrix per image (Rotate, ShearX/Y, TranslateX/Y; the identity for other
     ops) applied with nearest sampling, together with the Cutout mask (empty for other ops).
Each image gets exactly its chosen op, whatever the order of the three: the others leave it as it
is, bit for bit. A table or degenerate image that no image of the batch drew is not computed (one
lax.cond a computation over the whole batch, `_if_drawn`): at small per-device batches most ops
go undrawn in a layer. A layer's cost does not depend on the ops drawn: two gathers per pixel (the
tables, the warp), Equalize's histograms as one scatter-add over the batch, a 3x3 smoothing, and
elementwise selects. `distort` scans over the layers, so one layer is compiled whatever their
number. The gathers, the histogram's indices and the smoothing work on channel-major planes
(`_channel_major`): in (B, H, W, C), a TPU would pad C = 3 to its 128 lanes.

Not dm-pix: its brightness is additive (the reference blends with black, a multiplicative factor),
its contrast uses per-channel means (the reference uses the mean luma), and it has no Equalize,
Posterize, AutoContrast or Cutout.

Randomness. `distort` takes one raw threefry2x32 key per image, keys (B, 2) uint32 as
jax.random.PRNGKey makes them (whatever jax_default_prng_impl says, they are read as threefry2x32
key data). Each key is split into num_layers layer keys, and each layer key into a choice key (the
op index, uniform over 0..15) and an op key: the sign of Rotate/Shear/Translate comes from
uniform(op key) < 0.5 (negative), Cutout's centre from the two halves of split(op key) (row, then
column, uniform over the image). This mirrors the structure of the host's stateless seeds but not
its stream: the two sides draw different numbers. Given the same op and draws (`Draws`), each op
reproduces the host's: `apply_op` applies one op to a batch, `apply_layer` a layer with an op per
image.

Agreement with the host, op by op (data/pp/randaug_device_test.py checks it on 224 px images at
magnitudes 3, 10 and 20): the lookup tables and Cutout are exact. The geometric ops compute the
host's float32 source coordinates in its order and round them half away from zero, as its kernel's
std::round does: exact under the tests' flags. XLA may fuse a multiply and an add into one rounding
where TensorFlow rounds twice, and its sin and cos may differ in the last bit, which moves the
pixels whose source coordinate lies within rounding of a half: a shear of 0.3 puts whole columns
on halves, and under XLA:CPU's default flags up to 0.6% of the pixels then sample a neighbour. The
blends compute the host's float32 degenerate + factor * (image - degenerate) and truncate it. The
luma is the host's to the bit (its per-channel products are looked up, so that no compiler fuses
them into the sum, in any program), Contrast's mean luma comes from exact integer channel sums
(the host sums floats), and the blend's fused multiply-add can move a value within an ulp of an
integer by one level (Sharpness at magnitude 20: 0.24% of a photo's pixels).

Both of data/pp/randaug_spec.py's ARITHMETICS (`arithmetic` of apply_op, apply_layer and
distort). Under 'reference' the wrapped Solarize threshold, the clamped Posterize shift,
Contrast's flat uint8(pixel count / 256) and Color's uint8 grey (tf.image.rgb_to_grayscale's
terms looked up and summed in its order) are exact; AutoContrast's x * scale + offset is within a
level (XLA fuses the multiply-add the host rounds twice: 12.8% of the low-contrast photo's pixels
under XLA:CPU, where the scale 5/3 puts every third value on an integer); Sharpness's smoothed
image is the exact quotient's floor, where the host's float convolution can fall just below a
multiple of 13 and truncate one lower, so its blend is within floor(|1 - factor|) + 1 levels (3 at
magnitude 20, on 0.5% of a photo's pixels).
"""
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from data.pp import randaug_spec

NAMES = randaug_spec.OPS   # The index a layer draws.
INDEX = {name: i for i, name in enumerate(NAMES)}


class Draws(NamedTuple):
  """The random draws of one layer for a batch, leading dimension B (`draw` adds a layer axis)."""
  op: jax.Array       # int32, an index into NAMES.
  sign: jax.Array     # float32, -1 or +1: the sign of Rotate's, Shear's and Translate's argument.
  centre: jax.Array   # int32 (..., 2): Cutout's centre, (row, column).


# ---------------------------------------------------------------------------------------------
# Helpers.


def _to_uint8(x: jax.Array) -> jax.Array:
  """Clips a float image to 0..255 and truncates to uint8 (as the host's blend does)."""
  return jnp.clip(x, 0.0, 255.0).astype(jnp.uint8)


def _factor(level: float) -> np.float32:
  """The enhancement factor of Color, Contrast, Brightness and Sharpness."""
  return np.float32(randaug_spec.enhancement_factor(level))


def _grayscale(x: jax.Array) -> jax.Array:
  """Float luma (..., 1) of float channel values (..., C), here Contrast's channel sums."""
  if x.shape[-1] == 1:
    return x
  red, green, blue = randaug_spec.LUMA
  return x[..., 0:1] * red + x[..., 1:2] * green + x[..., 2:3] * blue


# value * LUMA[c] in float32 for every uint8 value: the products the host rounds one by one.
_LUMA_PRODUCTS = np.float32(randaug_spec.LUMA)[:, None] * np.arange(256, dtype=np.float32)


def _pixel_grayscale(images: jax.Array) -> jax.Array:
  """The host's float32 luma (B, H, W, 1) of uint8 images: each channel's product rounded, then
  summed in channel order. Looked up, not multiplied, so that no compiler can fuse a product into
  the sum (a fused multiply-add rounds once) and every program computes the same bits."""
  if images.shape[-1] == 1:
    return images.astype(jnp.float32)
  # Indices (B, H, W), not (B, H, W, 1): a TPU lays the last dimension along its 128 lanes.
  red, green, blue = (jnp.take(_LUMA_PRODUCTS[c], images[..., c].astype(jnp.int32))
                      for c in range(3))
  return ((red + green) + blue)[..., None]


def _channel_major(images: jax.Array) -> jax.Array:
  """(B, H, W, C) -> (B, C, H * W): the layout of the gathers' and the histogram's indices. A TPU
  lays an array's last dimension along its 128 lanes, so indices (B, H, W, C) with C = 3 would
  take 128 / 3 times their size in temporaries; H * W fills the lanes."""
  b, h, w, c = images.shape
  return jnp.transpose(images, (0, 3, 1, 2)).reshape(b, c, h * w)


def _channel_last(planes: jax.Array, shape: tuple) -> jax.Array:
  """_channel_major's inverse: (B, C, H * W) -> `shape` (B, H, W, C)."""
  b, h, w, c = shape
  return jnp.transpose(planes.reshape(b, c, h, w), (0, 2, 3, 1))


def _batch_shape(op: jax.Array, ndim: int) -> jax.Array:
  """op (B,) reshaped to (B, 1, ..., 1) with `ndim` dimensions, to broadcast per image."""
  return op.reshape(op.shape + (1,) * (ndim - 1))


def _select(op: jax.Array, table: dict, default, ndim: int) -> jax.Array:
  """Per image b, table[NAMES[op[b]]], or `default` when its op has no entry; the entries and the
  default broadcast to a common shape of `ndim` dimensions, the first the batch's."""
  out = default
  for name, value in table.items():
    out = jnp.where(_batch_shape(op == INDEX[name], ndim), value, out)
  return out


def _covers(op: jax.Array, table: dict) -> jax.Array:
  """(B,) bool: whether each image's op has an entry in `table`."""
  return jnp.isin(op, jnp.array([INDEX[name] for name in table]))


# ---------------------------------------------------------------------------------------------
# 1. Per-channel lookup tables: (images (B, H, W, C) uint8, level) -> uint8 tables that broadcast
# to (B, C, 256).

_VALUES = np.arange(256)
_IDENTITY = _VALUES.astype(np.uint8)


def _auto_contrast_lut(images, level):
  """Stretches each channel's min..max to 0..255 (channels with min == max are kept)."""
  del level
  lo = jnp.min(images, axis=(1, 2)).astype(jnp.float32)[..., None]
  hi = jnp.max(images, axis=(1, 2)).astype(jnp.float32)[..., None]
  scale = 255.0 / jnp.maximum(hi - lo, 1.0)
  return jnp.where(hi > lo, _to_uint8((_VALUES.astype(np.float32) - lo) * scale), _IDENTITY)


def _histogram(images: jax.Array) -> jax.Array:
  """(B, H, W, C) uint8 -> (B, C, 256) int32: how many pixels of each channel hold each value."""
  b, _, _, c = images.shape
  # One scatter-add over the batch with flat channel-major indices: channel-last (B, H, W, C)
  # indices would be padded along a TPU's lanes, and XLA:TPU compiles that scatter slowly.
  bins = jnp.arange(b * c).reshape(b, c, 1) * 256 + _channel_major(images).astype(jnp.int32)
  return jnp.zeros(b * c * 256, jnp.int32).at[bins.ravel()].add(1).reshape(b, c, 256)


def _equalize_lut(images, level):
  """PIL's ImageOps.equalize per channel: step = (pixels - count of the largest value) // 255,
  lut[i] = (step // 2 + cdf[i - 1]) // step; the identity where step is 0."""
  del level
  hist = _histogram(images)
  last = 255 - jnp.argmax(hist[..., ::-1] > 0, axis=-1, keepdims=True)   # Largest value present.
  step = (images.shape[1] * images.shape[2] - jnp.take_along_axis(hist, last, -1)) // 255
  safe_step = jnp.maximum(step, 1)
  cdf_before = jnp.cumsum(hist, axis=-1) - hist
  lut = jnp.clip((cdf_before + safe_step // 2) // safe_step, 0, 255).astype(jnp.uint8)
  return jnp.where(step > 0, lut, _IDENTITY)


def _invert_lut(images, level):
  del images, level
  return (255 - _VALUES).astype(np.uint8)


def _posterize_lut(images, level):
  """Keeps the int(4 * level) most significant bits (all 8 from level 2 on, none below 0.25)."""
  del images
  kept = min(max(randaug_spec.posterize_bits(level), 0), 8)
  return (_VALUES & (0xFF << (8 - kept)) & 0xFF).astype(np.uint8)


def _solarize_lut(images, level):
  """Inverts values >= int(256 * level)."""
  del images
  threshold = randaug_spec.solarize_threshold(level)
  return np.where(_VALUES < threshold, _VALUES, 255 - _VALUES).astype(np.uint8)


def _solarize_add_lut(images, level):
  """Adds int(110 * level) to values below 128 (clipped at 255)."""
  del images
  added = np.clip(_VALUES + randaug_spec.solarize_addition(level), 0, 255)
  return np.where(_VALUES < 128, added, _VALUES).astype(np.uint8)


LUTS = {'AutoContrast': _auto_contrast_lut, 'Equalize': _equalize_lut, 'Invert': _invert_lut,
        'Posterize': _posterize_lut, 'Solarize': _solarize_lut, 'SolarizeAdd': _solarize_add_lut}


def _auto_contrast_reference_lut(images, level):
  """The reference's form x * scale + offset, offset = -lo * scale. XLA fuses the multiply and
  the add into one rounding where the host rounds twice (an optimization barrier between them
  does not survive XLA:CPU), so a value whose exact result lies within the product's rounding
  of an integer truncates one level apart: within a level of the host."""
  del level
  lo = jnp.min(images, axis=(1, 2)).astype(jnp.float32)[..., None]
  hi = jnp.max(images, axis=(1, 2)).astype(jnp.float32)[..., None]
  scale = 255.0 / jnp.maximum(hi - lo, 1.0)
  offset = -lo * scale
  return jnp.where(hi > lo, _to_uint8(_VALUES.astype(np.float32) * scale + offset), _IDENTITY)


def _posterize_reference_lut(images, level):
  """The reference's shift 8 - int(4 * level), cast to uint8 and clamped to 7 by TensorFlow:
  0 bits or more than 8 keep the top bit."""
  del images
  shift = randaug_spec.reference_posterize_shift(level)
  return ((_VALUES >> shift) << shift).astype(np.uint8)


def _solarize_reference_lut(images, level):
  """Inverts values >= int(256 * level) cast to uint8 (wrapped: 256 and 512 become 0)."""
  del images
  threshold = randaug_spec.reference_solarize_threshold(level)
  return np.where(_VALUES < threshold, _VALUES, 255 - _VALUES).astype(np.uint8)


REFERENCE_LUTS = {**LUTS, 'AutoContrast': _auto_contrast_reference_lut,
                  'Posterize': _posterize_reference_lut, 'Solarize': _solarize_reference_lut}


def _apply_lut(images: jax.Array, lut) -> jax.Array:
  """out[b, y, x, c] = lut[b, c, images[b, y, x, c]], lut broadcasting to (B, C, 256)."""
  b, _, _, c = images.shape
  lut = jnp.broadcast_to(lut, (b, c, 256))
  planes = jnp.take_along_axis(lut, _channel_major(images).astype(jnp.int32), axis=-1)
  return _channel_last(planes, images.shape)


# ---------------------------------------------------------------------------------------------
# 2. Blends: images (B, H, W, C) uint8 -> float32 degenerate images that broadcast to them.


def _color_degenerate(images):
  """Saturation: the grayscale image."""
  return _pixel_grayscale(images)


def _contrast_degenerate(images):
  """A flat image at the mean luma (B, 1, 1, 1), from exact integer channel sums."""
  sums = jnp.sum(images.astype(jnp.int32), axis=(1, 2), keepdims=True).astype(jnp.float32)
  return _grayscale(sums) / np.float32(images.shape[1] * images.shape[2])


def _brightness_degenerate(images):
  """Black."""
  del images
  return jnp.zeros((1, 1, 1, 1), jnp.float32)


def _sharpness_degenerate(images, truncate=False):
  """PIL's SMOOTH filter ([[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13, rounded to integers, or
  truncated as the reference does) inside a 1-pixel border that keeps the image's pixels. The
  integer sum's quotient is never within 1/26 of a half, so the host's float convolution rounds
  to the same integers. Truncated, it is the exact quotient's floor: where the sum is a multiple
  of 13 the host's float convolution (a chain of fused multiply-adds) can fall just below it and
  truncate one lower."""
  b, h, w, c = images.shape
  # Each channel as an image (B * C, H, W, 1): shifted windows of (B, H, W, C) would lie along a
  # TPU's 128 lanes with C = 3 (_channel_major).
  x = _channel_major(images).reshape(b * c, h, w, 1).astype(jnp.int32)
  padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  total = 4 * x + sum(padded[:, i:i + h, j:j + w] for i in range(3) for j in range(3))
  smooth = ((total // 13).astype(jnp.float32) if truncate
            else jnp.round(total.astype(jnp.float32) / 13.0))
  rows, cols = np.arange(h)[:, None, None], np.arange(w)[None, :, None]
  interior = (rows > 0) & (rows < h - 1) & (cols > 0) & (cols < w - 1)
  planes = jnp.where(interior, smooth, x.astype(jnp.float32)).reshape(b, c, h * w)
  return _channel_last(planes, images.shape)


DEGENERATES = {'Color': _color_degenerate, 'Contrast': _contrast_degenerate,
               'Brightness': _brightness_degenerate, 'Sharpness': _sharpness_degenerate}

# (v * float32(1 / 255)) * LUMA[c] in float32 for every uint8 value: tf.image.rgb_to_grayscale's
# terms, each rounded, which it sums in channel order (checked over all 2^24 colours on the host).
_GREY_TERMS = (np.arange(256, dtype=np.float32) * np.float32(1 / 255))[None] * np.float32(
    randaug_spec.LUMA)[:, None]


def _color_reference_degenerate(images):
  """tf.image.rgb_to_grayscale's uint8 grey: the terms summed, times 255.5, truncated (a
  1-channel image is its own grey). Looked up, so no compiler fuses a product into the sum."""
  if images.shape[-1] == 1:
    return images.astype(jnp.float32)
  red, green, blue = (jnp.take(_GREY_TERMS[c], images[..., c:c + 1].astype(jnp.int32))
                      for c in range(3))
  return (((red + green) + blue) * np.float32(255.5)).astype(jnp.uint8).astype(jnp.float32)


def _contrast_reference_degenerate(images):
  """The reference's flat grey: uint8(pixel count / 256), clipped at 255, whatever the image."""
  count = images.shape[1] * images.shape[2]
  return jnp.full((1, 1, 1, 1), np.float32(np.uint8(min(count / 256, 255))))


REFERENCE_DEGENERATES = {**DEGENERATES, 'Color': _color_reference_degenerate,
                         'Contrast': _contrast_reference_degenerate,
                         'Sharpness': lambda images: _sharpness_degenerate(images, truncate=True)}
# The pp op's `arithmetic` (data/pp/randaug_spec.py's ARITHMETICS) -> its lookup tables and blends.
ARITHMETICS = dict(zip(randaug_spec.ARITHMETICS, ((LUTS, DEGENERATES),
                                                  (REFERENCE_LUTS, REFERENCE_DEGENERATES))))


def tables(arithmetic: str) -> tuple:
  """The lookup tables and degenerate images of one of ARITHMETICS."""
  randaug_spec.check_arithmetic(arithmetic)
  return ARITHMETICS[arithmetic]


def _blend(degenerate: jax.Array, images: jax.Array, factor: np.float32) -> jax.Array:
  """degenerate + factor * (image - degenerate), truncated: 0 gives degenerate, 1 the image."""
  return _to_uint8(degenerate + factor * (images.astype(jnp.float32) - degenerate))


# ---------------------------------------------------------------------------------------------
# 3. Geometric ops: (level, sign (B,) float32, height, width) -> (B, 3, 3) float32 matrices that
# map an output pixel (x, y, 1) to the input pixel it samples, as the host's transforms.


def _affine(*entries) -> jax.Array:
  """(B, 3, 3) matrices [[a0 a1 a2] [b0 b1 b2] [0 0 1]] from six entries, each (B,) or scalar."""
  entries = jnp.broadcast_arrays(*[jnp.asarray(e, jnp.float32) for e in entries])
  zero = jnp.zeros_like(entries[0])
  return jnp.stack(list(entries) + [zero, zero, zero + 1], axis=-1).reshape(-1, 3, 3)


def _rotate_matrix(level, sign, height, width):
  """Rotation about the centre by 30 * level degrees."""
  angle = sign * np.float32(randaug_spec.rotate_degrees(level)) * np.float32(math.pi / 180.0)
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  w, h = np.float32(width - 1), np.float32(height - 1)
  x_offset = (w - (cos * w - sin * h)) / 2
  y_offset = (h - (sin * w + cos * h)) / 2
  return _affine(cos, -sin, x_offset, sin, cos, y_offset)


def _shear_x_matrix(level, sign, height, width):
  del height, width
  return _affine(1.0, sign * np.float32(randaug_spec.shear(level)), 0.0, 0.0, 1.0, 0.0)


def _shear_y_matrix(level, sign, height, width):
  del height, width
  return _affine(1.0, 0.0, 0.0, sign * np.float32(randaug_spec.shear(level)), 1.0, 0.0)


def _translate_px(level, sign, size):
  """The translation in px of an image side of `size`, signed."""
  return sign * np.float32(randaug_spec.translate_fraction(level)) * np.float32(size)


def _translate_x_matrix(level, sign, height, width):
  del height
  return _affine(1.0, 0.0, _translate_px(level, sign, width), 0.0, 1.0, 0.0)


def _translate_y_matrix(level, sign, height, width):
  del width
  return _affine(1.0, 0.0, 0.0, 0.0, 1.0, _translate_px(level, sign, height))


MATRICES = {'Rotate': _rotate_matrix, 'ShearX': _shear_x_matrix, 'ShearY': _shear_y_matrix,
            'TranslateX': _translate_x_matrix, 'TranslateY': _translate_y_matrix}


def _cutout_mask(centre: jax.Array, level: float, height: int, width: int) -> jax.Array:
  """(B, H, W) bool: the square of randaug_spec.cutout_fraction's half-side (of the smaller side,
  truncated as the host's float32 arithmetic does) around each centre (B, 2)."""
  fraction = np.float32(randaug_spec.cutout_fraction(level))
  half = int(fraction * np.float32(min(height, width)))
  rows, cols = jnp.arange(height)[None, :, None], jnp.arange(width)[None, None, :]
  cy, cx = centre[:, 0, None, None], centre[:, 1, None, None]
  return (rows >= cy - half) & (rows < cy + half) & (cols >= cx - half) & (cols < cx + half)


def _round_half_away(v: jax.Array) -> jax.Array:
  """std::round, as the host's nearest sampling: halves round away from zero."""
  whole = jnp.trunc(v)
  return jnp.where(jnp.abs(v - whole) >= 0.5, whole + jnp.sign(v), whole)


def _matrix_row(row: jax.Array, x, y) -> jax.Array:
  """row[0] x + row[1] y + row[2], in the host kernel's float32 order."""
  return row[:, 0] * x + row[:, 1] * y + row[:, 2]


def _warp(images: jax.Array, matrices: jax.Array, hidden=None) -> jax.Array:
  """Output pixel (x, y) of image b takes the input pixel nearest to matrices[b] (x, y, 1)
  (projective), or FILL where that lies outside the image or `hidden` (B, H, W) is set."""
  b, h, w, c = images.shape
  y, x = np.mgrid[:h, :w].astype(np.float32)
  m = matrices[:, :, :, None, None]
  projection = _matrix_row(m[:, 2], x, y)
  col = _round_half_away(_matrix_row(m[:, 0], x, y) / projection)
  row = _round_half_away(_matrix_row(m[:, 1], x, y) / projection)
  inside = (projection != 0) & (col >= 0) & (col < w) & (row >= 0) & (row < h)
  if hidden is not None:
    inside &= ~hidden
  row = jnp.where(inside, row, 0).astype(jnp.int32)
  col = jnp.where(inside, col, 0).astype(jnp.int32)
  source = jnp.broadcast_to((row * w + col).reshape(b, 1, h * w), (b, c, h * w))
  sampled = _channel_last(jnp.take_along_axis(_channel_major(images), source, axis=-1),
                          images.shape)
  return jnp.where(inside[..., None], sampled, jnp.uint8(randaug_spec.FILL))


# ---------------------------------------------------------------------------------------------
# Ops, layers and the augmentation.


def _check(images: jax.Array):
  if images.dtype != jnp.uint8:
    raise ValueError(f'randaug_device works on uint8 images (0..255), got {images.dtype}.')
  if images.ndim != 4 or images.shape[-1] not in (1, 3):
    raise ValueError(f'randaug_device needs a batch of images (B, H, W, 1) or (B, H, W, 3), got '
                     f'shape {images.shape}.')


def apply_op(images: jax.Array, op, level: float, sign=None, centre=None,
             arithmetic: str = 'project') -> jax.Array:
  """Applies one op (an index into NAMES, or its name) at `level` (magnitude / 10) to every
  image of a uint8 batch (B, H, W, C), with the ops of `arithmetic` (a key of ARITHMETICS). sign
  (B,) float32 of -1 or +1 is Rotate's, ShearX/Y's and TranslateX/Y's; centre (B, 2) int32 (row,
  column) is Cutout's; other ops ignore them."""
  _check(images)
  luts, degenerates = tables(arithmetic)
  name = op if isinstance(op, str) else NAMES[op]
  _, h, w, _ = images.shape
  if name in luts:
    return _apply_lut(images, luts[name](images, level))
  if name in degenerates:
    return _blend(degenerates[name](images), images, _factor(level))
  if name in MATRICES:
    return _warp(images, MATRICES[name](level, jnp.asarray(sign, jnp.float32), h, w))
  if name == 'Cutout':
    hidden = _cutout_mask(centre, level, h, w)[..., None]
    return jnp.where(hidden, jnp.uint8(randaug_spec.FILL), images)
  raise ValueError(f'Unknown RandAugment op {op!r}; the ops are {NAMES}.')


def _if_drawn(op: jax.Array, name: str, compute):
  """compute() where some image of the batch drew op `name`, else zeros of its shape: a table
  or degenerate image that no image selects is not computed (one lax.cond a computation over the
  whole batch, not a switch per image)."""
  shape = jax.eval_shape(compute)
  return jax.lax.cond(jnp.any(op == INDEX[name]), compute,
                      lambda: jnp.zeros(shape.shape, shape.dtype))


def apply_layer(images: jax.Array, draws: Draws, level: float,
                arithmetic: str = 'project') -> jax.Array:
  """One RandAugment layer: image b gets op draws.op[b] with its draws, as `apply_op` would give,
  computed as three batched computations (lookup tables, blends, one warp with the Cutout mask)."""
  _check(images)
  luts, degenerates = tables(arithmetic)
  _, h, w, _ = images.shape
  op = draws.op
  luts = {name: _if_drawn(op, name, lambda fn=fn: fn(images, level)) for name, fn in luts.items()}
  images = _apply_lut(images, _select(op, luts, _IDENTITY, ndim=3))
  degenerates = {name: _if_drawn(op, name, lambda fn=fn, x=images: fn(x))
                 for name, fn in degenerates.items()}
  blended = _blend(_select(op, degenerates, 0.0, ndim=4), images, _factor(level))
  images = jnp.where(_batch_shape(_covers(op, DEGENERATES), 4), blended, images)
  matrices = {name: fn(level, draws.sign, h, w) for name, fn in MATRICES.items()}
  matrix = _select(op, matrices, np.eye(3, dtype=np.float32), ndim=3)
  hidden = _batch_shape(op == INDEX['Cutout'], 3) & _cutout_mask(draws.centre, level, h, w)
  return _warp(images, matrix, hidden)


def draw(keys: jax.Array, num_layers: int, height: int, width: int) -> Draws:
  """Each image's draws for `num_layers` layers, (B, num_layers) leading dimensions, from raw
  threefry2x32 keys (B, 2) uint32 (the module docstring gives the derivation)."""
  keys = jnp.asarray(keys)
  if keys.ndim != 2 or keys.shape[1] != 2 or keys.dtype != jnp.uint32:
    raise ValueError(f'randaug_device takes one raw threefry2x32 key per image, (B, 2) uint32 as '
                     f'jax.random.PRNGKey makes them, got {keys.dtype} {keys.shape}.')

  def layer(key):
    choice_key, op_key = jax.random.split(key)
    y_key, x_key = jax.random.split(op_key)
    return Draws(
        op=jax.random.randint(choice_key, (), 0, len(NAMES), jnp.int32),
        sign=jnp.where(jax.random.uniform(op_key) < 0.5, -1.0, 1.0).astype(jnp.float32),
        centre=jnp.stack([jax.random.randint(y_key, (), 0, height, jnp.int32),
                          jax.random.randint(x_key, (), 0, width, jnp.int32)]))

  def example(key):
    return jax.vmap(layer)(jax.random.split(key, num_layers))

  return jax.vmap(example)(jax.random.wrap_key_data(keys, impl='threefry2x32'))


def distort(images: jax.Array, keys: jax.Array, num_layers: int, magnitude: float,
            arithmetic: str = 'project') -> jax.Array:
  """Applies `num_layers` random RandAugment ops of strength `magnitude` to each image of a uint8
  batch (B, H, W, C), C = 1 or 3, image b drawing from keys[b] (raw threefry2x32 keys, (B, 2)
  uint32), with the ops of `arithmetic` (a key of ARITHMETICS). Jittable with num_layers,
  magnitude and arithmetic static."""
  _check(images)
  tables(arithmetic)
  b, h, w, _ = images.shape
  if jnp.shape(keys)[:1] != (b,):
    raise ValueError(f'randaug_device takes one key per image: {b} images, keys {jnp.shape(keys)}.')
  if num_layers == 0:
    return images
  level = magnitude / randaug_spec.MAX_LEVEL
  per_layer = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), draw(keys, num_layers, h, w))
  # A scan, not a Python loop: the layer is traced and compiled once whatever num_layers.
  images, _ = jax.lax.scan(lambda x, d: (apply_layer(x, d, level, arithmetic), None), images,
                           per_layer)
  return images
