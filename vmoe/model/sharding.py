"""Device mesh, shardings and multi-process start (JAX's own SPMD: jax.sharding, jax.distributed).

The mesh has two axes: 'data' and 'expert'. Images are split over both (every device sees its own
images); experts' stacked weights are split over 'expert' along their leading E axis; everything
else is replicated. On one device this is a 1x1 mesh, so the same code path runs everywhere.

Expert parallelism is the compiler's: the MoE layer constrains its expert buffers (E, G, C, D) to
EXPERT_BUFFERS (E over 'expert', groups over 'data') and its output back to the batch sharding
(`constrain`), and XLA's SPMD partitioner moves the tokens between the two layouts with an
all-to-all over the 'expert' axis (checked in the compiled HLO by vmoe/train/multidevice_test.py).
"""
import functools
import os

import jax
from jax._src import cloud_tpu_init   # Only for `cluster`: is this a Cloud TPU VM?
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vmoe.model import mesh_config

BATCH_AXES = ('data', 'expert')
BATCH = P(BATCH_AXES)                   # Images (B, ...) and routing groups (G, S, D).
EXPERT_BUFFERS = P('expert', 'data')    # Expert buffers (E, G, C, D).


def make_mesh(mesh: mesh_config.MeshConfig, devices=None) -> Mesh:
  """Mesh of shape (data, expert) from `config.mesh` (a resolved one: mesh_config.resolve);
  data=-1 takes all remaining devices."""
  devices = np.asarray(jax.devices() if devices is None else devices)
  return Mesh(devices.reshape(mesh_config.mesh_shape(mesh, devices.size)), ('data', 'expert'))


def _path_names(path) -> list:
  return [str(getattr(k, 'key', getattr(k, 'name', k))) for k in path]


def leaf_spec(path, leaf) -> P:
  """Expert weights (under an 'experts' module, leading axis E) go over 'expert'; the rest
  replicate."""
  if 'experts' in _path_names(path) and getattr(leaf, 'ndim', 0) >= 1:
    return P('expert')
  return P()


def tree_shardings(tree, mesh: Mesh):
  """NamedShardings for a (possibly abstract) pytree: parameters, optimizer state, train state.

  The experts split evenly over the mesh's 'expert' axis: mesh_config.resolve checked it.
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: NamedSharding(mesh, leaf_spec(path, leaf)), tree)


def constrain(x: jax.Array, spec: P) -> jax.Array:
  """Constrains x to `spec` on the mesh in context (`with_mesh`); x itself when there is none.

  The layer code stays mesh-agnostic: without a mesh whose axes include spec's (a bare
  model.apply, a unit test) this is the identity.
  """
  mesh = jax.sharding.get_abstract_mesh()
  axes = {a for part in spec if part is not None
          for a in (part if isinstance(part, tuple) else (part,))}
  if mesh.empty or not axes <= set(mesh.axis_names):
    return x
  return jax.lax.with_sharding_constraint(x, spec)


def with_mesh(fn, mesh: Mesh):
  """fn, run with `mesh`'s axes in context so that `constrain` inside it takes effect.

  jax.sharding.use_abstract_mesh works both inside a traced function (a train step given to
  jax.jit) and around calls that trace their own jitted functions (an evaluation function).
  """
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)
  return wrapped


def per_device(fn):
  """fn applied to each device's own shard of a batch (a pytree of arrays whose leading axis is
  split over BATCH_AXES), as jax.shard_map under the mesh in context (`with_mesh`); fn on the
  whole batch where there is none. For per-example computations: each program then holds one
  device's examples, and the compiler cannot move examples between devices."""
  @functools.wraps(fn)
  def wrapped(batch):
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not set(BATCH_AXES) <= set(mesh.axis_names):
      return fn(batch)
    # check_vma=False: fn runs no collective, so every output varies over the devices as its
    # inputs do; the check would reject lax.cond branches where one returns a constant table.
    return jax.shard_map(fn, mesh=mesh, in_specs=(BATCH,), out_specs=BATCH,
                         check_vma=False)(batch)
  return wrapped


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batches are split along their leading axis over every device of the mesh."""
  return NamedSharding(mesh, BATCH)


def batch_shards(mesh: Mesh) -> int:
  """Pieces `batch_sharding` cuts a batch into: consecutive chunks, one per device."""
  return int(np.prod([mesh.shape[axis] for axis in BATCH_AXES]))


def put_batch(batch: dict, sharding: NamedSharding) -> dict:
  """Assembles a global batch from this process's local numpy batch."""
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def cluster() -> str | None:
  """'slurm' or 'tpu' when jax.distributed.initialize() can find its arguments itself, else None.

  SLURM: a job step (srun) of several tasks, one process per GPU: jax reads the coordinator from
  SLURM_STEP_NODELIST and the process id from SLURM_PROCID, and gives each process the GPU of its
  SLURM_LOCALID. Cloud TPU VM: jax's own verdict, taken at import (libtpu installed and TPU chips
  on the PCI bus; a private flag, so sharding_test checks that it still exists); jax then asks the
  VM's metadata server for the workers, on a single-host slice too.
  """
  if int(os.environ.get('SLURM_NTASKS', '1')) > 1 and 'SLURM_STEP_NODELIST' in os.environ:
    return 'slurm'
  if cloud_tpu_init.running_in_cloud_tpu_vm:
    return 'tpu'
  return None


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
  """Starts jax.distributed when this is one of several processes; call before touching devices.

  Explicit (several processes without a cluster manager, e.g. launch/local.sh): the coordinator's
  host:port (argument or JAX_COORDINATOR_ADDRESS), the number of processes (or JAX_NUM_PROCESSES)
  and this process's id (or JAX_PROCESS_ID); JAX_LOCAL_DEVICE_IDS (read by jax) picks this
  process's GPUs. Automatic inside a SLURM job step or on a Cloud TPU VM (`cluster`). Otherwise one
  process owns all local devices and nothing starts. On CPU, processes run collectives through
  gloo, jax 0.10.2's default jax_cpu_collectives_implementation.
  """
  address = coordinator_address or os.environ.get('JAX_COORDINATOR_ADDRESS')
  if not address:
    if cluster() is not None:
      jax.distributed.initialize()
    return
  count = num_processes if num_processes is not None else int(
      os.environ.get('JAX_NUM_PROCESSES', '0'))
  index = process_id if process_id is not None else int(os.environ.get('JAX_PROCESS_ID', '-1'))
  if count < 1 or not 0 <= index < count:
    raise ValueError(f'coordinator {address} given, but num_processes={count} and process_id='
                     f'{index}; pass --num_processes=N and --process_id in [0, N) (or set '
                     'JAX_NUM_PROCESSES and JAX_PROCESS_ID).')
  jax.distributed.initialize(address, count, index)
