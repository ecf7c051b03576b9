"""Golden: V-MoE's pp ops (vmoe/data/pp_ops.py), with their defaults, on photo-like images.

The windowed decode (`decode_jpeg_and_inception_crop`) and `inception_crop` draw their window,
and `flip_lr` its flip, with stateful TensorFlow ops that no seed given to the project's
stateless ops reproduces. So the golden holds two kinds of data:
- outputs given the window: tf.image.sample_distorted_bounding_box is replaced, while the
  reference's op runs, by a function returning a chosen window (recorded as a patch), so that
  the reference's own slicing, windowed JPEG decoding and resizing run on it;
- the window's distribution: 20,000 windows the reference's `inception_crop()` draws (the crop's
  height and width) on a 375 x 500 image, the sampler given explicit seeds (SeededSampler),
  sorted (the sample is a multiset); both reference ops call the same sampler with the same
  default arguments;
- 2,000 flips `flip_lr` draws on a small image (whether each flipped; TF's global seed fixes
  them), and the flipped image.
The resizes cast their float result to the input's dtype: for uint8 the reference truncates.
Each resize is also run on the float32 image, where the cast keeps the float: the value the
truncation starts from (docs/fidelity.md D10).
"""
import numpy as np

REFERENCE = ('vmoe/data/pp_ops.py decode, decode_jpeg_and_inception_crop, inception_crop, resize, '
             'resize_small, central_crop, flip_lr, value_range, onehot')

HEIGHT, WIDTH = 45, 67
# (offset y, offset x, height, width): the whole image, and windows at even and odd offsets
# (4:2:0 chroma is stored per 2 x 2 pixels) of several shapes.
WINDOWS = ((0, 0, HEIGHT, WIDTH), (3, 5, 20, 30), (10, 11, 33, 41), (1, 0, 44, 25), (7, 20, 9, 9))
RESIZE = 32
SMALL_SIDE = 24
DISTRIBUTION_SHAPE = (375, 500)
DISTRIBUTION_DRAWS = 20_000
FLIPS = 2_000
DEPTH = 10
LABEL_LISTS = ((1, 4), (2, 2, 7), (), (9,), (0, 9, 5, 3))


def photo(height: int, width: int, seed: int) -> np.ndarray:
  """A smooth uint8 RGB image with edges and a little noise, like a downscaled photograph."""
  rng = np.random.default_rng(seed)
  y, x = np.mgrid[0:height, 0:width] / max(height, width)
  channels = []
  for _ in range(3):
    a, b, c, d = rng.uniform(1, 6, 4)
    value = 0.5 + 0.25 * np.sin(a * x * np.pi + b) * np.cos(c * y * np.pi + d) + 0.2 * (x - y)
    value += 0.3 * ((x - 0.4)**2 + (y - 0.5)**2 < 0.05)
    channels.append(value + rng.normal(0, 0.02, value.shape))
  return (np.clip(np.stack(channels, -1), 0, 1) * 255).round().astype(np.uint8)


class FixedWindow:
  """Stands in for tf.image.sample_distorted_bounding_box: returns one chosen window."""

  def __init__(self, tf, window):
    self.tf, self.window = tf, window

  def __call__(self, image_size, bounding_boxes, **kwargs):
    del image_size, bounding_boxes, kwargs
    y, x, h, w = self.window
    tf = self.tf
    return (tf.constant([y, x, 0], tf.int32), tf.constant([h, w, -1], tf.int32),
            tf.zeros([1, 1, 4], tf.float32))


def window_outputs(context, tf, pp_ops, image: np.ndarray, jpeg: bytes) -> dict:
  """The reference's crops given each of WINDOWS."""
  arrays = {}
  sampler = tf.compat.v1.image.sample_distorted_bounding_box
  context.patch('tf.compat.v1.image.sample_distorted_bounding_box replaced by a function '
                'returning a chosen window while decode_jpeg_and_inception_crop and '
                'inception_crop run (their windows are drawn by a stateful op)')
  try:
    for i, window in enumerate(WINDOWS):
      tf.compat.v1.image.sample_distorted_bounding_box = FixedWindow(tf, window)
      crop = pp_ops.inception_crop()({'image': tf.constant(image)})['image']
      arrays[f'window{i}'] = np.array(window, np.int32)
      arrays[f'window{i}_inception_crop'] = crop.numpy()
      arrays[f'window{i}_inception_crop_resized'] = pp_ops.inception_crop(RESIZE)(
          {'image': tf.constant(image)})['image'].numpy()
      decoded = pp_ops.decode_jpeg_and_inception_crop()({'image': tf.constant(jpeg)})['image']
      arrays[f'window{i}_decode_jpeg_and_inception_crop'] = decoded.numpy()
      arrays[f'window{i}_decode_jpeg_and_inception_crop_resized'] = (
          pp_ops.decode_jpeg_and_inception_crop(RESIZE)({'image': tf.constant(jpeg)})['image']
          .numpy())
      # The float each uint8 crop above was truncated from.
      for name, source in (('inception_crop', crop), ('decode_jpeg_and_inception_crop', decoded)):
        arrays[f'window{i}_{name}_resized_float'] = pp_ops.resize(RESIZE)(
            {'image': tf.cast(source, tf.float32)})['image'].numpy()
  finally:
    tf.compat.v1.image.sample_distorted_bounding_box = sampler
  return arrays


