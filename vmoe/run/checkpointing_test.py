"""Tests of orbax checkpointing: round trip, keep-N, nothing to restore, corrupt checkpoints, a full
disk."""
import os
import re
from typing import Any

from absl import logging
import flax
import jax
import jax.numpy as jnp
import numpy as np
from orbax.checkpoint._src.serialization import serialization as orbax_serialization
import pytest

from base import errors
from data.datasets import sources
from data.stream import pipeline
from testing import checkpoint_faults
from testing import full_disk
from testing import watchdog
from testing.data import data_config
from vmoe.run import checkpoint_config
from vmoe.run import checkpointing

EVERY_STEP = checkpoint_config.CheckpointConfig(every_steps=1)   # Save at every step.


def test_round_trip_keeps_the_last_n(tmp_path):
  state = {'params': {'w': jnp.arange(6.0).reshape(2, 3)}, 'step': jnp.array(0)}
  config = checkpoint_config.CheckpointConfig(every_steps=1, keep=2)
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


def state_at(step: int) -> dict:
  """A state that differs at every step; its 60,000 floats compress to one ~160 kB file."""
  return {'params': {'w': jnp.arange(60_000.0).reshape(200, 300) * step},
          'step': jnp.array(step)}


def save_steps(workdir, steps) -> checkpoint_config.CheckpointConfig:
  """Saves state_at(s) for each step s, with keep = 2 (the default); returns the config."""
  config = checkpoint_config.CheckpointConfig(every_steps=1)
  manager = checkpointing.make_manager(str(workdir), config)
  for step in steps:
    checkpointing.save(manager, step, state_at(step), {'data': {'position': step}})
  manager.wait_until_finished()
  return config


def restore(workdir, config):
  """restore_latest through a new manager, as a resumed run does; (state, record) or None."""
  abstract = checkpointing.abstract_with_shardings(
      jax.eval_shape(lambda: state_at(0)), jax.tree.map(lambda x: x.sharding, state_at(0)))
  return checkpointing.restore_latest(checkpointing.make_manager(str(workdir), config), abstract)


def assert_restored(restored, step):
  state, record = restored
  np.testing.assert_array_equal(state['params']['w'], state_at(step)['params']['w'])
  assert record == {'data': {'position': step}}    # The checksums stay in the checkpoint.


@pytest.mark.parametrize('damage', [checkpoint_faults.flip_bytes, checkpoint_faults.truncate,
                                    os.remove])
def test_a_corrupt_newest_checkpoint_is_set_aside_and_the_one_before_restored(
    tmp_path, monkeypatch, damage):
  # flip_bytes: TensorStore decompresses the chunk without error; only the checksums see it.
  config = save_steps(tmp_path, [1, 2])
  damage(checkpoint_faults.largest_array_file(str(tmp_path / 'checkpoints' / '2')))
  warnings = []
  monkeypatch.setattr(logging, 'warning', lambda *args: warnings.append(args[0] % args[1:]))
  assert_restored(restore(tmp_path, config), 1)
  assert len(warnings) == 1 and 'checkpoints/2 is corrupt' in warnings[0]
  assert 'moved it to corrupt-2' in warnings[0]
  # The step is trained and saved again; keep = 2 counts steps 1 and 2, never the corrupt copy.
  save_steps(tmp_path, [2, 3])
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', '3', 'corrupt-2']
  assert_restored(restore(tmp_path, config), 3)


def test_read_latest_skips_a_corrupt_checkpoint_and_moves_nothing(tmp_path, monkeypatch):
  save_steps(tmp_path / 'run', [1, 2])
  checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(
      str(tmp_path / 'run' / 'checkpoints' / '2')))
  warnings = []
  monkeypatch.setattr(logging, 'warning', lambda *args: warnings.append(args[0] % args[1:]))
  monkeypatch.chdir(tmp_path)                  # A relative workdir, as a tool's flag gives it.
  abstract = jax.eval_shape(lambda: state_at(0))
  step, state, record = checkpointing.read_latest('run', abstract)
  assert step == 1
  assert_restored((state, record), 1)
  assert sorted(os.listdir(tmp_path / 'run' / 'checkpoints')) == ['1', '2']
  assert len(warnings) == 1 and 'checkpoints/2 is corrupt' in warnings[0]
  assert 'left in place' in warnings[0]
  checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(
      str(tmp_path / 'run' / 'checkpoints' / '1')))
  assert checkpointing.read_latest('run', abstract) is None
  assert checkpointing.read_latest('elsewhere', abstract) is None     # No checkpoints at all.
  assert not os.path.exists(tmp_path / 'elsewhere')


