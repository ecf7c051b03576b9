"""RandAugment's recipe, for both of its executors: the op list in the reference's order, the
level -> argument table, the fill and pixel constants, and the two arithmetics' names. No
TensorFlow and no JAX: data/pp/randaug.py (TensorFlow, one image on the host) and
data/pp/randaug_device.py (jax.numpy, a batch on the accelerator) both read it, and
data/pp/randaug.py's docstring states the recipe.

Level -> argument (the reference's formulas, level = magnitude / MAX_LEVEL):
  Rotate           rotate_degrees: 30 * level degrees, random sign
  ShearX, ShearY   shear: 0.3 * level, random sign
  TranslateX, Y    translate_fraction of the image's side: 100 px * level at 224 px, random sign
  Color, Contrast, Brightness, Sharpness   enhancement_factor: 1.8 * level + 0.1
  Posterize        posterize_bits: keep int(4 * level) bits
  Solarize         solarize_threshold: invert pixels >= int(256 * level)
  SolarizeAdd      solarize_addition: add int(110 * level) to pixels < 128
  Cutout           cutout_fraction of the smaller side: a grey square of half-side 40 px * level
                   at 224 px
  AutoContrast, Equalize, Invert: no argument.
Each function returns the Python number both executors compute with, so they start from the same
float. Geometric ops and Cutout fill uncovered pixels with grey FILL (the reference's replace
value). Scaling the pixel constants with the image size (the reference uses 100 and 40 px whatever
the size) keeps the ops meaningful on 28 px images and equals the reference at 224 px.
"""

MAX_LEVEL = 10.0
FILL = 128
REFERENCE_SIZE = 224.0   # The pixel constants below are the reference's at this image size.
TRANSLATE_PX = 100.0
CUTOUT_PX = 40.0
# ITU-R 601 luma weights, as tf.image.rgb_to_grayscale and PIL use.
LUMA = (0.2989, 0.5870, 0.1140)
# The pp op's `arithmetic` values: the project's, the default, and the reference's code's.
ARITHMETICS = ('project', 'reference')
# The reference's op list, in its order: a layer draws an index into it, on either side.
OPS = ('AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize', 'Color',
       'Contrast', 'Brightness', 'Sharpness', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY',
       'Cutout', 'SolarizeAdd')


def check_arithmetic(arithmetic: str) -> None:
  """Fails unless `arithmetic` is one of ARITHMETICS, naming them."""
  if arithmetic not in ARITHMETICS:
    raise ValueError(f'randaug: arithmetic must be one of {ARITHMETICS}, got {arithmetic!r}')


def in_order(table: dict) -> dict:
  """`table` (op name -> an executor's op) in OPS's order; it must name exactly OPS."""
  if sorted(table) != sorted(OPS):
    raise ValueError(f'a RandAugment table names {sorted(table)}, not the ops {sorted(OPS)}.')
  return {name: table[name] for name in OPS}


def rotate_degrees(level: float) -> float:
  """Rotate's angle in degrees, before its sign."""
  return 30.0 * level


def shear(level: float) -> float:
  """ShearX's and ShearY's shear, before its sign."""
  return 0.3 * level


def translate_fraction(level: float) -> float:
  """TranslateX's and TranslateY's shift, a fraction of the image's width or height."""
  return TRANSLATE_PX * level / REFERENCE_SIZE


def cutout_fraction(level: float) -> float:
  """Cutout's half-side, a fraction of the image's smaller side."""
  return CUTOUT_PX * level / REFERENCE_SIZE


def enhancement_factor(level: float) -> float:
  """The blend factor of Color, Contrast, Brightness and Sharpness (1 keeps the image)."""
  return 1.8 * level + 0.1


def posterize_bits(level: float) -> int:
  """The most significant bits Posterize keeps."""
  return int(4 * level)


def solarize_threshold(level: float) -> int:
  """The value from which Solarize inverts a pixel."""
  return int(256 * level)


def solarize_addition(level: float) -> int:
  """What SolarizeAdd adds to the pixels below 128."""
  return int(110 * level)


def reference_posterize_shift(level: float) -> int:
  """The shift the reference's Posterize gets: TensorFlow casts 8 - bits to the image's uint8
  (-1 becomes 255) and its shift kernels clamp a shift to 0..7, so 0 bits (shift 8) and more than
  8 bits keep the top bit."""
  return min((8 - posterize_bits(level)) % 256, 7)


def reference_solarize_threshold(level: float) -> int:
  """The threshold the reference's Solarize compares a uint8 image with: int(256 * level) cast
  to uint8, which wraps (256 and 512 become 0, 384 and 640 become 128; big_vision issue #110)."""
  return solarize_threshold(level) % 256
