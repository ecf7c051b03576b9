"""`config.mesh`: the devices along 'data' and 'expert', and the arithmetic that resolves them,
free of JAX (configs/ build `config.mesh` from `MeshConfig`; sharding.py makes the mesh)."""
import dataclasses
import math


AUTO = -1   # mesh.data / mesh.expert: a number `resolve` works out from the devices (and experts).


@dataclasses.dataclass(frozen=True)
class MeshConfig:
  """`config.mesh`: the devices along 'data' and along 'expert'; `resolve` makes both numbers.

  data: devices along 'data'; -1 (AUTO): all the devices that 'expert' leaves.
  expert: devices along 'expert', which split the experts; 1 is data-parallel only. -1 (AUTO): as
    many as both the device and the expert count allow, gcd(devices, experts) (1 for a dense
    model), the reference's num_expert_partitions = num_experts capped at the devices (V-MoE's
    partitioning.get_auto_logical_mesh); with mesh.data set, the devices that data leaves.
  """
  data: int = AUTO
  expert: int = 1

  def __post_init__(self):
    if any(n < 1 and n != AUTO for n in (self.data, self.expert)):
      raise ValueError(f'mesh.data={self.data} and mesh.expert={self.expert}: use mesh.expert >= 1 '
                       'and mesh.data >= 1, or -1 for the automatic sizes.')


def mesh_shape(mesh_config: MeshConfig, num_devices: int) -> tuple[int, int]:
  """(data, expert) of a `config.mesh` with a number of expert devices (see `resolve` for -1) over
  `num_devices`; fails naming the flag when they differ.

  Arithmetic only, so that vmoe/train/experiment.py checks a config before anything compiles.
  """
  expert = mesh_config.expert
  if expert < 1 or num_devices % expert:
    raise ValueError(f'mesh.expert={expert} must be >= 1 and divide the {num_devices} devices; '
                     f'set --config.mesh.expert to a divisor of {num_devices}.')
  data = num_devices // expert if mesh_config.data == AUTO else mesh_config.data
  if data * expert != num_devices:
    raise ValueError(f'mesh data x expert = {data} x {expert} does not match the {num_devices} '
                     'devices; set --config.mesh.data=-1 to use all remaining devices.')
  return data, expert


def resolve(mesh_config: MeshConfig, num_devices: int, num_experts: int) -> MeshConfig:
  """`config.mesh` with numbers for its automatic (-1) sizes on `num_devices` devices and
  `num_experts` experts (0: a dense model); fails, naming the flag, where they do not fit: the
  mesh must use every device, and its 'expert' axis must split the experts evenly.

  Arithmetic only: vmoe/train/experiment.py `parse` resolves the mesh of every run (and of
  launch/plan.py's slices) before anything compiles; the shardings then trust it.
  """
  expert = mesh_config.expert
  if expert == AUTO and mesh_config.data != AUTO:
    expert = max(1, num_devices // mesh_config.data)     # mesh_shape checks data x expert.
  elif expert == AUTO:
    expert = math.gcd(num_devices, num_experts) if num_experts > 0 else 1
  data, expert = mesh_shape(dataclasses.replace(mesh_config, expert=expert), num_devices)
  if num_experts % expert:
    raise ValueError(f'moe.num_experts={num_experts} experts do not split over '
                     f'mesh.expert={expert} devices; set --config.mesh.expert to a divisor of '
                     f'{num_experts}.')
  return MeshConfig(data, expert)
