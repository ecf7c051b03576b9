"""Preprocessing: a '|'-joined string of registered ops acting on example dicts (BV pp style).

  decode|inception_crop(224)|flip_lr|randaug(2, 20)|value_range(-1, 1)|onehot(21843)|
  keep("image", "labels")   (one line in a config)

Each op is `name` or `name(args)` with Python literal arguments; `build(pp)` turns the string into
steps and `apply(steps, example, seed)` runs them. Unknown ops fail listing the valid ones. Each
op's arguments, defaults and randomness are data/pp/op_specs.py's, which the accelerator's ops read
too.

Images. Sources hand over encoded bytes under 'image'; `decode(channels)` turns them into uint8
(H, W, channels). Every image op after it keeps uint8 (resizing rounds and clips), so RandAugment
sees the 0..255 pixels it is defined on; `value_range` is the step to float32.
Channels: the channel count is whatever `decode(channels=...)` asked for, and every op works for 1
(grayscale: Fashion-MNIST, digits) or 3 (RGB). decode(channels=1) converts colour images to
grayscale, decode(channels=3) replicates a grayscale image; the colour ops of RandAugment (Color,
Contrast) use the image itself as its grayscale when it has one channel.

Randomness. Random ops (inception_crop, flip_lr, randaug) take a stateless seed: `apply` gives the
i-th op of the string `fold_in(example_seed, i)`, and the pipeline derives the example seed from the
run seed and the example's position in the stream, so a preprocessed example depends only on
(seed, position), whatever the parallelism, and a resumed run reproduces it.

Decoding only the crop. `decode|inception_crop(...)` runs as one op, V-MoE's
decode_jpeg_and_inception_crop: a JPEG's crop window is drawn from the shape in its header and only
that window is decoded (tf.io.decode_and_crop_jpeg); other formats are decoded whole, then cropped.
The window is the one inception_crop would draw on the decoded image, from its own seed, so the pp
string, the steps and every op's seed stay as they are: `build` keeps one step per op and marks the
decode as fused with the crop after it, and `apply` runs the pair as one. A head of the steps run
apart (the pipeline's data.cache keeps the examples after `decode`) runs the plain ops.

Labels. onehot(n) maps the int 'label' to a float32 one-hot 'labels'; multi_hot(n) maps the int
list 'labels' (multilabel_records) to a float32 multi-hot 'labels'. Out-of-range ids fail.
"""
import dataclasses
from typing import Callable, NamedTuple

import tensorflow as tf

from data.pp import op_specs
from data.pp import syntax as pp_syntax
from data.pp import randaug as randaug_lib


class Step(NamedTuple):
  """One parsed op: its text, name and function, whether it is random, its place in the string.

  fused: for a decode followed by inception_crop, fn(example, the crop's seed) running both as one
  (_decode_and_inception_crop); `apply` uses it when the crop step comes next in its list.
  """
  spec: str
  name: str
  fn: Callable
  random: bool
  index: int
  fused: Callable | None = None


def build(pp: str) -> list[Step]:
  """Parses a pp string into steps, one per op; unknown names and bad arguments fail with what to
  change. A decode followed by inception_crop is marked fused (see Step)."""
  steps = [_make_step(call, pp) for call in pp_syntax.parse(pp)]
  return [_fuse(step, following) for step, following in zip(steps, steps[1:] + [None])]


def apply(steps: list[Step], example: dict, seed: tf.Tensor) -> dict:
  """Runs `steps` on `example`; the random op at place i of the pp string gets the stateless seed
  fold_in(seed, i) (so running a tail of the steps, after a cached head, changes no seed).

  A fused decode and the inception_crop after it run as one op on the crop's seed. A list that
  ends at the decode (a cached head) runs the plain decode, and one that starts at the crop (the
  tail after a cached decode) the plain crop.
  """
  position = 0
  while position < len(steps):
    step, following = steps[position], steps[position + 1:position + 2]
    if step.fused and following and following[0].index == step.index + 1:
      example = step.fused(example, _seed(seed, following[0]))
      position += 2
    else:
      example = step.fn(example, _seed(seed, step)) if step.random else step.fn(example)
      position += 1
  return example


def _seed(seed: tf.Tensor, step: Step) -> tf.Tensor:
  """The stateless seed of `step`: fold_in(seed, its place in the pp string)."""
  return tf.random.experimental.stateless_fold_in(seed, step.index)


def _fuse(step: Step, following: Step | None) -> Step:
  """`step`, marked fused with `following` when they are decode and inception_crop."""
  if step.name == 'decode' and following is not None and following.name == 'inception_crop':
    return step._replace(fused=_decode_and_inception_crop(step.fn, following.fn))
  return step


