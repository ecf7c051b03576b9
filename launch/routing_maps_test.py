"""Tests of the routing maps: each token's expert, hand-worked; the checkpoint a map reads."""
import os

import jax
import numpy as np
import pytest

from base import errors
from launch import routing_maps
from results import tables
from testing import checkpoint_faults
from vmoe.routing import router as router_lib
from vmoe.run import checkpointing
from vmoe.train import train_program
from vmoe.train import workdir as workdir_lib


def test_sparse_routing_gives_each_token_its_strongest_expert_or_none():
  # One group of 2 images x 2 tokens (S = 4 marks an empty slot).
  # Token 0: expert 0 (0.7) and expert 1 (0.2) -> expert 0. Token 1: expert 1 only. Token 2:
  # no slot (dropped / unchosen). Token 3: expert 0 (0.4) and expert 1 (0.6) -> expert 1.
  # E = 2 experts with C = 3 slots each (expert 0's third slot is empty): (G=1, E=2, C=3).
  slot_token = np.array([[[0, 3, 4], [1, 0, 3]]])
  slot_weight = np.array([[[0.7, 0.4, 0.0], [0.5, 0.2, 0.6]]])
  route = router_lib.SparseRouting(slot_token, slot_weight)
  expert, weight = routing_maps.token_experts(route, images=2, tokens_per_image=2)
  np.testing.assert_array_equal(expert, [[0, 1], [routing_maps.NO_EXPERT, 1]])
  np.testing.assert_allclose(weight, [[0.7, 0.5], [0.0, 0.6]])


def test_soft_routing_gives_each_token_the_expert_of_its_largest_dispatch_weight():
  # One image of 2 tokens, E = 2 experts x C = 2 slots; dispatch (G, S, E, C), columns over tokens.
  dispatch = np.array([[[[0.9, 0.2], [0.3, 0.5]],
                        [[0.1, 0.8], [0.7, 0.5]]]])
  route = router_lib.DenseRouting(dispatch, dispatch)
  expert, weight = routing_maps.token_experts(route, images=1, tokens_per_image=2)
  np.testing.assert_array_equal(expert, [[0, 0]])      # 0.9 at (0, 0); 0.8 at (0, 1).
  np.testing.assert_allclose(weight, [[0.9, 0.8]])


def saved_run(workdir, experiment, steps):
  """A workdir as a run leaves it: its config.json and checkpoints of `steps` (state: the fresh
  initialisation, step s's parameters scaled by s); returns the model and each step's
  parameters."""
  workdir_lib.claim(str(workdir), experiment)
  program = train_program.build(experiment)
  state = program.init_state(jax.random.PRNGKey(0))
  manager = checkpointing.make_manager(str(workdir), experiment.checkpoint)
  params = {}
  for step in steps:
    params[step] = jax.tree.map(lambda p, s=step: p * s, state.params)
    checkpointing.save(manager, step, state.replace(params=params[step]), {})
  checkpointing.wait_until_finished(manager)
  return program.model, params


def test_routes_with_the_newest_intact_checkpoint_and_moves_nothing(tmp_path, monkeypatch,
                                                                     tiny_experiment):
  # make demo passes --runs workdirs/demo/tiny: a relative path, which orbax refuses.
  experiment = tiny_experiment('router=softmax_tc')
  model, params = saved_run(tmp_path / 'runs' / 'a_run', experiment, [1, 2])
  checkpoints = tmp_path / 'runs' / 'a_run' / 'checkpoints'
  checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(str(checkpoints / '2')))
  monkeypatch.chdir(tmp_path)
  images = routing_maps.test_images(experiment.moe.group_size)
  layers = routing_maps.route_images(os.path.join('runs', 'a_run'), images)
  assert sorted(os.listdir(checkpoints)) == ['1', '2']     # The corrupt step 2 stays in place.
  # Step 1's parameters route the images, exactly as the model routes them given those.
  expected = routing_maps.routes(model, {'params': params[1]}, images)
  assert [layer.block for layer in layers] == list(expected) and expected
  for layer, route in zip(layers, expected.values()):
    expert, _ = routing_maps.token_experts(route, images.shape[0], layer.expert.shape[1])
    np.testing.assert_array_equal(layer.expert, expert)
    assert layer.expert.shape == (images.shape[0], 16 + 1)   # 4x4 patches and the class token.


def test_a_run_with_no_intact_checkpoint_is_a_user_error(tmp_path, tiny_experiment):
  experiment = tiny_experiment('router=softmax_tc')
  saved_run(tmp_path, experiment, [1])
  checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(
      str(tmp_path / 'checkpoints' / '1')))
  with pytest.raises(errors.UserError, match='No checkpoint in .* reads back intact'):
    routing_maps.route_images(str(tmp_path), routing_maps.test_images(4))


@pytest.mark.parametrize('tool', [routing_maps.main, tables.main])
def test_a_missing_runs_directory_is_one_message_and_exit_2(tmp_path, capsys, tool):
  missing = str(tmp_path / 'no_runs')
  status = errors.run_tool(lambda: tool(['--runs', missing, '--out', str(tmp_path / 'out')]))
  assert status == 2
  assert capsys.readouterr().err == (f'Error: --runs {missing!r} is not a directory; pass the '
                                     "sweep's workdir root.\n")
