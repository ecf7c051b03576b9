"""Tests of the classification losses, with hand-worked numbers."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.train import losses

LOGITS = np.array([[2., 1, 0]])


def test_per_example_losses_hand_worked():
  # softmax: log(e^2 + e + 1) - 2 = log(11.1073) - 2 = 0.40761.
  np.testing.assert_allclose(losses.softmax_xent(LOGITS, np.array([0])), [0.40761], atol=1e-5)
  # sigmoid, labels [0, 1, 1]: softplus(2) + softplus(1) + softplus(0) - (1 + 0)
  #   = 2.12693 + 1.31326 + 0.69315 - 1 = 3.13334.
  np.testing.assert_allclose(losses.sigmoid_xent(LOGITS, np.array([[0., 1, 1]])), [3.13334],
                             atol=1e-5)


def test_softmax_xent_hand_worked():
  # logits [0, 0] and one-hot [1, 0]: -log(1/2) = 0.693147.
  loss = losses.classification_loss(jnp.zeros((1, 2)), jnp.array([[1.0, 0.0]]), 'softmax_xent')
  np.testing.assert_allclose(loss, math.log(2), rtol=1e-6)


def test_sigmoid_xent_sums_classes_and_averages_examples():
  # Head bias -10 (the V-MoE init): each negative class costs log(1 + e^-10) = 4.54e-5, the
  # positive one log(1 + e^10) = 10.0000454; two examples with 3 classes, one positive each.
  logits = jnp.full((2, 3), -10.0)
  labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
  expected = math.log1p(math.exp(10)) + 2 * math.log1p(math.exp(-10))
  np.testing.assert_allclose(losses.classification_loss(logits, labels, 'sigmoid_xent'),
                             expected, rtol=1e-6)


def test_unknown_loss_fails_listing_the_valid_ones():
  with pytest.raises(ValueError, match="unknown loss 'mse'; valid: softmax_xent, sigmoid_xent"):
    losses.classification_loss(jnp.zeros((1, 2)), jnp.zeros((1, 2)), 'mse')