@flax.struct.dataclass
class StateBefore:
  """A train state as checkpoints held it before a field was added."""
  params: Any
  step: Any


@flax.struct.dataclass
class StateAfter:
  """StateBefore with one more top-level field, as a train state that gained a field."""
  params: Any
  step: Any
  router_state: Any


def grown(step: int) -> StateAfter:
  """state_at(step) with a router_state field whose values differ from any saved leaf's."""
  return StateAfter(**state_at(step), router_state={'bias': jnp.arange(4.0) - 7})


def restore_grown(workdir, fresh_state=None):
  """restore_latest of `grown`'s layout through a new manager; (state, record) or None."""
  manager = checkpointing.make_manager(str(workdir), EVERY_STEP)
  return checkpointing.restore_latest(manager, jax.eval_shape(lambda: grown(0)), fresh_state)


def test_a_field_added_to_the_state_restores_at_its_fresh_value(tmp_path, monkeypatch):
  monkeypatch.setattr(checkpointing, 'FIELDS_ADDED', ('router_state',))
  manager = checkpointing.make_manager(str(tmp_path), EVERY_STEP)
  for step in (1, 2):
    checkpointing.save(manager, step, StateBefore(**state_at(step)), {'data': {'position': step}})
  manager.wait_until_finished()
  state, record = restore_grown(tmp_path, fresh_state=lambda: grown(0))
  np.testing.assert_array_equal(state.params['w'], state_at(2)['params']['w'])
  np.testing.assert_array_equal(state.router_state['bias'], [-7, -6, -5, -4])
  assert int(state.step) == 2 and record == {'data': {'position': 2}}
  # The checksums still cover the leaves the checkpoint holds: a damaged one is still corrupt.
  checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(
      str(tmp_path / 'checkpoints' / '2')))
  state, _ = restore_grown(tmp_path, fresh_state=lambda: grown(0))
  assert int(state.step) == 1
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['1', 'corrupt-2']


@pytest.mark.parametrize('target, message', [
    # Not in FIELDS_ADDED: the new field's leaf is named as missing.
    (lambda: grown(0), r"1 leaf missing from it \(router_state/bias\)\."),
    (lambda: {'params': {}, 'step': jnp.array(0)},
     r"1 leaf not in this run's state \(params/w\)\."),
    (lambda: {**state_at(0), 'params': {'w': jnp.zeros((300, 200))}},
     r'1 leaf of another shape or dtype \(params/w\)\.'),
])
def test_a_checkpoint_of_another_tree_is_a_user_error_and_stays_in_place(tmp_path, target,
                                                                         message, monkeypatch):
  monkeypatch.setattr(checkpointing, 'FIELDS_ADDED', ())
  save_steps(tmp_path, [1])
  manager = checkpointing.make_manager(str(tmp_path), EVERY_STEP)
  with pytest.raises(errors.UserError, match=r'^Checkpoint .*checkpoints/1 holds another state '
                                             r"than this run's: " + message + r' It was written '
                                             r'by another config or code version') as error:
    checkpointing.restore_latest(manager, jax.eval_shape(target))
  assert '\n' not in str(error.value)
  assert os.listdir(tmp_path / 'checkpoints') == ['1']


def test_a_tree_mismatch_names_the_first_leaves_and_counts_them(tmp_path):
  manager = checkpointing.make_manager(str(tmp_path), EVERY_STEP)
  checkpointing.save(manager, 1, {f'w{i}': jnp.zeros(2) for i in range(5)}, {})
  manager.wait_until_finished()
  with pytest.raises(errors.UserError, match=r"1 leaf missing from it \(v\); 5 leaves not in "
                                             r"this run's state \(w0, w1, w2, \.\.\.\)\. It"):
    checkpointing.restore_latest(manager, jax.eval_shape(lambda: {'v': jnp.zeros(2)}))


