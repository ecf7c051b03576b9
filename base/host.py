"""What a result records of the host it ran on: the platform, the cores, the CPU model and its
SIMD extensions.

A ratio between two timings, and a float result, is comparable only on one CPU kind: the small
per-expert matmuls of a sparse MoE layer run at another speed relative to one dense matmul with
AVX-512 than without, and XLA:CPU compiles other float arithmetic for each (a training run on
another CPU kind is another seed, not a bit-identical copy). Benchmark files and summary.json
record `cpu_model` and `cpu_flags` for that.
"""
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
