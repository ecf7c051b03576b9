"""How every benchmark times (`time_ms`, `interleaved`) and what it records of the machine.

A ratio between two rows is comparable only within one result file: files made at other times or
on other CPUs differ (the small per-expert matmuls of a sparse MoE layer run at another speed
relative to one dense matmul with AVX-512 than without), hence `cpu_model` and `cpu_flags`.
"""
import statistics
import time

import jax

from base import atomic
from base import host

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


def machine() -> dict:
  """What a result file records of the machine it was measured on: the host (base/host.py) and
  JAX's devices."""
  return {**host.host(), 'device': str(jax.devices()[0].device_kind),
          'num_devices': jax.device_count(), 'jax': jax.__version__}


def write_result(path: str, rows: list, method: str, **fields) -> None:
  """Writes a benchmark's result file atomically: the machine it ran on (machine()), its rows,
  how they were timed, and any other fields (ratios, targets)."""
  atomic.write_json(path, {'machine': machine(), 'rows': rows, **fields, 'method': method})
