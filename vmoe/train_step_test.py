"""Tests of the losses, mixup and the train step wrappers."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe import train_step


def test_softmax_xent_hand_worked():
  # logits [0, 0] and one-hot [1, 0]: -log(1/2) = 0.693147.
  loss = train_step.classification_loss(jnp.zeros((1, 2)), jnp.array([[1.0, 0.0]]), 'softmax_xent')
  np.testing.assert_allclose(loss, math.log(2), rtol=1e-6)


def test_sigmoid_xent_sums_classes_and_averages_examples():
  # Head bias -10 (the V-MoE init): each negative class costs log(1 + e^-10) = 4.54e-5, the
  # positive one log(1 + e^10) = 10.0000454; two examples with 3 classes, one positive each.
  logits = jnp.full((2, 3), -10.0)
  labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
  expected = math.log1p(math.exp(10)) + 2 * math.log1p(math.exp(-10))
  np.testing.assert_allclose(train_step.classification_loss(logits, labels, 'sigmoid_xent'),
                             expected, rtol=1e-6)


def test_unknown_loss_fails():
  with pytest.raises(ValueError, match="unknown loss 'mse'"):
    train_step.classification_loss(jnp.zeros((1, 2)), jnp.zeros((1, 2)), 'mse')


def test_mixup_mixes_images_and_labels_with_one_weight():
  batch = {'image': jnp.arange(3.0)[:, None], 'labels': jnp.eye(3)}
  mixed = train_step.mixup(batch, jax.random.PRNGKey(0), alpha=0.5)
  lam = float(mixed['labels'][0, 0])               # Example 0 mixes with example 2 (roll by 1).
  np.testing.assert_allclose(mixed['labels'][0], [lam, 0, 1 - lam], rtol=1e-6)
  np.testing.assert_allclose(mixed['image'][:, 0], lam * np.arange(3) + (1 - lam) * np.array([2, 0, 1]),
                             rtol=1e-6)
  np.testing.assert_allclose(mixed['labels'].sum(axis=1), 1.0, rtol=1e-6)


def test_with_mixup_keeps_the_signature_and_is_a_no_op_at_zero():
  seen = []
  def step(state, batch, rng):
    seen.append(batch)
    return state + 1, {'rng': rng}
  assert train_step.with_mixup(step, 0.0) is step
  wrapped = train_step.with_mixup(step, 0.2)
  state, metrics = wrapped(0, {'image': jnp.ones((2, 1)), 'labels': jnp.eye(2)}, jax.random.PRNGKey(1))
  assert state == 1 and 'rng' in metrics
  assert not np.allclose(seen[0]['labels'], np.eye(2))
