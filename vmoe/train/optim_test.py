"""Tests of the schedule and the optimizer."""
import types

import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.train import optim
from vmoe.train import optim_config


def config(**schedule):
  return types.SimpleNamespace(
      num_train_steps=100,
      schedule=optim_config.ScheduleConfig(**dict(dict(peak_lr=1e-3, warmup_steps=10, end_lr=1e-5),
                                           **schedule)),
      optimizer=optim_config.OptimizerConfig(b1=0.9, b2=0.999, weight_decay=0.1,
                                             grad_clip_norm=1.0))


def test_sections_check_their_values():
  with pytest.raises(ValueError, match='optimizer.b1=1.5'):
    optim_config.OptimizerConfig(weight_decay=0.1, b1=1.5)
  with pytest.raises(ValueError, match='peak_lr > 0'):
    optim_config.ScheduleConfig(peak_lr=0.0, warmup_steps=1)


def test_schedule_warms_up_then_decays_linearly():
  schedule = optim.make_schedule(config().schedule, 100)
  # Warm-up: 0 -> 1e-3 over 10 steps; decay: 1e-3 -> 1e-5 over the remaining 90.
  np.testing.assert_allclose([schedule(0), schedule(5), schedule(10)], [0, 5e-4, 1e-3], rtol=1e-6)
  np.testing.assert_allclose(schedule(55), 1e-3 + 0.5 * (1e-5 - 1e-3), rtol=1e-5)
  np.testing.assert_allclose(schedule(100), 1e-5, rtol=1e-5)


def test_weight_decay_only_on_kernels():
  params = {'embedding': {'kernel': jnp.ones((2, 2)), 'bias': jnp.ones(2)},
            'moe': {'experts': {'wi': jnp.ones((2, 2, 2)), 'bi': jnp.ones((2, 2))}},
            'pos_embedding': jnp.ones((1, 2))}
  mask = optim.decay_mask(params)
  assert mask == {'embedding': {'kernel': True, 'bias': False},
                  'moe': {'experts': {'wi': True, 'bi': False}}, 'pos_embedding': False}


def test_decay_is_decoupled_scaled_by_the_learning_rate_and_kernel_only():
  c = config()
  tx, _ = optim.make_optimizer(c.optimizer, c.schedule, c.num_train_steps)
  params = {'kernel': jnp.ones(3), 'bias': jnp.ones(3)}
  state = tx.init(params)
  zero = {'kernel': jnp.zeros(3), 'bias': jnp.zeros(3)}
  for _ in range(2):  # Zero gradients: Adam's step is 0, only the decay moves the kernel.
    updates, state = tx.update(zero, state, params)
    params = optim.optax.apply_updates(params, updates)
  # Update 1 uses lr(0) = 0; update 2 uses lr(1) = 1e-4: kernel 1 - 1e-4 * 0.1 * 1 = 0.99999.
  np.testing.assert_allclose(params['kernel'], 0.99999, rtol=1e-7)
  np.testing.assert_array_equal(params['bias'], 1.0)