def plain_outputs(tf, pp_ops, image: np.ndarray, jpeg: bytes) -> dict:
  """The reference's deterministic image and label ops."""
  arrays = {'decode': pp_ops.decode()({'image': tf.constant(jpeg)})['image'].numpy()}
  for name, op in (('resize', pp_ops.resize(RESIZE)), ('resize_hw', pp_ops.resize((20, 50))),
                   ('resize_small', pp_ops.resize_small(SMALL_SIDE)),
                   ('central_crop', pp_ops.central_crop(RESIZE)),
                   ('central_crop_hw', pp_ops.central_crop((20, 41))),
                   ('value_range', pp_ops.value_range(-1, 1)),
                   ('value_range_unit', pp_ops.value_range(0, 1))):
    for suffix, source in (('', image), ('_tall', image.transpose(1, 0, 2))):
      arrays[f'{name}{suffix}'] = op({'image': tf.constant(source)})['image'].numpy()
      if name.startswith('resize'):
        arrays[f'{name}{suffix}_float'] = op(
            {'image': tf.constant(source.astype(np.float32))})['image'].numpy()
  for label in range(DEPTH):
    arrays[f'onehot_{label}'] = pp_ops.onehot(DEPTH)({'labels': tf.constant(label)})['labels'
                                                                                      ].numpy()
  for i, ids in enumerate(LABEL_LISTS):
    arrays[f'label_list{i}'] = np.array(ids, np.int64)
    arrays[f'multi_hot{i}'] = pp_ops.onehot(DEPTH)(
        {'labels': tf.constant(ids, tf.int64)})['labels'].numpy()
  return arrays


class SeededSampler:
  """Calls tf.image.sample_distorted_bounding_box with the reference's arguments and an explicit
  seed pair (55, i) at the i-th call: given none, as the reference gives none, its kernel seeds
  itself at random, whatever TF's global seed, and no run would reproduce the golden."""

  def __init__(self, sampler):
    self.sampler, self.calls = sampler, 0

  def __call__(self, image_size, bounding_boxes, **kwargs):
    self.calls += 1
    return self.sampler(image_size, bounding_boxes, seed=55, seed2=self.calls, **kwargs)


def random_draws(context, tf, pp_ops) -> dict:
  """The reference's window sizes on a DISTRIBUTION_SHAPE image, and its flips."""
  tf.random.set_seed(55)
  canvas = tf.zeros(DISTRIBUTION_SHAPE + (1,), tf.uint8)
  crop = pp_ops.inception_crop()
  sampler = tf.compat.v1.image.sample_distorted_bounding_box
  context.patch('tf.compat.v1.image.sample_distorted_bounding_box given seed=55, seed2=i at its '
                'i-th call while inception_crop draws the distribution\'s windows (the '
                'reference passes no seed, and the kernel then seeds itself at random)')
  tf.compat.v1.image.sample_distorted_bounding_box = SeededSampler(sampler)
  try:
    drawn = np.array([tf.shape(crop({'image': canvas})['image'])[:2].numpy()
                      for _ in range(DISTRIBUTION_DRAWS)])
  finally:
    tf.compat.v1.image.sample_distorted_bounding_box = sampler
  drawn = drawn[np.lexsort((drawn[:, 1], drawn[:, 0]))]
  small = photo(6, 9, 7)
  flip = pp_ops.flip_lr()
  flipped = [bool(np.any(flip({'image': tf.constant(small)})['image'].numpy() != small))
             for _ in range(FLIPS)]
  return {'window_sizes': drawn.astype(np.int16),
          'distribution_shape': np.array(DISTRIBUTION_SHAPE, np.int32),
          'flip_image': small, 'flipped': np.array(flipped),
          'flip_output': tf.image.flip_left_right(small).numpy() if not any(flipped) else
                         flip_output(tf, flip, small)}


def flip_output(tf, flip, small: np.ndarray) -> np.ndarray:
  """One output of the reference's flip_lr that differs from its input."""
  while True:
    out = flip({'image': tf.constant(small)})['image'].numpy()
    if np.any(out != small):
      return out


def generate(context) -> dict:
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  pp_ops = context.module('vmoe.data.pp_ops', 'vmoe')
  image = photo(HEIGHT, WIDTH, 0)
  jpeg = tf.io.encode_jpeg(image, quality=90).numpy()   # 4:2:0 chroma (libjpeg's default).
  arrays = {'image': image, 'jpeg': np.frombuffer(jpeg, np.uint8)}
  arrays.update(window_outputs(context, tf, pp_ops, image, jpeg))
  arrays.update(plain_outputs(tf, pp_ops, image, jpeg))
  arrays.update(random_draws(context, tf, pp_ops))
  arrays.update(resize_size=np.int64(RESIZE), small_side=np.int64(SMALL_SIDE),
                depth=np.int64(DEPTH))
  return arrays