def _make_step(call: pp_syntax.OpCall, pp: str) -> Step:
  """The step of one parsed op: its factory called with the op's arguments."""
  if call.name not in OPS:
    raise ValueError(f'unknown pp op {call.name!r} in {pp!r}; valid: {", ".join(sorted(OPS))}.')
  try:
    fn = OPS[call.name](*call.args, **call.kwargs)
  except (TypeError, ValueError) as e:
    raise ValueError(f'pp op {call.spec!r}: {e}; signature: '
                     f'{call.name}{op_specs.OPS[call.name].signature}.') from None
  return Step(call.spec, call.name, fn, op_specs.OPS[call.name].random, call.index)


# ---------------------------------------------------------------------------------------------
# Image ops.


def _image(example: dict, op: str) -> tf.Tensor:
  """The decoded image, or an error saying to decode first."""
  if 'image' not in example:
    raise ValueError(f'pp op {op} needs an "image"; the example has {sorted(example)}.')
  image = example['image']
  if image.dtype == tf.string:
    raise ValueError(f'pp op {op} got an encoded image (bytes); start the pp string with '
                     f'decode, e.g. "decode|{op}...".')
  return image


def _encoded(example: dict) -> tf.Tensor:
  """The example's encoded image bytes, or an error saying what is wrong."""
  if 'image' not in example:
    raise ValueError(f'pp op decode needs an "image"; the example has {sorted(example)}.')
  if example['image'].dtype != tf.string:
    raise ValueError('pp op decode got an already decoded image; remove the second decode.')
  return example['image']


def _with_image(example: dict, image: tf.Tensor) -> dict:
  return {**example, 'image': image}


def _pair(size, op: str) -> tuple[int, int]:
  """An int or (height, width) -> (height, width) of positive ints."""
  pair = (size, size) if isinstance(size, int) else tuple(size)
  if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
    raise ValueError(f'{op}: size must be a positive int or (height, width), got {size!r}')
  return pair


def _resize(image: tf.Tensor, size, method: str, antialias: bool) -> tf.Tensor:
  """tf.image.resize that keeps the dtype: uint8 results are rounded and clipped to 0..255."""
  resized = tf.image.resize(image, size, method=method, antialias=antialias)
  if image.dtype == tf.uint8:
    return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
  return tf.cast(resized, image.dtype)


@dataclasses.dataclass(frozen=True)
class _Decode:
  """The op decode(channels); an object, not a closure, so that the fused op reads `channels`."""
  channels: int

  def __call__(self, example: dict) -> dict:
    # expand_animations=False: a GIF gives its first frame, so every image is rank 3.
    image = tf.io.decode_image(_encoded(example), channels=self.channels, expand_animations=False)
    return _with_image(example, image)


@op_specs.takes('decode')
def decode(channels: int):
  """Encoded image bytes (JPEG, PNG, GIF, BMP, WebP) -> uint8 (H, W, channels); channels 1 or 3."""
  if channels not in (1, 3):
    raise ValueError(f'decode: channels must be 1 (grayscale) or 3 (RGB), got {channels!r}')
  return _Decode(channels)


@op_specs.takes('resize')
def resize(size, method: str, antialias: bool):
  """Resizes to exactly `size` (int or (height, width)), ignoring the aspect ratio."""
  size = _pair(size, 'resize')

  def op(example):
    return _with_image(example, _resize(_image(example, 'resize'), size, method, antialias))
  return op


@op_specs.takes('resize_small')
def resize_small(smaller_size: int, method: str, antialias: bool):
  """Resizes so the shorter side is `smaller_size`, keeping the aspect ratio (V-MoE eval).

  V-MoE's op (vmoe/data/pp_ops.py resize_small): scale = smaller_size / min(h, w), new sides
  round(side * scale), resampled with tf.image.resize_area (area averaging, which
  tf.image.resize(method='area') computes too); 'area' is the default so that the string
  'resize_small(256)' means what it means in V-MoE's configs. The result is rounded back to uint8,
  where V-MoE keeps the float (at most half a grey level apart).
  """
  _pair(smaller_size, 'resize_small')

  def op(example):
    image = _image(example, 'resize_small')
    hw = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = smaller_size / tf.reduce_min(hw)
    size = tf.cast(tf.round(hw * scale), tf.int32)
    return _with_image(example, _resize(image, size, method, antialias))
  return op