def test_a_save_killed_midway_is_ignored_or_set_aside(tmp_path):
  config = save_steps(tmp_path, [1, 2, 3])
  checkpoint_faults.leave_half_written(str(tmp_path / 'checkpoints' / '3'), final=False)
  assert_restored(restore(tmp_path, config), 2)        # orbax skips its temporary directory ...
  save_steps(tmp_path, [3])                            # ... and replaces it when saving step 3.
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', '3']
  checkpoint_faults.leave_half_written(str(tmp_path / 'checkpoints' / '3'), final=True)
  assert_restored(restore(tmp_path, config), 2)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['2', 'corrupt-3']


def test_no_readable_checkpoint_says_what_to_delete(tmp_path):
  config = save_steps(tmp_path, [1, 2])
  for step in ('1', '2'):
    checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(
        str(tmp_path / 'checkpoints' / step)))
  with pytest.raises(errors.UserError, match=r'No readable checkpoint in .*checkpoints: '
                                             r'corrupt-2, corrupt-1 could not be read back.*'
                                             r'delete .*checkpoints'):
    restore(tmp_path, config)
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['corrupt-1', 'corrupt-2']


def test_fifty_async_saves_finish_while_the_input_pipeline_runs(tmp_path, hard_deadline):
  # Issue 19: an asynchronous save was once seen never to finish while tf.data ran (its autotuner,
  # now off: data/stream/reader.py parallel_calls). Each save runs while training batches are read
  # and an evaluation iterator is made and dropped, as between the trainer's checkpoints; each must
  # finish within 20 s, or the stacks of all threads go to stderr and the test fails. (About 30 s
  # in all on an idle 2-core CPU; no bound on the total, which a loaded machine would break.)
  config = data_config(name='fashion_mnist', train_split='train[:4096]', eval_split='test[:64]',
                       shuffle_buffer=4096, cache=True)
  sources.check_available(config)
  train = pipeline.make_train_iterator(config, batch_size=64, seed=0)
  manager = checkpointing.make_manager(str(tmp_path), EVERY_STEP)
  with hard_deadline(300):     # If a hang holds the GIL, wait_until cannot run.
    for step in range(1, 51):
      checkpointing.save(manager, step, state_at(step), {'data': train.get_state()})
      for _ in range(4):
        next(train)
      next(iter(pipeline.make_eval_iterator(config, config.eval_split, batch_size=64)))
      watchdog.wait_until(lambda: not manager.is_saving_in_progress(), seconds=20,
                          what=f'the asynchronous save of step {step}')
    manager.wait_until_finished()        # Raises what a save may have raised.
  assert manager.all_steps() == [49, 50]
  state, record = restore(tmp_path, checkpoint_config.CheckpointConfig(every_steps=1))
  np.testing.assert_array_equal(state['params']['w'], state_at(50)['params']['w'])
  assert record['data']['batches'] == 49 * 4


def test_a_full_disk_during_a_save_is_one_user_error_and_the_checkpoint_before_restores(
    tmp_path, monkeypatch):
  # The checkpoints on a 1 MiB file system, full once step 1 is saved; where one cannot be mounted,
  # orbax's array writer fails as TensorStore does on a full disk.
  disk = tmp_path / 'disk'
  with full_disk.small_disk(disk, 2**20) as kind:
    config = save_steps(disk, [1])
    if kind == full_disk.TMPFS:
      full_disk.fill(disk / 'checkpoints')
    else:
      async def fails(*args, **kwargs):
        raise ValueError(f'RESOURCE_EXHAUSTED: Failed writing: {errors.NO_SPACE}')
      monkeypatch.setattr(orbax_serialization, 'async_serialize_from_host', fails)
    manager = checkpointing.make_manager(str(disk), config)
    with pytest.raises(errors.UserError) as error:
      checkpointing.save(manager, 2, state_at(2), {'data': {'position': 2}})
      checkpointing.wait_until_finished(manager)      # The error of the save in the background.
    directory = str(disk / 'checkpoints')
    assert str(error.value).startswith(f'No space left on the disk of {directory} while saving a '
                                       'checkpoint. The checkpoint of step 1 is intact')
    assert re.search(r'free at least 0\.\d MiB there \(the size of one checkpoint; the '
                     r'unfinished 2\.orbax-checkpoint-tmp can go too\)', str(error.value))
    monkeypatch.undo()
    assert_restored(restore(disk, config), 1)     # The unfinished step 2 is not a checkpoint.
