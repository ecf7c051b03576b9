"""The pp ops against V-MoE's own (testing/goldens/pp_ops.py): outputs given the same window or
flip, and the distributions of the windows and flips."""
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from data.pp import ops
from testing import goldens

U32 = 2.0**-24   # float32's unit roundoff.
SEED = tf.constant([5, 55], tf.int64)
# The significance level of each distribution test below. The project's draws come from fixed
# seeds, so each test is deterministic; alpha is the chance that a correct sampler's fixed draws
# would have failed it.
ALPHA = 1e-3


@pytest.fixture(scope='module')
def golden():
  return goldens.load('pp_ops')


def run(pp: str, example: dict, seed=SEED) -> dict:
  out = ops.apply(ops.build(pp), {k: tf.constant(v) for k, v in example.items()}, seed)
  return {k: v.numpy() for k, v in out.items()}


def rounded(reference_float: np.ndarray) -> np.ndarray:
  """The project's uint8 of a resize's float result: rounded half to even and clipped (D10)."""
  return np.clip(np.round(reference_float), 0, 255).astype(np.uint8)


def check_truncated(reference_uint8: np.ndarray, reference_float: np.ndarray) -> int:
  """Checks that the reference's uint8 result is its float result truncated; returns how many
  values the project's rounding moves one level up from it."""
  np.testing.assert_array_equal(reference_uint8, np.clip(np.floor(reference_float), 0, 255))
  return int(np.count_nonzero(rounded(reference_float) != reference_uint8))


def fixed_window(window: np.ndarray):
  """A stand-in for tf.image.stateless_sample_distorted_bounding_box that returns `window`
  (y, x, height, width), as the golden's generator gave V-MoE's stateful sampler."""
  y, x, h, w = (int(v) for v in window)

  def sample(image_size, **kwargs):
    del image_size, kwargs
    return (tf.constant([y, x, 0], tf.int32), tf.constant([h, w, -1], tf.int32),
            tf.zeros([1, 1, 4], tf.float32))
  return sample


def windows(golden) -> list[int]:
  return sorted(int(name.removeprefix('window')) for name in golden.arrays
                if name.startswith('window') and name.removeprefix('window').isdigit())


def test_crops_given_the_window_are_v_moes_resized_and_rounded(golden, monkeypatch):
  """inception_crop and the windowed decode (decode|inception_crop runs as one op), given V-MoE's
  window, resize V-MoE's crop (tf.slice) and V-MoE's window decode (tf.io.decode_and_crop_jpeg)
  with the same bilinear resize; V-MoE truncates the result to uint8, the project rounds it
  (D10): the same pixels where the float's fraction is below 1/2, one level up elsewhere."""
  size = int(golden['resize_size'])
  moved = 0
  for i in windows(golden):
    monkeypatch.setattr(tf.image, 'stateless_sample_distorted_bounding_box',
                        fixed_window(golden[f'window{i}']))
    crop = run(f'inception_crop({size})', {'image': golden['image']})['image']
    fused = run(f'decode|inception_crop({size})', {'image': golden['jpeg'].tobytes()})['image']
    for name, ours in (('inception_crop', crop), ('decode_jpeg_and_inception_crop', fused)):
      reference_float = golden[f'window{i}_{name}_resized_float']
      np.testing.assert_array_equal(ours, rounded(reference_float), err_msg=f'{name}, {i}')
      moved += check_truncated(golden[f'window{i}_{name}_resized'], reference_float)
  assert moved > 0   # The goldens do see D10's difference.


def test_deterministic_image_ops_equal_v_moes(golden):
  image = golden['image']
  np.testing.assert_array_equal(run('decode', {'image': golden['jpeg'].tobytes()})['image'],
                                golden['decode'])
  size, small = int(golden['resize_size']), int(golden['small_side'])
  for suffix, source in (('', image), ('_tall', image.transpose(1, 0, 2))):
    example = {'image': source}
    # Bilinear resizes: the same float, rounded here and truncated there (D10).
    for name, pp in (('resize', f'resize({size})'), ('resize_hw', 'resize((20, 50))')):
      reference_float = golden[f'{name}{suffix}_float']
      np.testing.assert_array_equal(run(pp, example)['image'], rounded(reference_float))
      check_truncated(golden[f'{name}{suffix}'], reference_float)
    # resize_small: V-MoE keeps resize_area's float; the project rounds it to uint8 (D10).
    np.testing.assert_array_equal(golden[f'resize_small{suffix}'],
                                  golden[f'resize_small{suffix}_float'])
    np.testing.assert_array_equal(run(f'resize_small({small})', example)['image'],
                                  rounded(golden[f'resize_small{suffix}']))
    np.testing.assert_array_equal(run(f'central_crop({size})', example)['image'],
                                  golden[f'central_crop{suffix}'])
    np.testing.assert_array_equal(run('central_crop((20, 41))', example)['image'],
                                  golden[f'central_crop_hw{suffix}'])
    # value_range: V-MoE computes vmin + ((x - 0) / 255) (vmax - vmin), the project
    # vmin + (x - 0) ((vmax - vmin) / 255): the same real number, each side rounding three
    # times relative to at most |vmin| + |vmax - vmin| (and the constant's rounding): within
    # 2 * 4 u (|vmin| + |vmax - vmin|).
    for name, pp, (vmin, vmax) in (('value_range', 'value_range(-1, 1)', (-1, 1)),
                                   ('value_range_unit', 'value_range(0, 1)', (0, 1))):
      ours = run(pp, example)['image']
      assert ours.dtype == golden[f'{name}{suffix}'].dtype == np.float32
      np.testing.assert_allclose(ours, golden[f'{name}{suffix}'], rtol=0,
                                 atol=8 * U32 * (abs(vmin) + abs(vmax - vmin)))


