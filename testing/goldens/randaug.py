"""Golden: big_vision's RandAugment (the runnable fork of the TPU EfficientNet autoaugment.py that
V-MoE's `randaug` pp op calls), every op on explicit arguments, and the op choice given its draws.

Inputs: four photo-like 224 px RGB images (smooth colour fields, hard-edged shapes and grain, of
different ranges) and one edge case (a two-level channel, a constant channel, a black-and-white
channel). Each of the 16 ops runs through the reference's own `_parse_policy_info` (its
level-to-argument table) at magnitudes MAGNITUDES, both signs for the ops that draw one, and a
Cutout centre per case. The reference draws the sign and the centre with stateful
`tf.random_uniform`; the generator answers those calls itself (`FedRandom`), so each case's draws
are explicit: a sign draw of 0.75 keeps the argument positive, 0.25 negates it (the reference
keeps it where floor(u + 0.5) is 1).

The op choice: `distort_image_with_randaugment(image, 2, magnitude)` with every random call
answered from a seeded numpy stream and logged in call order (`choice_draws`): what the project
does given the same draws is comparable with the reference's output.

Stored (exact equality is the claim, so each output is kept as its SHA-256): `case_*` describe
each op case, `case_digest` the SHA-256 of the reference's output bytes (C order, uint8, shape of
the input); the outputs of `FULL_IMAGES` are also stored whole (`full_output`, deduplicated, one
row per distinct output, `case_full` its row or -1), to show what differs when a test fails.
The ops of SUMMED_OPS sum in an order that depends on the CPU's kernel, so their outputs also keep
every ROW_STEP-th row (`summed_rows`, `case_summed` its row or -1), and `smoothing_digest` holds
the SHA-256 of `smoothing` (the sums themselves) on each input: where a CPU's sums differ from
these, a test compares those rows within the bound it derives.
"""
import hashlib

import numpy as np

REFERENCE = 'big_vision/pp/autoaugment.py distort_image_with_randaugment (and its 16 ops)'

