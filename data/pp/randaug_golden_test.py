"""RandAugment against the reference's own outputs (testing/goldens/randaug.npz: big_vision's
pp/autoaugment.py run on four photo-like 224 px images and an edge case, every op at magnitudes
0-25 with explicit signs and Cutout centres, and its two-layer distortion given fed draws).

Exact equality is the claim: both sides run the same TensorFlow ops, so each output is compared
by its SHA-256. One op sums in an order that depends on the CPU's kernel: Sharpness's depthwise
convolution (testing/goldens/randaug.py SUMMED_OPS). Where this CPU's sums differ from the
golden's (the convolution alone, on the golden's inputs, gives other float32 bytes), its outputs are compared on the golden's sampled rows within the bound
`summed_levels` derives, and the two-layer runs through it are left to that comparison. A
failure names both CPUs."""
import functools
import hashlib

import numpy as np
import tensorflow as tf

from base import host
from data.pp import randaug
from testing import goldens
from testing.goldens import randaug as randaug_golden

# The reference's ops that draw a sign in its level-to-argument table (_randomly_negate_tensor).
SIGNED = ('Rotate', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY')


@functools.cache
def golden() -> goldens.Golden:
  return goldens.load('randaug')


def sha256(image: np.ndarray) -> bytes:
  return hashlib.sha256(np.ascontiguousarray(image).tobytes()).digest()


def explicit_draws(sign: int, centre) -> randaug.Draws:
  return randaug.Draws(tf.constant(float(sign or 1), tf.float32), tf.constant(centre, tf.int32))


def test_the_golden_lists_the_projects_ops_in_order():
  assert list(golden()['op_names']) == list(randaug.OPS)


def summed_levels(factor: float) -> int:
  """How many levels apart Sharpness's output can land when the convolution sums otherwise: the
  smoothed image is a float32 sum truncated to uint8, so a sum a few ulps apart that crosses an
  integer moves it by one level; the blend `smoothed + factor * (image - smoothed)` moves that
  level by |1 - factor|, and truncation (after clipping) turns it into at most
  floor(|1 - factor|) + 1 levels."""
  return int(np.floor(abs(1 - factor))) + 1


def op_output(k: int) -> np.ndarray:
  """The project's output for the golden's op case k, under the reference arithmetic."""
  g = golden()
  ops = randaug.op_table('reference')
  draws = explicit_draws(g['case_sign'][k], g['case_centre'][k])
  return ops[list(ops)[g['case_op'][k]]](tf.constant(g['images'][g['case_image'][k]]),
                                          g['case_magnitude'][k] / randaug.MAX_LEVEL,
                                          draws).numpy()


def summed_apart(k: int, out: np.ndarray) -> bool:
  """Whether case k is a SUMMED_OPS case on a CPU that sums otherwise (sums_differ_here), whose
  sampled rows lie within summed_levels of the golden's."""
  g = golden()
  row = g['case_summed'][k]
  if row < 0 or not sums_differ_here():
    return False
  gap = np.abs(out[::randaug_golden.ROW_STEP].astype(np.int16) - g['summed_rows'][row]).max()
  return gap <= summed_levels(g['case_argument'][k])


@functools.cache
def sums_differ_here() -> bool:
  """Whether this CPU's depthwise convolution sums other than the golden's CPU did: its float32
  smoothing of an input (randaug_golden.smoothing, no project code) has other bytes."""
  g = golden()
  return any(sha256(randaug_golden.smoothing(tf, image)) != expected.tobytes()
             for image, expected in zip(g['images'], g['smoothing_digest']))


def test_every_op_equals_the_reference_exactly_under_its_arithmetic():
  g = golden()
  names = list(randaug.op_table('reference'))
  differing = []
  for k, op in enumerate(g['case_op']):
    out = op_output(k)
    if sha256(out) != g['case_digest'][k].tobytes() and not summed_apart(k, out):
      differing.append((names[op], int(g['case_magnitude'][k]), int(g['case_image'][k])))
  assert not differing, (differing, where_made())


def test_summed_ops_are_sampled_and_bounded_by_their_factor():
  # Every Sharpness case keeps its sampled rows, and the bound follows the factor: 1 level for
  # magnitudes 0-10 (factor 0.1-1.9), 4 at magnitude 25 (factor 4.6, |1 - factor| = 3.6).
  g = golden()
  sharpness = list(randaug.OPS).index('Sharpness')
  assert np.array_equal(g['case_summed'] >= 0, g['case_op'] == sharpness)
  assert g['summed_rows'].shape[1] == -(-randaug_golden.SIZE // randaug_golden.ROW_STEP)
  factors = {int(m): a for m, a, op in zip(g['case_magnitude'], g['case_argument'], g['case_op'])
             if op == sharpness}
  assert [summed_levels(factors[m]) for m in (0, 10, 25)] == [1, 1, 4]


def where_made() -> str:
  """The golden's CPU and TensorFlow against this machine's, for a failure's message."""
  meta = golden().meta
  versions = meta['library_versions']
  made = versions.get('tensorflow', versions.get('tensorflow-cpu'))
  return (f"golden: {meta['cpu_model']}, tensorflow {made}; "
          f"here: {host.this_cpu()['cpu_model']}, tensorflow {tf.__version__}")


def test_the_arithmetics_share_every_op_but_six():
  # The ops the golden pins under 'reference' are the project's own for all but the six the
  # module docstring lists, so the default arithmetic equals the reference for those ten.
  differ = [name for name in randaug.OPS if randaug.OPS[name] is not randaug.REFERENCE_OPS[name]]
  assert differ == ['AutoContrast', 'Posterize', 'Solarize', 'Color', 'Contrast', 'Sharpness']


def layer_choices(draws: np.ndarray, names: list) -> tuple[list, int]:
  """Each layer's (op index, sign, centre) from the reference's draws in call order: per layer,
  the op index (an integer draw over 0..15), then for each of the 16 ops its discarded
  probability (U(0.2, 0.8)) and, for SIGNED ops, its sign draw u (positive where
  floor(u + 0.5) is 1, i.e. u >= 0.5); the chosen op, run at once, draws Cutout's row and
  column. Returns the layers and the number of draws read."""
  layers, pos = [], 0
  while pos < len(draws):
    is_integer, low, high, op = draws[pos]
    assert is_integer and (low, high) == (0, len(names)), draws[pos]   # Uniform over the 16.
    op, sign, centre, pos = int(op), 1, (-1, -1), pos + 1
    for i, name in enumerate(names):
      assert tuple(draws[pos, :3]) == (0, 0.2, 0.8), (name, draws[pos])
      pos += 1
      if name in SIGNED:
        if i == op:
          sign = 1 if draws[pos, 3] >= 0.5 else -1
        pos += 1
      if i == op and name == 'Cutout':
        centre = (int(draws[pos, 3]), int(draws[pos + 1, 3]))
        pos += 2
    layers.append((op, sign, centre))
  return layers, pos


def test_the_op_choice_given_the_references_draws():
  # The reference draws an op index uniformly and a probability for each op that it discards:
  # the chosen op always runs. The project's layers, given the same choices and draws, give the
  # reference's image after two layers.
  g = golden()
  ops = randaug.op_table('reference')
  names = list(ops)
  chosen = set()
  for run, (start, stop) in enumerate(zip(g['choice_bounds'][:-1], g['choice_bounds'][1:])):
    layers, read = layer_choices(g['choice_draws'][start:stop], names)
    assert read == stop - start and len(layers) == 2
    image = tf.constant(g['images'][g['choice_image'][run]])
    level = g['choice_magnitude'][run] / randaug.MAX_LEVEL
    for op, sign, centre in layers:
      image = ops[names[op]](image, level, explicit_draws(sign, centre))
      chosen.add(op)
    through_summed = any(names[op] in randaug_golden.SUMMED_OPS for op, _, _ in layers)
    if through_summed and sums_differ_here():
      continue     # Its sums land apart; the op test bounds them.
    assert sha256(image.numpy()) == g['choice_digest'][run].tobytes(), (run, layers,
                                                                         where_made())
  assert chosen == set(range(len(names)))    # Every op ran in some layer.
