"""Tests of the mesh and sharding rules (one CPU device here; the 8-device tests live in issue 7's suite)."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vmoe import sharding


def mesh_config(data=-1, expert=1):
  return ml_collections.ConfigDict(dict(data=data, expert=expert))


def test_mesh_on_one_device():
  mesh = sharding.make_mesh(mesh_config())
  assert mesh.axis_names == ('data', 'expert') and mesh.devices.shape == (1, 1)


@pytest.mark.parametrize('data,expert,message', [
    (-1, 3, 'mesh.expert=3 must be >= 1 and divide the 2 devices'),
    (2, 2, r'data x expert = 2 x 2 does not match the 2 devices'),
])
def test_mesh_errors_name_the_flag(data, expert, message):
  devices = [jax.devices()[0]] * 2          # Two stand-in devices: only the arithmetic is checked.
  with pytest.raises(ValueError, match=message):
    sharding.make_mesh(mesh_config(data, expert), devices=devices)


def test_expert_weights_shard_over_the_expert_axis_and_the_rest_replicates():
  tree = {'block_01': {'moe': {'experts': {'wi': jnp.ones((4, 2, 3)), 'bi': jnp.ones((4, 3))},
                               'router': {'kernel': jnp.ones((2, 4))}}},
          'head': {'kernel': jnp.ones((2, 5))}, 'step': jnp.zeros(())}
  specs = jax.tree_util.tree_map_with_path(sharding.leaf_spec, tree)
  assert specs['block_01']['moe']['experts'] == {'wi': P('expert'), 'bi': P('expert')}
  assert specs['block_01']['moe']['router']['kernel'] == P()
  assert specs['head']['kernel'] == P() and specs['step'] == P()


def test_put_batch_assembles_the_global_batch():
  mesh = sharding.make_mesh(mesh_config())
  batch = sharding.put_batch({'image': np.ones((4, 2), np.float32)}, sharding.batch_sharding(mesh))
  assert batch['image'].shape == (4, 2) and batch['image'].sharding.spec == P(('data', 'expert'))