@op_specs.takes('central_crop')
def central_crop(size):
  """Crops the central `size` (int or (height, width)); fails if the image is smaller."""
  crop_h, crop_w = _pair(size, 'central_crop')

  def op(example):
    image = _image(example, 'central_crop')
    h, w = tf.shape(image)[0], tf.shape(image)[1]
    tf.debugging.assert_greater_equal(
        [h, w], [crop_h, crop_w],
        message=f'central_crop({size}): image smaller than the crop; resize first')
    top, left = (h - crop_h) // 2, (w - crop_w) // 2
    return _with_image(example, image[top:top + crop_h, left:left + crop_w])
  return op


@dataclasses.dataclass(frozen=True)
class _InceptionCrop:
  """The op inception_crop(size, area_min, area_max, aspect_min, aspect_max); an object, not a
  closure, so that the fused op draws the same window and resizes the same way."""
  size: tuple[int, int]
  area_min: float
  area_max: float
  aspect_min: float
  aspect_max: float

  def window(self, shape: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(begin, size) of the crop, tf.slice's arguments, for an image of int32 `shape` (H, W, C)."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, bounding_boxes=tf.zeros([0, 0, 4]), seed=seed,
        area_range=(self.area_min / 100, self.area_max / 100),
        aspect_ratio_range=(self.aspect_min, self.aspect_max),
        min_object_covered=0.0, use_image_if_no_bounding_boxes=True, max_attempts=100)
    return begin, size

  def resized(self, crop: tf.Tensor) -> tf.Tensor:
    return _resize(crop, self.size, 'bilinear', False)

  def __call__(self, example: dict, seed: tf.Tensor) -> dict:
    image = _image(example, 'inception_crop')
    crop = tf.slice(image, *self.window(tf.shape(image), seed))
    crop.set_shape([None, None, image.shape[-1]])   # tf.slice forgets the channel count.
    return _with_image(example, self.resized(crop))


@op_specs.takes('inception_crop')
def inception_crop(size, area_min: float, area_max: float, aspect_min: float, aspect_max: float):
  """Random crop of area_min..area_max % of the image, aspect (width / height)
  aspect_min..aspect_max, resized to `size`.

  The Inception crop (Szegedy et al. 2015) with V-MoE's (and big_vision's) default area range
  5-100%, and up to 100 tries to sample a box before falling back to the whole image: TF's
  default, which V-MoE's inception_crop keeps (vmoe/data/pp_ops.py). V-MoE's aspect range is TF's
  default, 0.75-1.33; the project's ends at 4/3 (docs/fidelity.md D10), and
  `inception_crop(224, aspect_max=1.33)` draws V-MoE's. Right after decode, a JPEG is decoded
  only in the window (_decode_and_inception_crop).
  """
  size = _pair(size, 'inception_crop')
  if not 0 < area_min <= area_max <= 100:
    raise ValueError(f'inception_crop: need 0 < area_min <= area_max <= 100, got '
                     f'{area_min}, {area_max}')
  if not 0 < aspect_min <= aspect_max:
    raise ValueError(f'inception_crop: need 0 < aspect_min <= aspect_max, got '
                     f'{aspect_min}, {aspect_max}')
  return _InceptionCrop(size, area_min, area_max, aspect_min, aspect_max)


def _decode_and_inception_crop(decode_op: _Decode, crop_op: _InceptionCrop) -> Callable:
  """decode then inception_crop as one op, fn(example, the crop's seed): V-MoE's
  decode_jpeg_and_inception_crop (vmoe/data/pp_ops.py) for JPEGs, the two ops for other formats.

  For a JPEG, the window is drawn from the shape the decoded image would have (height and width
  from the header, tf.io.extract_jpeg_shape, and decode's channel count), so the same seed gives
  the window the unfused ops draw. Only that window is decoded, by tf.io.decode_and_crop_jpeg, the
  reference's decoding; libjpeg converts the colours to decode's channel count as decode_image
  does (colour to luma for 1, grey replicated for 3). It differs from cropping the whole decode
  only where the chroma is subsampled (4:2:0, 4:2:2): on the window's outermost pixels, whose
  chroma the window's decode upsamples without the neighbours outside it.
  """
  channels = decode_op.channels

  def decode_window(data, seed):
    height_width = tf.io.extract_jpeg_shape(data)[:2]
    begin, size = crop_op.window(tf.concat([height_width, [channels]], 0), seed)
    window = tf.concat([begin[:2], size[:2]], 0)                # (y, x, height, width)
    return crop_op.resized(tf.io.decode_and_crop_jpeg(data, window, channels=channels))

  def op(example, seed):
    data = _encoded(example)
    image = tf.cond(tf.io.is_jpeg(data), lambda: decode_window(data, seed),
                    lambda: crop_op(decode_op(example), seed)['image'])
    return _with_image(example, image)
  return op


