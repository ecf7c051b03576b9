"""Tests of the routing maps: each token's expert, hand-worked; the checkpoint path orbax gets."""
import os

import numpy as np
import pytest

from results import routing_maps
from vmoe.routing import router as router_lib


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


def test_a_relative_runs_directory_restores_from_an_absolute_path(tmp_path, monkeypatch):
  # make demo passes --runs workdirs/demo/tiny; orbax refuses a relative checkpoint path.
  (tmp_path / 'runs' / 'a_run' / routing_maps.CHECKPOINTS / '3000').mkdir(parents=True)
  monkeypatch.chdir(tmp_path)
  restored = []

  class Checkpointer:
    def restore(self, path):
      restored.append(path)
      raise RuntimeError('restored')

  monkeypatch.setattr(routing_maps, 'recorded_experiment', lambda workdir: None)
  monkeypatch.setattr(routing_maps.ocp, 'StandardCheckpointer', Checkpointer)
  with pytest.raises(RuntimeError, match='restored'):
    routing_maps.route_images(os.path.join('runs', 'a_run'), np.zeros((1, 28, 28, 1)))
  checkpoint = tmp_path / 'runs' / 'a_run' / routing_maps.CHECKPOINTS / '3000' / 'state'
  assert restored == [str(checkpoint)]
