"""What a result records of the host it ran on (the platform, the cores, the CPU model and its
SIMD extensions), and the cores a process may use.

A ratio between two timings, and a float result, is comparable only on one CPU kind: the small
per-expert matmuls of a sparse MoE layer run at another speed relative to one dense matmul with
AVX-512 than without, and XLA:CPU compiles other float arithmetic for each (a training run on
another CPU kind is another seed, not a bit-identical copy). Benchmark files and summary.json
record `cpu_model` and `cpu_flags` for that.
"""
import math
import os
import pathlib
import platform

from base import revision

# The SIMD extensions worth recording (x86 and Arm names in /proc/cpuinfo).
SIMD_PREFIXES = ('sse', 'ssse', 'avx', 'fma', 'amx', 'asimd', 'sve')


def cpu(cpuinfo: str) -> dict:
  """{'cpu_model', 'cpu_flags'} from the text of /proc/cpuinfo: the first processor's model name
  and its SIMD extensions (SIMD_PREFIXES), sorted."""
  fields = {}
  for line in cpuinfo.splitlines():
    key, _, value = line.partition(':')
    fields.setdefault(key.strip(), value.strip())
  flags = (fields.get('flags') or fields.get('Features') or '').split()
  return {'cpu_model': fields.get('model name') or fields.get('Model'),
          'cpu_flags': sorted(f for f in flags if f.startswith(SIMD_PREFIXES))}


def this_cpu() -> dict:
  """cpu() of this machine (None and [] where there is no /proc/cpuinfo)."""
  cpuinfo = pathlib.Path('/proc/cpuinfo')
  return cpu(cpuinfo.read_text(encoding='utf-8') if cpuinfo.exists() else '')


def host() -> dict:
  """The host's platform, core count, CPU model and SIMD extensions, and the source's commit
  (base/revision.py): what every benchmark result file records of where it ran."""
  return {'platform': platform.platform(), 'cpu_count': os.cpu_count(), **this_cpu(),
          **revision.source_revision()}


def cgroup_cores(cpu_max: str | None, cfs_quota: str | None,
                 cfs_period: str | None) -> float | None:
  """The cores a cgroup's CPU quota allows, or None without a quota: cgroup v2's cpu.max
  ('QUOTA PERIOD' or 'max PERIOD'), else v1's cpu.cfs_quota_us (-1: none) / cpu.cfs_period_us."""
  if cpu_max is not None:
    quota, period = cpu_max.split()
    return None if quota == 'max' else int(quota) / int(period)
  if cfs_quota is not None and cfs_period is not None and int(cfs_quota) > 0:
    return int(cfs_quota) / int(cfs_period)
  return None


def meminfo_bytes(meminfo: str, field: str) -> int:
  """`field` (MemTotal, MemAvailable, ...) of /proc/meminfo's text, in bytes."""
  for line in meminfo.splitlines():
    if line.startswith(f'{field}:'):
      return int(line.split()[1]) * 1024
  raise ValueError(f'/proc/meminfo has no {field} line')


def read_text(path: str) -> str | None:
  """A small system file's stripped text, None where it cannot be read."""
  try:
    with open(path, encoding='ascii') as f:
      return f.read().strip()
  except OSError:
    return None


def usable_cores() -> int:
  """The cores this process may run on: its affinity mask's, fewer where the cgroup's CPU quota
  allows less (rounded down, at least 1). os.cpu_count() counts the machine's, which a
  container, `taskset` or Slurm may not give."""
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  quota = cgroup_cores(read_text('/sys/fs/cgroup/cpu.max'),
                       read_text('/sys/fs/cgroup/cpu/cpu.cfs_quota_us'),
                       read_text('/sys/fs/cgroup/cpu/cpu.cfs_period_us'))
  cores = cores or 1
  return cores if quota is None else max(1, min(cores, math.floor(quota)))


def processes_sharing_cores(environ=os.environ) -> int:
  """How many of the run's processes share this process's usable cores: 1 under Slurm's
  --cpus-per-task (each task's affinity mask is its own already), else the tasks per node
  (SLURM_NTASKS_PER_NODE), else launch/local.sh's processes on this host (JAX_NUM_PROCESSES with
  a localhost coordinator), else 1."""
  if environ.get('SLURM_CPUS_PER_TASK'):
    return 1
  per_node = environ.get('SLURM_NTASKS_PER_NODE', '').split('(')[0].split(',')[0]
  if per_node.isdigit() and int(per_node) > 0:
    return int(per_node)
  local = environ.get('JAX_COORDINATOR_ADDRESS', '').startswith(('localhost:', '127.0.0.1:'))
  count = environ.get('JAX_NUM_PROCESSES', '')
  return int(count) if local and count.isdigit() and int(count) > 0 else 1
