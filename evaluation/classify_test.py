"""Tests of precision@1 and the masked loss average, with hand-worked numbers."""
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


def test_losses_hand_worked():
  # softmax: log(e^2 + e + 1) - 2 = log(11.1073) - 2 = 0.40761.
  np.testing.assert_allclose(classify.softmax_xent(LOGITS[:1], np.array([0])), [0.40761],
                             atol=1e-5)
  # sigmoid, labels [0, 1, 1]: softplus(2) + softplus(1) + softplus(0) - (1 + 0)
  #   = 2.12693 + 1.31326 + 0.69315 - 1 = 3.13334.
  np.testing.assert_allclose(
      classify.sigmoid_xent(LOGITS[:1], np.array([[0., 1, 1]])), [3.13334], atol=1e-5)


def batch(rows, labels, mask):
  return {'image': LOGITS[rows] if isinstance(rows, list) else rows, 'label': np.array(labels),
          'mask': np.array(mask, np.float32)}


def test_run_averages_over_unmasked_examples_of_all_batches():
  # Batch A: rows 0-3, labels 0, 2, 2, 1, the last row padding (mask 0): 2 hits of 3;
  #   losses log(11.107) - 2 = 0.40761, log(1 + e^3 + e) - 1 = 3.16985 - 1 = 2.16985,
  #   log(e + 1 + e^5) - 5 = 0.02474.
  # Batch B: logits [0, 0, 9] label 2 (a hit, loss log(2 + e^9) - 9 = 0.000247), then a padding
  #   row that would be a miss.
  # prec@1 = 3 / 4 = 0.75; loss = (0.40761 + 2.16985 + 0.02474 + 0.000247) / 4 = 0.65061.
  batches = [batch([0, 1, 2, 3], [0, 2, 2, 1], [1, 1, 1, 0]),
             batch(np.array([[0., 0, 9], [9., 0, 0]]), [2, 1], [1, 0])]
  evaluator = classify.ClassifyEvaluator('softmax_xent')
  metrics = dict(evaluator.run(lambda images: images, batches))
  assert metrics['upstream/prec@1'] == pytest.approx(0.75)
  assert metrics['upstream/loss'] == pytest.approx(0.65061, abs=1e-5)


def test_run_with_one_hot_labels_and_sigmoid_loss():
  # One-hot 'labels' (what the trainer's eval pp makes); 'val' prefix.
  labels = np.eye(3, dtype=np.float32)[[0, 2, 2, 1]]
  batches = [{'image': LOGITS, 'labels': labels, 'mask': np.array([1, 1, 1, 0.])}]
  metrics = dict(classify.ClassifyEvaluator('sigmoid_xent', prefix='val').run(lambda x: x, batches))
  assert metrics['val/prec@1'] == pytest.approx(2 / 3)
  expected = np.mean([np.sum(np.logaddexp(0, z) - y * z) for z, y in zip(LOGITS[:3], labels[:3])])
  assert metrics['val/loss'] == pytest.approx(expected, rel=1e-5)


def test_errors_say_what_is_wrong():
  with pytest.raises(ValueError, match='valid: softmax_xent, sigmoid_xent'):
    classify.ClassifyEvaluator('hinge')
  evaluator = classify.ClassifyEvaluator('softmax_xent')
  with pytest.raises(ValueError, match='no unmasked examples'):
    dict(evaluator.run(lambda x: x, [batch([0, 1], [0, 1], [0, 0])]))
  with pytest.raises(KeyError, match=r"missing \['mask'\]"):
    dict(evaluator.run(lambda x: x, [{'image': LOGITS, 'label': np.zeros(4, int)}]))
  with pytest.raises(ValueError, match='labels have 4 classes but the logits 3'):
    classify.precision_at_1(LOGITS, np.zeros((4, 4)))