@op_specs.takes('flip_lr')
def flip_lr():
  """Flips left-right with probability 1/2."""

  def op(example, seed):
    image = _image(example, 'flip_lr')
    return _with_image(example, tf.image.stateless_random_flip_left_right(image, seed))
  return op


@op_specs.takes('randaug')
def randaug(num_layers: int, magnitude: float, arithmetic: str):
  """RandAugment(num_layers, magnitude) on uint8 images; see data/pp/randaug.py. `arithmetic`
  'reference' computes what the reference's code does (its golden's outputs), the default
  'project' keeps the meaning recorded pp strings had (data/pp/randaug.py's table)."""
  if not isinstance(num_layers, int) or num_layers < 0 or magnitude < 0:
    raise ValueError(f'randaug: need an int num_layers >= 0 and magnitude >= 0, got '
                     f'{num_layers}, {magnitude}')
  randaug_lib.op_table(arithmetic)   # Refuses an unknown arithmetic when the pp is built.

  def op(example, seed):
    image = _image(example, 'randaug')
    return _with_image(example, randaug_lib.distort(image, seed, num_layers, float(magnitude),
                                                     arithmetic))
  return op


@op_specs.takes('value_range')
def value_range(vmin: float, vmax: float, in_min: float, in_max: float, clip_values: bool):
  """Maps pixel values in_min..in_max linearly to vmin..vmax as float32."""
  if in_max <= in_min:
    raise ValueError(f'value_range: need in_max > in_min, got {in_min}, {in_max}')

  def op(example):
    image = tf.cast(_image(example, 'value_range'), tf.float32)
    image = vmin + (image - in_min) * ((vmax - vmin) / (in_max - in_min))
    if clip_values:
      image = tf.clip_by_value(image, min(vmin, vmax), max(vmin, vmax))
    return _with_image(example, image)
  return op


# ---------------------------------------------------------------------------------------------
# Label and key ops.


def check_ids(ids: tf.Tensor, depth: int, op: str):
  """Fails (at run time) if a class id is outside [0, depth)."""
  tf.debugging.assert_non_negative(ids, message=f'{op}: negative class id')
  tf.debugging.assert_less(ids, tf.cast(depth, ids.dtype),
                           message=f'{op}: class id >= {depth}; raise the number of classes')


def _label(example: dict, key: str, op: str) -> tf.Tensor:
  if key not in example:
    raise ValueError(f'pp op {op}: no key {key!r}; the example has {sorted(example)}.')
  return example[key]


@op_specs.takes('onehot')
def onehot(depth: int, key: str, key_result: str, on: float, off: float):
  """The int class id under `key` -> float32 one-hot (depth,) under `key_result`."""
  if not isinstance(depth, int) or depth < 1:
    raise ValueError(f'onehot: depth must be a positive int, got {depth!r}')

  def op(example):
    label = _label(example, key, 'onehot')
    if label.shape.rank != 0:
      raise ValueError(f'pp op onehot: {key!r} holds a list of ids; use multi_hot({depth}).')
    check_ids(label, depth, 'onehot')
    return {**example, key_result: tf.one_hot(label, depth, on_value=on, off_value=off)}
  return op


@op_specs.takes('multi_hot')
def multi_hot(depth: int, key: str, key_result: str):
  """The list of int class ids under `key` -> float32 multi-hot (depth,) under `key_result`."""
  if not isinstance(depth, int) or depth < 1:
    raise ValueError(f'multi_hot: depth must be a positive int, got {depth!r}')

  def op(example):
    ids = tf.reshape(_label(example, key, 'multi_hot'), [-1])
    check_ids(ids, depth, 'multi_hot')
    # An empty list gives all zeros.
    hits = tf.math.unsorted_segment_max(tf.ones_like(ids, tf.float32), ids, depth)
    return {**example, key_result: tf.maximum(hits, 0.0)}
  return op


@op_specs.takes('keep')
def keep(*keys: str):
  """Keeps only `keys`; a missing key fails naming the keys present."""
  if not keys:
    raise ValueError('keep: name at least one key')

  def op(example):
    missing = [k for k in keys if k not in example]
    if missing:
      raise ValueError(f'pp op keep: no key {missing}; the example has {sorted(example)}.')
    return {k: example[k] for k in keys}
  return op


# name -> factory: the host's executor of each of data/pp/op_specs.py's ops, which says whether it
# is random (random ops receive a stateless seed besides the example).
OPS = {'decode': decode, 'resize': resize, 'resize_small': resize_small,
       'central_crop': central_crop, 'inception_crop': inception_crop, 'flip_lr': flip_lr,
       'randaug': randaug, 'value_range': value_range, 'onehot': onehot, 'multi_hot': multi_hot,
       'keep': keep}