def test_onehot_and_multi_hot_equal_v_moes(golden):
  depth = int(golden['depth'])
  for label in range(depth):
    np.testing.assert_array_equal(run(f'onehot({depth})', {'label': np.int64(label)})['labels'],
                                  golden[f'onehot_{label}'])
  lists = sorted(name for name in golden.arrays if name.startswith('label_list'))
  for name in lists:
    ids = golden[name]
    ours = run(f'multi_hot({depth})', {'labels': ids})['labels']
    np.testing.assert_array_equal(ours, golden[name.replace('label_list', 'multi_hot')])
    assert ours.dtype == np.float32


def project_window_sizes(shape: tuple[int, int], count: int, **options) -> np.ndarray:
  """(count, 2) heights and widths of the windows inception_crop(224, **options) draws for
  seeds (i, 55)."""
  crop = ops.inception_crop(224, **options)
  image_shape = tf.constant([*shape, 1], tf.int32)

  @tf.function
  def sizes(n):
    seeds = tf.stack([tf.range(n), tf.fill([n], 55)], axis=1)
    return tf.map_fn(lambda seed: crop.window(image_shape, seed)[1][:2], seeds,
                     fn_output_signature=tf.int32, parallel_iterations=64)
  return sizes(tf.constant(count)).numpy()


def ks_critical(n: int, m: int, alpha: float) -> float:
  """The two-sample Kolmogorov-Smirnov statistic's critical value at level alpha (the
  asymptotic c(alpha) sqrt((n + m) / (n m)), c(alpha) = sqrt(-ln(alpha / 2) / 2))."""
  return np.sqrt(-np.log(alpha / 2) / 2) * np.sqrt((n + m) / (n * m))


def test_window_area_and_aspect_are_distributed_as_v_moes(golden):
  """Two-sample Kolmogorov-Smirnov tests, at ALPHA each, of the window's area (a share of the
  image) and aspect ratio (width / height), the project's 20,000 draws against V-MoE's."""
  height, width = (int(v) for v in golden['distribution_shape'])
  theirs = golden['window_sizes'].astype(np.float64)
  ours = project_window_sizes((height, width), len(theirs)).astype(np.float64)
  n = m = len(theirs)
  critical = ks_critical(n, m, ALPHA)
  for name, of in (('area', lambda s: s[:, 0] * s[:, 1] / (height * width)),
                   ('aspect', lambda s: s[:, 1] / s[:, 0])):
    statistic = stats.ks_2samp(of(ours), of(theirs)).statistic
    assert statistic < critical, (name, statistic, critical)
  # Power: a sampler whose area range started at 8% instead of V-MoE's 5% draws no window
  # below 8% (TF's sampler rejects a rounded window outside the range), so its statistic is at
  # least V-MoE's share of windows below 8%, less the sampling error of our draws' share (4
  # standard errors); that exceeds the critical value, so the test would fail it.
  below = np.mean(theirs[:, 0] * theirs[:, 1] / (height * width) < 0.08)
  assert below - 4 * np.sqrt(below * (1 - below) / m) > critical, (below, critical)


def two_proportion_z(ours: np.ndarray, theirs: np.ndarray) -> float:
  """The two-proportion z statistic of two boolean samples (pooled standard error)."""
  pooled = (ours.sum() + theirs.sum()) / (len(ours) + len(theirs))
  return (ours.mean() - theirs.mean()) / np.sqrt(pooled * (1 - pooled)
                                                 * (1 / len(ours) + 1 / len(theirs)))


def test_aspect_max_1_33_draws_v_moes_aspect_tail(golden):
  """V-MoE's aspect range is TF's default 0.75-1.33, the project's 3/4-4/3 (D10): too small a
  difference for the KS test, but the share of windows wider than 1.33 shows it. With
  aspect_max=1.33 the share agrees with V-MoE's (two-proportion z-test at ALPHA); by default it
  is larger, beyond the same limit."""
  height, width = (int(v) for v in golden['distribution_shape'])
  theirs = golden['window_sizes'].astype(np.float64)
  limit = stats.norm.ppf(1 - ALPHA / 2)

  def wide(sizes):
    return sizes[:, 1] / sizes[:, 0] > 1.33
  switched = project_window_sizes((height, width), len(theirs), aspect_max=1.33)
  assert abs(two_proportion_z(wide(switched), wide(theirs))) < limit
  default = project_window_sizes((height, width), len(theirs))
  assert two_proportion_z(wide(default), wide(theirs)) > limit


def test_flips_are_v_moes_mirror_about_as_often(golden):
  """Each flip is V-MoE's flipped image byte for byte; the share of flips, over 2,000 seeds,
  agrees with V-MoE's 2,000 draws by a two-proportion z-test at ALPHA (|z| < 3.29)."""
  image, flipped_output = golden['flip_image'], golden['flip_output']
  outputs = [run('flip_lr', {'image': image}, tf.constant([i, 55], tf.int64))['image']
             for i in range(len(golden['flipped']))]
  flipped = np.array([not np.array_equal(out, image) for out in outputs])
  for out, flip in zip(outputs, flipped):
    np.testing.assert_array_equal(out, flipped_output if flip else image)
  z = two_proportion_z(flipped, golden['flipped'])
  limit = stats.norm.ppf(1 - ALPHA / 2)
  assert abs(z) < limit, (z, limit)
  # Power: a flip of probability 0.4 or 0.6 would be 0.1 / SE standard errors off (SE of a
  # difference of two shares of 1/2), beyond the limit by more than 3 of them.
  n = len(flipped)
  assert 0.1 / np.sqrt(0.25 * 2 / n) - limit > 3
