"""The checkpoint's RunRecord keeps one segment per process lifetime that trained steps."""
import dataclasses

import jax

from vmoe.model import mesh_config
from vmoe.model import sharding
from vmoe.train import loop_actions

EIGHT = {'mesh': {'data': 2, 'expert': 4}, 'num_devices': 8, 'device_kind': 'cpu'}
FOUR = {'mesh': {'data': 1, 'expert': 4}, 'num_devices': 4, 'device_kind': 'cpu'}


def test_saves_extend_a_process_segment_and_a_resumed_process_adds_one():
  record = loop_actions.RunRecord()
  # The first process trains from step 1 and saves at 10 and 20, on 8 devices.
  record.trained(1, 10, EIGHT)
  record.trained(1, 20, EIGHT)
  assert record.segments == [{'first_step': 1, 'last_step': 20, **EIGHT}]
  # Its checkpoint of step 20 is resumed on 4 devices, which train from step 21 and save at 30
  # and 35; the record goes through the checkpoint's JSON as a dict.
  resumed = loop_actions.RunRecord(**dataclasses.asdict(record))
  resumed.trained(21, 30, FOUR)
  resumed.trained(21, 35, FOUR)
  assert resumed.segments == [{'first_step': 1, 'last_step': 20, **EIGHT},
                              {'first_step': 21, 'last_step': 35, **FOUR}]
  assert record.segments == [{'first_step': 1, 'last_step': 20, **EIGHT}]   # Not shared.


def test_a_record_written_before_segments_existed_reads_with_none():
  assert loop_actions.RunRecord(data=None, train_seconds=3.0, eval_history=[]).segments == []


def test_devices_of_a_mesh():
  mesh = sharding.make_mesh(mesh_config.MeshConfig(1, 1), jax.devices()[:1])
  assert loop_actions.devices_of(mesh) == {
      'mesh': {'data': 1, 'expert': 1}, 'num_devices': 1,
      'device_kind': jax.devices()[0].device_kind}


def test_router_health_is_the_mean_of_the_logged_steps_and_survives_a_resume():
  # Two logged steps, then a resume through the checkpoint's JSON, then a third: the means are
  # over all three, per block; other metrics (losses, experts per token) are not health.
  record = loop_actions.RunRecord()
  step = lambda dropped, unfilled, bias: {
      'loss': 2.0, 'router/block_01/dropped_tokens': dropped,
      'router/block_01/unfilled_slots': unfilled, 'router/block_01/state_bias_range': bias,
      'router/block_01/experts_per_token_mean': 1.5, 'router/block_03/dropped_tokens': 0.0}
  record.add_health(step(0.1, 0.2, 0.0))
  record.add_health(step(0.3, 0.0, 0.01))
  resumed = loop_actions.RunRecord(**dataclasses.asdict(record))
  resumed.add_health(step(0.2, 0.1, 0.02))
  means = resumed.health_means()
  assert set(means) == {'block_01', 'block_03'}
  assert means['block_01'].keys() == {'dropped_tokens', 'unfilled_slots', 'state_bias_range',
                                      'logged_steps'}
  assert means['block_01']['logged_steps'] == 3 and means['block_03']['logged_steps'] == 3
  for name, expected in (('dropped_tokens', 0.2), ('unfilled_slots', 0.1),
                         ('state_bias_range', 0.01)):
    assert abs(means['block_01'][name] - expected) < 1e-12
  assert loop_actions.RunRecord(data=None).health_means() == {}


def test_the_loop_state_resumes_the_clock_and_checks_its_pending_losses_once():
  record = loop_actions.RunRecord(train_seconds=12.5)
  loop = loop_actions.LoopState.resuming(record, first_step=20, num_steps=100)
  assert (loop.clock.seconds, loop.last_saved, loop.first_trained) == (12.5, 20, 21)
  loop.stepped(21, 0.5)
  loop.stepped(22, float('nan'))
  loop.stepped(23, float('inf'))
  bad = loop.take_first_non_finite()
  assert bad[0] == 22 and bad[1] != bad[1]          # The first bad one: NaN at step 22.
  assert loop.pending == [] and loop.take_first_non_finite() is None
