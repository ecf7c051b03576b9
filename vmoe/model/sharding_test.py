"""Tests of the mesh, sharding rules and multi-process start on this process's one CPU device.

The 8-device expert-parallel step is in vmoe/train/multidevice_test.py; two processes training
together are in launch/distributed_test.py.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vmoe.model import mesh_config as mesh_config_lib
from vmoe.model import sharding


def mesh_config(data=-1, expert=1):
  return mesh_config_lib.MeshConfig(data=data, expert=expert)


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


@pytest.mark.parametrize('data,expert,devices,experts,resolved', [
    (-1, -1, 1, 32, (1, 1)),       # One device: 1 x 1, as data-parallel.
    (-1, -1, 8, 32, (1, 8)),       # Fewer devices than experts: every device on 'expert'.
    (-1, -1, 64, 32, (2, 32)),     # More: one expert per device, the rest on 'data'.
    (-1, -1, 6, 32, (3, 2)),       # gcd(6, 32) = 2.
    (-1, -1, 8, 0, (8, 1)),        # A dense model has no experts to split.
    (2, -1, 8, 32, (2, 4)),        # mesh.data set: 'expert' takes the devices data leaves.
    (-1, 1, 8, 32, (8, 1)),        # mesh.expert = 1: data-parallel only.
    (2, 4, 8, 32, (2, 4)),         # Numbers stay.
])
def test_resolve_gives_the_automatic_sizes_numbers(data, expert, devices, experts, resolved):
  resolved_mesh = mesh_config_lib.resolve(mesh_config(data, expert), devices, experts)
  assert resolved_mesh == mesh_config(*resolved)


@pytest.mark.parametrize('data,expert,message', [
    (3, -1, r'mesh data x expert = 3 x 2 does not match the 8 devices; set --config.mesh.data=-1'),
    (16, -1, r'mesh data x expert = 16 x 1 does not match the 8 devices'),
    (-1, 3, r'mesh.expert=3 must be >= 1 and divide the 8 devices; set --config.mesh.expert'),
])
def test_resolve_errors_name_the_flag(data, expert, message):
  with pytest.raises(ValueError, match=message):
    mesh_config_lib.resolve(mesh_config(data, expert), 8, 32)


@pytest.mark.parametrize('data,expert', [(-1, 0), (-1, -2), (0, -1)])
def test_mesh_sizes_are_positive_or_automatic(data, expert):
  with pytest.raises(ValueError, match=f'mesh.data={data} and mesh.expert={expert}: use'):
    mesh_config(data, expert)


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


def test_mesh_errors_name_the_flag_when_experts_do_not_split():
  with pytest.raises(ValueError, match=r'6 experts do not split over mesh.expert=4 devices; set '
                                       r'--config.mesh.expert to a divisor of 6'):
    mesh_config_lib.resolve(mesh_config(1, 4), 4, 6)


def test_constrain_is_the_identity_without_a_mesh_and_a_constraint_with_one():
  x = jnp.ones((4, 2))
  assert sharding.constrain(x, sharding.BATCH) is x     # No mesh in context: nothing to do.
  mesh = sharding.make_mesh(mesh_config())
  lowered = jax.jit(sharding.with_mesh(lambda y: sharding.constrain(y, sharding.BATCH) * 2,
                                       mesh)).lower(x)
  assert 'sharding_constraint' in lowered.as_text()
  missing_axis = jax.jit(sharding.with_mesh(lambda y: sharding.constrain(y, P('model')), mesh))
  assert 'sharding_constraint' not in missing_axis.lower(x).as_text()


@pytest.fixture
def started(monkeypatch):
  """Records jax.distributed.initialize calls instead of starting a coordinator."""
  calls = []
  monkeypatch.setattr(jax.distributed, 'initialize', lambda *args: calls.append(args))
  for name in ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID', 'SLURM_NTASKS',
               'SLURM_STEP_NODELIST'):
    monkeypatch.delenv(name, raising=False)
  return calls


def test_one_process_starts_nothing(started):
  sharding.initialize_distributed()
  assert started == []


def test_explicit_processes_from_arguments_or_environment(started, monkeypatch):
  sharding.initialize_distributed('localhost:1234', 2, 1)
  monkeypatch.setenv('JAX_COORDINATOR_ADDRESS', 'host0:999')
  monkeypatch.setenv('JAX_NUM_PROCESSES', '4')
  monkeypatch.setenv('JAX_PROCESS_ID', '3')
  sharding.initialize_distributed()
  assert started == [('localhost:1234', 2, 1), ('host0:999', 4, 3)]


def test_explicit_coordinator_without_a_process_id_says_what_to_pass(started):
  with pytest.raises(ValueError, match=r'num_processes=2 and process_id=-1; pass --num_processes'):
    sharding.initialize_distributed('localhost:1234', 2)
  assert started == []


def test_a_slurm_step_of_several_tasks_lets_jax_find_everything(started, monkeypatch):
  monkeypatch.setenv('SLURM_NTASKS', '1')
  monkeypatch.setenv('SLURM_STEP_NODELIST', 'node[01-02]')
  sharding.initialize_distributed()          # One task: one process with every local GPU.
  monkeypatch.setenv('SLURM_NTASKS', '16')
  assert sharding.cluster() == 'slurm'
  sharding.initialize_distributed()
  assert started == [()]


def test_jax_still_has_its_cloud_tpu_flag():
  # sharding.cluster reads this private flag; a jax upgrade that drops it must fail here.
  from jax._src import cloud_tpu_init   # pylint: disable=import-outside-toplevel
  assert cloud_tpu_init.running_in_cloud_tpu_vm is False
