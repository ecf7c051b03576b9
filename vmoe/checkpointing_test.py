"""Tests of orbax checkpointing: round trip, keep-N, nothing to restore."""
import os

import jax
import jax.numpy as jnp
import numpy as np

from vmoe import checkpointing


def test_round_trip_keeps_the_last_n(tmp_path):
  state = {'params': {'w': jnp.arange(6.0).reshape(2, 3)}, 'step': jnp.array(0)}
  config = checkpointing.CheckpointConfig(every_steps=1, keep=2)
  manager = checkpointing.make_manager(str(tmp_path), config)
  assert checkpointing.restore_latest(manager, jax.eval_shape(lambda: state)) is None
  for step in (1, 2, 3):
    state = jax.tree.map(lambda x: x + 1, state)
    checkpointing.save(manager, step, state, {'data': {'position': step}, 'eval_history': []})
  manager.wait_until_finished()
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', '3']
  abstract = checkpointing.abstract_with_shardings(
      jax.eval_shape(lambda: state),
      jax.tree.map(lambda x: x.sharding, state))
  restored, record = checkpointing.restore_latest(checkpointing.make_manager(str(tmp_path), config),
                                                  abstract)
  np.testing.assert_array_equal(restored['params']['w'], state['params']['w'])
  assert record == {'data': {'position': 3}, 'eval_history': []}