SIZE = 224
MAGNITUDES = (0, 1, 2, 3, 5, 10, 15, 20, 25)
SIGNED = ('Rotate', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY')
# The uniform draw the reference's _randomly_negate_tensor turns into each sign.
SIGN_DRAW = {1: 0.75, -1: 0.25}
# Images whose outputs are stored whole: the edge case (it compresses to little).
FULL_IMAGES = (4,)
# Sharpness's smoothing is TensorFlow's depthwise convolution, whose sums depend on the CPU's
# kernel (oneDNN's SSE4.1 kernel and Eigen's give other float32 sums than its AVX2 and AVX-512
# ones: measured with ONEDNN_MAX_CPU_ISA and TF_ENABLE_ONEDNN_OPTS=0).
SUMMED_OPS = ('Sharpness',)
ROW_STEP = 8
CHOICE_RUNS = 32
CHOICE_MAGNITUDES = (10, 20)


def photo_like(seed: int, low: int, high: int, grain: int) -> np.ndarray:
  """A (SIZE, SIZE, 3) uint8 image: a bilinear colour field from an 8 x 8 grid, three flat
  rectangles and a disc with hard edges, and uniform grain of +-grain levels, mapped to
  low..high (clipped)."""
  rng = np.random.default_rng(seed)
  grid = rng.uniform(0, 1, (8, 8, 3))
  t = np.linspace(0, 7, SIZE)
  i0 = np.minimum(t.astype(int), 6)
  f = (t - i0)[:, None, None]
  rows = grid[i0] * (1 - f) + grid[i0 + 1] * f                      # (SIZE, 8, 3)
  g = (t - i0)[None, :, None]
  field = rows[:, i0] * (1 - g) + rows[:, i0 + 1] * g                # (SIZE, SIZE, 3)
  for _ in range(3):
    top, left = rng.integers(0, SIZE - 40, 2)
    height, width = rng.integers(20, 90, 2)
    field[top:top + height, left:left + width] = rng.uniform(0, 1, 3)
  y, x = np.mgrid[:SIZE, :SIZE]
  cy, cx, radius = rng.integers(40, SIZE - 40, 3)
  field[(y - cy) ** 2 + (x - cx) ** 2 < (radius // 2) ** 2] = rng.uniform(0, 1, 3)
  values = low + field * (high - low) + rng.integers(-grain, grain + 1, field.shape)
  return np.clip(np.round(values), 0, 255).astype(np.uint8)


def edge_case() -> np.ndarray:
  """Channel 0 two levels (60 and 190 in stripes), channel 1 constant 77, channel 2 black and
  white in a checkerboard: AutoContrast's and Equalize's flat-channel branches, and their
  two-level ones."""
  y, x = np.mgrid[:SIZE, :SIZE]
  image = np.empty((SIZE, SIZE, 3), np.uint8)
  image[..., 0] = np.where((x // 16) % 2 == 0, 60, 190)
  image[..., 1] = 77
  image[..., 2] = np.where(((x // 28) + (y // 28)) % 2 == 0, 0, 255)
  return image


def images() -> np.ndarray:
  """(5, SIZE, SIZE, 3) uint8: four photo-like images (full range, low contrast, dark,
  saturated) and the edge case."""
  return np.stack([photo_like(0, 0, 255, 24), photo_like(1, 40, 193, 12),
                   photo_like(2, 0, 90, 8), photo_like(3, -60, 320, 30), edge_case()])


class FedRandom:
  """tensorflow.compat.v1 with `random_uniform` answered by `answer(minval, maxval, dtype)`
  (scalar draws only, as the reference's RandAugment makes) and each answer logged."""

  def __init__(self, tf_v1, answer):
    self._tf = tf_v1
    self._answer = answer
    self.log = []

  def __getattr__(self, name):
    return getattr(self._tf, name)

  def random_uniform(self, shape, minval=0, maxval=None, dtype=None, seed=None, name=None):
    del seed, name
    dtype = dtype or self._tf.float32
    if list(shape) != []:
      raise RuntimeError(f'the reference drew a non-scalar {shape}: extend FedRandom')
    maxval = 1.0 if maxval is None else maxval
    value = self._answer(minval, int(maxval) if dtype.is_integer else maxval, dtype)
    self.log.append((int(dtype.is_integer), float(minval), float(maxval), float(value)))
    return self._tf.constant(value, dtype)


def install_addons_stub(context, tf):
  """tensorflow_addons does not install with current TensorFlow: its image.transform, rotate and
  translate become the calls they make, tf.raw_ops.ImageProjectiveTransformV3 with its defaults
  (nearest sampling, constant fill 0), and its transforms for a rotation about the centre and a
  translation."""

  def transform(images, transforms, interpolation='nearest', fill_mode='constant',
                fill_value=0.0, output_shape=None):
    images = tf.convert_to_tensor(images)
    batched = images if images.shape.rank == 4 else images[None]
    transforms = tf.reshape(tf.convert_to_tensor(transforms, tf.float32), [-1, 8])
    shape = tf.shape(batched)[1:3] if output_shape is None else output_shape
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=batched, transforms=transforms, output_shape=shape,
        fill_value=tf.convert_to_tensor(fill_value, tf.float32),
        interpolation=interpolation.upper(), fill_mode=fill_mode.upper())
    return out if images.shape.rank == 4 else out[0]

  def rotate(images, angles, interpolation='nearest'):
    images = tf.convert_to_tensor(images)
    height = tf.cast(tf.shape(images)[-3], tf.float32)
    width = tf.cast(tf.shape(images)[-2], tf.float32)
    angles = tf.reshape(tf.convert_to_tensor(angles, tf.float32), [-1])
    cos, sin = tf.math.cos(angles), tf.math.sin(angles)
    x_offset = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2.0
    y_offset = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2.0
    zeros = tf.zeros_like(angles)
    matrix = tf.stack([cos, -sin, x_offset, sin, cos, y_offset, zeros, zeros], axis=1)
    return transform(images, matrix, interpolation)

  def translate(images, translations, interpolation='nearest'):
    d = tf.reshape(tf.convert_to_tensor(translations, tf.float32), [-1, 2])
    ones, zeros = tf.ones_like(d[:, 0]), tf.zeros_like(d[:, 0])
    matrix = tf.stack([ones, zeros, -d[:, 0], zeros, ones, -d[:, 1], zeros, zeros], axis=1)
    return transform(images, matrix, interpolation)

  why = ('tensorflow_addons does not install with TensorFlow 2.21; transform is '
         'tf.raw_ops.ImageProjectiveTransformV3 with tfa\'s defaults (NEAREST, CONSTANT, fill 0), '
         'rotate and translate build tfa\'s angles_to_projective_transforms and '
         'translations_to_projective_transforms matrices')
  image = context.stub_module('tensorflow_addons.image', {
      'transform': transform, 'rotate': rotate, 'translate': translate}, why)
  context.stub_module('tensorflow_addons', {'image': image}, 'parent of tensorflow_addons.image')


def digest(array: np.ndarray) -> np.ndarray:
  return np.frombuffer(hashlib.sha256(np.ascontiguousarray(array).tobytes()).digest(), np.uint8)


def smoothing(tf, image: np.ndarray) -> np.ndarray:
  """The float32 sums that the reference's Sharpness truncates: its SMOOTH kernel (1 around, 5 at
  the centre, over 13) as TensorFlow's depthwise convolution of the image, VALID padding. How a
  CPU's kernel sums them is what SUMMED_OPS depend on."""
  kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32, shape=[3, 3, 1, 1]) / 13.
  kernel = tf.tile(kernel, [1, 1, image.shape[-1], 1])
  return tf.nn.depthwise_conv2d(tf.cast(image, tf.float32)[None], kernel, [1, 1, 1, 1],
                                padding='VALID').numpy()


def op_cases(inputs: np.ndarray, names, rng: np.random.Generator):
  """(image index, op, magnitude, sign or 0, centre or (-1, -1)) for every case."""
  for index in range(len(inputs)):
    for op in range(len(names)):
      for magnitude in MAGNITUDES:
        if names[op] in SIGNED:
          for sign in (1, -1):
            yield index, op, magnitude, sign, (-1, -1)
        elif names[op] == 'Cutout':
          # Centres anywhere, edges included (a square cut off by the border).
          yield index, op, magnitude, 0, tuple(int(v) for v in rng.integers(0, SIZE, 2))
        else:
          yield index, op, magnitude, 0, (-1, -1)


def generate(context) -> dict:
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  install_addons_stub(context, tf)
  autoaugment = context.module('big_vision.pp.autoaugment', 'big_vision')
  queue = []
  fed = FedRandom(tf.compat.v1, lambda minval, maxval, dtype: queue.pop(0))
  autoaugment.tf = fed
  context.patch('big_vision/pp/autoaugment.py: its module-level `tf` (tensorflow.compat.v1) '
                'answers random_uniform from the generator (explicit signs, Cutout centres and '
                'op draws); every other attribute is tensorflow.compat.v1\'s')
  hparams = autoaugment.HParams(cutout_const=40, translate_const=100)  # Its RandAugment's.
  replace = [128] * 3                                                 # Its RandAugment's.
  names = ['AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize', 'Color',
           'Contrast', 'Brightness', 'Sharpness', 'ShearX', 'ShearY', 'TranslateX',
           'TranslateY', 'Cutout', 'SolarizeAdd']
  inputs = images()
  cases, digests, arguments, full, full_rows = [], [], [], [], {}
  case_full, summed, case_summed = [], [], []
  for index, op, magnitude, sign, centre in op_cases(inputs, names, np.random.default_rng(0)):
    queue[:] = [SIGN_DRAW[sign]] if sign else []
    func, _, args = autoaugment._parse_policy_info(  # pylint: disable=protected-access
        names[op], 0.5, float(magnitude), replace, hparams)
    queue[:] = list(centre) if names[op] == 'Cutout' else []
    out = np.asarray(func(tf.constant(inputs[index]), *args))
    if queue or out.shape != inputs[index].shape or out.dtype != np.uint8:
      raise RuntimeError(f'{names[op]}: draws left {queue}, output {out.shape} {out.dtype}')
    cases.append((index, op, magnitude, sign, *centre))
    digests.append(digest(out))
    numeric = [float(np.asarray(a)) for a in args[:1] if not isinstance(a, list)]
    arguments.append(numeric[0] if numeric else np.nan)
    row = -1
    if index in FULL_IMAGES:
      key = out.tobytes()
      if key not in full_rows:
        full_rows[key] = len(full)
        full.append(out)
      row = full_rows[key]
    case_full.append(row)
    case_summed.append(len(summed) if names[op] in SUMMED_OPS else -1)
    if names[op] in SUMMED_OPS:
      summed.append(out[::ROW_STEP])
  cases = np.array(cases, np.int32)

  # The op choice: the first layer's op runs through all 16 twice, the rest from the stream.
  rng = np.random.default_rng(1)
  schedule = []

  def answer(minval, maxval, dtype):
    if dtype.is_integer and maxval == len(names) and schedule:
      return schedule.pop(0)
    if dtype.is_integer:
      return int(rng.integers(minval, maxval))
    return float(np.float32(rng.uniform(minval, maxval)))

  fed_choice = FedRandom(tf.compat.v1, answer)
  autoaugment.tf = fed_choice
  choice_digests, choice_bounds, choice_settings = [], [0], []
  for run in range(CHOICE_RUNS):
    magnitude = CHOICE_MAGNITUDES[run % len(CHOICE_MAGNITUDES)]
    schedule[:] = [run % len(names), int(rng.integers(0, len(names)))]
    image = inputs[run % 4]
    out = np.asarray(autoaugment.distort_image_with_randaugment(tf.constant(image), 2, magnitude))
    choice_digests.append(digest(out))
    choice_bounds.append(len(fed_choice.log))
    choice_settings.append((run % 4, magnitude))
  return {
      'images': inputs,
      'op_names': np.array(names),
      'case_image': cases[:, 0], 'case_op': cases[:, 1], 'case_magnitude': cases[:, 2],
      'case_sign': cases[:, 3], 'case_centre': cases[:, 4:6],
      'case_argument': np.array(arguments, np.float64),
      'case_digest': np.stack(digests),
      'case_full': np.array(case_full, np.int32),
      'full_output': np.stack(full),
      'case_summed': np.array(case_summed, np.int32),
      'summed_rows': np.stack(summed),
      'smoothing_digest': np.stack([digest(smoothing(tf, image)) for image in inputs]),
      # Each logged draw: (1 if an integer draw, minval, maxval, value), in call order; run r's
      # draws are choice_draws[choice_bounds[r]:choice_bounds[r + 1]].
      'choice_draws': np.array(fed_choice.log, np.float64),
      'choice_bounds': np.array(choice_bounds, np.int64),
      'choice_image': np.array([s[0] for s in choice_settings], np.int32),
      'choice_magnitude': np.array([s[1] for s in choice_settings], np.int32),
      'choice_digest': np.stack(choice_digests),
  }
