"""Device mesh and shardings (JAX's own SPMD: jax.sharding, no home-made layer).

The mesh has two axes: 'data' and 'expert'. Images are split over both (every device sees its own
images); experts' stacked weights are split over 'expert' along their leading E axis; everything
else is replicated. On one device this is a 1x1 mesh, so the same code path runs everywhere.
"""
import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

BATCH_AXES = ('data', 'expert')


def make_mesh(mesh_config, devices=None) -> Mesh:
  """Mesh of shape (data, expert) from `config.mesh`; data=-1 takes all remaining devices."""
  devices = np.asarray(jax.devices() if devices is None else devices)
  expert = mesh_config.expert
  if expert < 1 or devices.size % expert:
    raise ValueError(f'mesh.expert={expert} must be >= 1 and divide the {devices.size} devices; '
                     f'set --config.mesh.expert to a divisor of {devices.size}.')
  data = devices.size // expert if mesh_config.data == -1 else mesh_config.data
  if data * expert != devices.size:
    raise ValueError(f'mesh data x expert = {data} x {expert} does not match the {devices.size} '
                     'devices; set --config.mesh.data=-1 to use all remaining devices.')
  return Mesh(devices.reshape(data, expert), ('data', 'expert'))


def _path_names(path) -> list:
  return [str(getattr(k, 'key', getattr(k, 'name', k))) for k in path]


def leaf_spec(path, leaf) -> P:
  """Expert weights (under an 'experts' module, leading axis E) go over 'expert'; the rest replicate."""
  if 'experts' in _path_names(path) and getattr(leaf, 'ndim', 0) >= 1:
    return P('expert')
  return P()


def tree_shardings(tree, mesh: Mesh):
  """NamedShardings for a (possibly abstract) pytree: parameters, optimizer state, train state."""
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: NamedSharding(mesh, leaf_spec(path, leaf)), tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batches are split along their leading axis over every device of the mesh."""
  return NamedSharding(mesh, P(BATCH_AXES))


def put_batch(batch: dict, sharding: NamedSharding) -> dict:
  """Assembles a global batch from this process's local numpy batch."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def local_batch_size(global_batch_size: int) -> int:
  """Images this process feeds per step; the global batch must split evenly over processes."""
  if global_batch_size % jax.process_count():
    raise ValueError(f'batch_size={global_batch_size} must be divisible by the '
                     f'{jax.process_count()} processes.')
  return global_batch_size // jax.process_count()
