"""How many pytest-xdist workers `make test` starts: one per usable core, as many as the memory
holds, and 2 under CI.

  python -m testing.workers                      prints the count (the Makefile's `-n`)
  python -m testing.workers measure -- CMD ...   runs CMD; prints its process tree's peak RSS

Usable cores are those the process may run on (its affinity mask), fewer where a cgroup's CPU
quota allows less; os.cpu_count() counts the machine's, which a container or `taskset` may not
give. Usable memory is MemAvailable, less where a cgroup limits it. A worker needs
WORKER_PEAK_BYTES: its own peak with the subprocesses that its tests start beside it (main.py
processes, the 8-device step). CI's machine has 2 cores, and its suite runs as it always has.
"""
import os
import subprocess
import sys
import time

from base import host

CI_WORKERS = 2
# One worker's peak RSS, its subprocesses included: `measure` on
# `pytest -p no:xdist main_test.py vmoe/train/multidevice_test.py vmoe/train/trainer_test.py`, the
# files whose tests start subprocesses beside the test process (main_test.py starts every case's
# main.py at once), peaked at PEAK_MEASURED bytes (3.78 GiB). A worker that ran other tests first
# holds more of its own (compiled programs, caches): WORKER_PEAK_BYTES, 5 GiB, leaves about a third
# for that.
PEAK_MEASURED = 4_063_965_184
WORKER_PEAK_BYTES = 5 * 2**30
# A cgroup v1 memory limit at or above this means none (the kernel writes about 2**63).
_NO_LIMIT = 2**60


def cgroup_memory(memory_max: str | None, limit_in_bytes: str | None) -> int | None:
  """A cgroup's memory limit in bytes, or None without one: v2's memory.max ('max': none), else
  v1's memory.limit_in_bytes."""
  text = memory_max if memory_max is not None else limit_in_bytes
  if text is None or text.strip() == 'max' or int(text) >= _NO_LIMIT:
    return None
  return int(text)


def mem_available(meminfo: str) -> int:
  """MemAvailable of /proc/meminfo's text, in bytes."""
  return host.meminfo_bytes(meminfo, 'MemAvailable')


def worker_count(cores: int, memory: int, ci: bool, peak: int = WORKER_PEAK_BYTES) -> int:
  """CI_WORKERS under CI; else one worker per core, at most as many as `memory` holds workers of
  `peak` bytes, and at least one."""
  if ci:
    return CI_WORKERS
  return max(1, min(cores, memory // peak))


def usable_memory() -> int:
  """MemAvailable, or the cgroup's limit where that is less."""
  available = mem_available(host.read_text('/proc/meminfo') or '')
  limit = cgroup_memory(host.read_text('/sys/fs/cgroup/memory.max'),
                        host.read_text('/sys/fs/cgroup/memory/memory.limit_in_bytes'))
  return available if limit is None else min(available, limit)


def is_ci(environ=os.environ) -> bool:
  """CI set to anything but '', '0' or 'false' (.ci/run sets CI=true)."""
  return environ.get('CI', '').strip().lower() not in ('', '0', 'false')


def _tree_rss(root: int) -> int:
  """The summed RSS of `root` and its descendants now, in bytes (Linux /proc)."""
  parents, rss = {}, {}
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    status = host.read_text(f'/proc/{entry}/status') or ''
    fields = dict(line.split(':', 1) for line in status.splitlines() if ':' in line)
    if 'PPid' in fields:
      parents[int(entry)] = int(fields['PPid'])
      rss[int(entry)] = int(fields.get('VmRSS', '0 kB').split()[0]) * 1024
  tree, grew = {root}, True
  while grew:
    new = {pid for pid, parent in parents.items() if parent in tree} - tree
    tree, grew = tree | new, bool(new)
  return sum(rss.get(pid, 0) for pid in tree)


def measure(command: list[str], interval: float = 0.2) -> int:
  """Runs `command` and returns its process tree's peak summed RSS, sampled every `interval` s."""
  process = subprocess.Popen(command)
  peak = 0
  while process.poll() is None:
    peak = max(peak, _tree_rss(process.pid))
    time.sleep(interval)
  if process.returncode:
    raise SystemExit(f'{" ".join(command)} exited with status {process.returncode}')
  return peak


def main(argv: list[str]) -> None:
  if argv[:2] == ['measure', '--'] and len(argv) > 2:
    peak = measure(argv[2:])
    print(f'peak RSS of the process tree: {peak} bytes ({peak / 2**30:.2f} GiB)')
  elif not argv:
    print(worker_count(host.usable_cores(), usable_memory(), is_ci()))
  else:
    print('usage: python -m testing.workers [measure -- COMMAND ...]', file=sys.stderr)
    raise SystemExit(2)


if __name__ == '__main__':
  main(sys.argv[1:])
