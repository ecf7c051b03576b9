"""Tests of precision@1 and the masked loss average, with hand-worked numbers."""
import jax.numpy as jnp
import numpy as np
import pytest

from evaluation import classify

LOGITS = np.array([[2., 1, 0],    # top-1: class 0
                   [0., 3, 1],    # top-1: class 1
                   [1., 0, 5],    # top-1: class 2
                   [4., 0, 0]])   # top-1: class 0


def test_precision_at_1_single_and_multi_label():
  # Single label 0, 2, 2, 1: hit, miss, hit, miss.
  np.testing.assert_array_equal(classify.precision_at_1(LOGITS, np.array([0, 2, 2, 1])),
                                [1, 0, 1, 0])
  # Multi-hot: a hit when the top-1 class is ANY true label.
  multi = np.array([[0, 1, 1], [0, 1, 1], [1, 0, 0], [1, 1, 0]], np.float32)
  np.testing.assert_array_equal(classify.precision_at_1(LOGITS, multi), [0, 1, 0, 1])


def true_class_logit_loss(logits, labels):
  """A loss simple enough to work by hand: minus the logit of the true class (or classes)."""
  return -jnp.sum(classify.targets(labels, logits.shape[-1]) * logits, axis=-1)


def batch(rows, labels, mask):
  return {'image': LOGITS[rows] if isinstance(rows, list) else rows, 'label': np.array(labels),
          'mask': np.array(mask, np.float32)}


def test_run_averages_over_unmasked_examples_of_all_batches():
  # Batch A: rows 0-3, labels 0, 2, 2, 1, the last row padding (mask 0): 2 hits of 3;
  #   losses -2, -1, -5 (minus the true class's logit).
  # Batch B: logits [0, 0, 9] label 2 (a hit, loss -9), then a padding row that would be a miss.
  # prec@1 = 3 / 4 = 0.75; loss = (-2 - 1 - 5 - 9) / 4 = -4.25.
  batches = [batch([0, 1, 2, 3], [0, 2, 2, 1], [1, 1, 1, 0]),
             batch(np.array([[0., 0, 9], [9., 0, 0]]), [2, 1], [1, 0])]
  evaluator = classify.ClassifyEvaluator(true_class_logit_loss)
  metrics = dict(evaluator.run(lambda images: images, batches))
  assert metrics['upstream/prec@1'] == pytest.approx(0.75)
  assert metrics['upstream/loss'] == pytest.approx(-4.25)


def test_run_with_one_hot_labels():
  # One-hot 'labels' (what the trainer's eval pp makes); 'val' prefix. Labels 0, 2, 2 (1 is
  # padding): hit, miss, hit; losses -2, -1, -5, mean -8 / 3.
  labels = np.eye(3, dtype=np.float32)[[0, 2, 2, 1]]
  batches = [{'image': LOGITS, 'labels': labels, 'mask': np.array([1, 1, 1, 0.])}]
  evaluator = classify.ClassifyEvaluator(true_class_logit_loss, prefix='val')
  metrics = dict(evaluator.run(lambda x: x, batches))
  assert metrics['val/prec@1'] == pytest.approx(2 / 3)
  assert metrics['val/loss'] == pytest.approx(-8 / 3)


def test_errors_say_what_is_wrong():
  evaluator = classify.ClassifyEvaluator(true_class_logit_loss)
  with pytest.raises(ValueError, match='no unmasked examples'):
    dict(evaluator.run(lambda x: x, [batch([0, 1], [0, 1], [0, 0])]))
  with pytest.raises(KeyError, match=r"missing \['mask'\]"):
    dict(evaluator.run(lambda x: x, [{'image': LOGITS, 'label': np.zeros(4, int)}]))
  with pytest.raises(ValueError, match='labels have 4 classes but the logits 3'):
    classify.precision_at_1(LOGITS, np.zeros((4, 4)))
