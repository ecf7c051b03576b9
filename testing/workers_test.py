"""The worker count of `make test`: cgroup quotas and limits as the kernel writes them, the count's
rule, and the process-tree measurement behind WORKER_PEAK_BYTES."""
import subprocess
import sys

import pytest

from testing import workers

GIB = 2**30


def test_cgroup_memory():
  assert workers.cgroup_memory('8589934592', None) == 8 * GIB
  assert workers.cgroup_memory('max', '1024') is None             # v2's file decides.
  assert workers.cgroup_memory(None, '4294967296') == 4 * GIB
  assert workers.cgroup_memory(None, '9223372036854771712') is None   # v1's "unlimited".
  assert workers.cgroup_memory(None, None) is None


def test_mem_available_reads_kib():
  meminfo = 'MemTotal:       32768000 kB\nMemFree:  100 kB\nMemAvailable:   24044724 kB\n'
  assert workers.mem_available(meminfo) == 24044724 * 1024


@pytest.mark.parametrize('cores, memory, ci, count', [
    (16, 64 * GIB, False, 16),     # 64 GiB hold 21 workers of 3 GiB: the cores decide.
    (16, 8 * GIB, False, 2),       # 8 // 3 = 2 workers: the memory decides.
    (1, 64 * GIB, False, 1),
    (16, 1 * GIB, False, 1),       # Less than one worker's peak still runs one.
    (16, 64 * GIB, True, 2),       # CI: always 2.
    (1, 1 * GIB, True, 2)])
def test_worker_count(cores, memory, ci, count):
  assert workers.worker_count(cores, memory, ci, peak=3 * GIB) == count


def test_ci_is_any_value_but_empty_zero_or_false():
  assert workers.is_ci({'CI': 'true'}) and workers.is_ci({'CI': '1'})
  assert not any(workers.is_ci(env) for env in ({}, {'CI': ''}, {'CI': '0'}, {'CI': 'False'}))


def test_the_peak_is_the_measurement_rounded_up():
  assert workers.PEAK_MEASURED <= workers.WORKER_PEAK_BYTES <= 2 * workers.PEAK_MEASURED


def test_measure_counts_a_subprocess_beside_its_parent():
  # The parent holds 200 MiB while its child holds 200 MiB: the tree's peak is over 400 MiB,
  # more than either process's own (what ru_maxrss would report).
  hold = 'b = b"x" * (200 * 2**20); import time; time.sleep({})'
  parent = (f'import subprocess, sys; {hold.format(0)}; '
            f'subprocess.run([sys.executable, "-c", {hold.format(1.5)!r}], check=True)')
  peak = workers.measure([sys.executable, '-c', parent], interval=0.05)
  assert 400 * 2**20 < peak < 600 * 2**20    # Plus two interpreters' own RSS (~10 MiB each).


def test_the_command_prints_a_count():
  out = subprocess.run([sys.executable, '-m', 'testing.workers'], capture_output=True, text=True,
                       check=True, env={'CI': 'true', 'PATH': ''},
                       cwd=workers.__file__.rsplit('/testing/', 1)[0])
  assert out.stdout == '2\n'
