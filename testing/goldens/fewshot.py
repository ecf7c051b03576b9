"""Golden: big_vision's closed-form few-shot ridge accuracy on fixed features and labels.

big_vision/evaluators/fewshot_lsr.py: `_precompute_cache(x, y, num_classes)` whitens the train
features, appends the bias feature 100, and decomposes the smaller Gram matrix;
`_eig_fewshot_acc_fn(cache, x_test, y_test, l2_reg)` is the test accuracy of the ridge solution
for one l2 (jitted on the CPU). V-MoE's vmoe/evaluate/fewshot.py, which docs/fidelity.md cites,
has the same two functions with the same arithmetic. The reference runs in JAX's default
float32; the project solves in float64 (docs/fidelity.md D19), and in float32 the bias
feature's eigenvalue (100^2 per example) makes the reference's rounding, relative to the
whitened features' eigenvalues, too large for a bound that pins anything. So the golden holds
the reference's code run twice: in float32 (its setting: the record of D19's difference) and with
JAX's 64-bit mode on, on the same features as float64 (the same formulas in the project's
precision: what the test compares). Two training sets: 8 shots of 5 classes (40 examples, 17
design columns: the primal form) and 2 shots (10 examples: the kernel form), one test set of
400, at every other l2 of V-MoE's grid 2^-10 ... 2^19.
"""
import numpy as np

REFERENCE = 'big_vision/evaluators/fewshot_lsr.py _precompute_cache, _eig_fewshot_acc_fn'

CLASSES, FEATURES, TEST = 5, 16, 400
SHOTS = (8, 2)
L2S = 2.0 ** np.arange(-10, 20, 2)


def features(rng, labels: np.ndarray) -> np.ndarray:
  """Class means in the first 6 features, blurred by correlated noise in all 16 (so that the
  accuracy moves with l2), offset and scaled unevenly (so that whitening matters)."""
  means = np.zeros((CLASSES, FEATURES))
  means[:, :6] = np.random.default_rng(0).normal(size=(CLASSES, 6))
  mixing = np.random.default_rng(1).normal(size=(FEATURES, FEATURES)) / 3
  x = means[labels] + rng.normal(size=(len(labels), FEATURES)) @ mixing
  return (x * np.linspace(0.5, 4, FEATURES) + 3).astype(np.float32)


def inputs() -> dict:
  rng = np.random.default_rng(553)
  arrays = {}
  for shots in SHOTS:
    labels = np.repeat(np.arange(CLASSES), shots).astype(np.int32)
    arrays[f'train{shots}_labels'] = labels
    arrays[f'train{shots}_features'] = features(rng, labels)
  test_labels = rng.integers(0, CLASSES, TEST).astype(np.int32)
  arrays.update(test_labels=test_labels, test_features=features(rng, test_labels))
  return arrays


def accuracies(fewshot, arrays: dict, shots: int, dtype) -> np.ndarray:
  """The reference's test accuracy at every l2 of L2S, features given as `dtype`."""
  cache = fewshot._precompute_cache(  # pylint: disable=protected-access
      arrays[f'train{shots}_features'].astype(dtype), arrays[f'train{shots}_labels'], CLASSES)
  return np.array([fewshot._eig_fewshot_acc_fn(  # pylint: disable=protected-access
      cache, arrays['test_features'].astype(dtype), arrays['test_labels'], l2) for l2 in L2S],
                  np.float64)


def generate(context) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  fewshot = context.module('big_vision.evaluators.fewshot_lsr', 'big_vision')
  arrays = inputs()
  for shots in SHOTS:
    arrays[f'train{shots}_accuracy_float32'] = accuracies(fewshot, arrays, shots, np.float32)
  jax.config.update('jax_enable_x64', True)
  context.patch('jax_enable_x64 set and float64 features given, for the float64 accuracies '
                '(the float32 ones are the reference as it runs)')
  for shots in SHOTS:
    arrays[f'train{shots}_accuracy_float64'] = accuracies(fewshot, arrays, shots, np.float64)
  arrays.update(l2=L2S, num_classes=np.int64(CLASSES))
  return arrays
