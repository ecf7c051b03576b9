"""How every benchmark times (`time_ms`, `interleaved`) and what it records of the machine.

A ratio between two rows is comparable only within one result file: files made at other times or
on other CPUs differ (the small per-expert matmuls of a sparse MoE layer run at another speed
relative to one dense matmul with AVX-512 than without), hence `cpu_model` and `cpu_flags`.
"""
import os
import pathlib
import platform
import statistics
import time

import jax

# The SIMD extensions worth recording (x86 and Arm names in /proc/cpuinfo).
SIMD_PREFIXES = ('sse', 'ssse', 'avx', 'fma', 'amx', 'asimd', 'sve')


def time_ms(fn, *args, warmup: int, repeats: int) -> float:
  """Median wall-clock milliseconds of fn(*args) over `repeats` calls after `warmup` untimed ones
  (compilation included in those)."""
  for _ in range(warmup):
    jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append((time.perf_counter() - start) * 1e3)
  return statistics.median(times)


def interleaved(timers: list, rounds: int) -> list[dict[str, list[float]]]:
  """Each timer (a callable returning {name: ms}) called once per round, the timers in turn, so
  that a slow stretch of a shared machine hits every row alike; per timer, {name: [ms per
  round]}."""
  found = [{} for _ in timers]
  for _ in range(rounds):
    for timer, times in zip(timers, found):
      for name, ms in timer().items():
        times.setdefault(name, []).append(ms)
  return found


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


def host() -> dict:
  """The host's platform, core count, CPU model and SIMD extensions (None and [] where there is
  no /proc/cpuinfo)."""
  cpuinfo = pathlib.Path('/proc/cpuinfo')
  text = cpuinfo.read_text(encoding='utf-8') if cpuinfo.exists() else ''
  return {'platform': platform.platform(), 'cpu_count': os.cpu_count(), **cpu(text)}


def machine() -> dict:
  """What a result file records of the machine it was measured on: host() and JAX's devices."""
  return {**host(), 'device': str(jax.devices()[0].device_kind),
          'num_devices': jax.device_count(), 'jax': jax.__version__}
