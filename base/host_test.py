"""The host record: the CPU model and its SIMD extensions, read from /proc/cpuinfo's text."""
import os

import pytest

from base import host

X86 = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 avx avx2 avx512f avx512bw amx_tile aes
processor\t: 1
model name\t: another model
flags\t\t: fpu
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes sve sve2
CPU implementer\t: 0x41
"""


def test_cpu_keeps_the_first_model_and_its_simd_extensions():
  assert host.cpu(X86) == {
      'cpu_model': 'Intel(R) Xeon(R) Platinum 8480+',
      'cpu_flags': ['amx_tile', 'avx', 'avx2', 'avx512bw', 'avx512f', 'fma', 'sse', 'sse2',
                    'sse4_1', 'ssse3']}
  assert host.cpu(ARM) == {'cpu_model': None, 'cpu_flags': ['asimd', 'sve', 'sve2']}
  assert host.cpu('') == {'cpu_model': None, 'cpu_flags': []}


def test_this_host_has_a_platform_cores_and_a_list_of_extensions():
  record = host.host()
  assert set(record) == {'platform', 'cpu_count', 'cpu_model', 'cpu_flags', 'commit',
                         'uncommitted_changes'}
  assert record['cpu_count'] >= 1 and isinstance(record['cpu_flags'], list)


@pytest.mark.parametrize('cpu_max, cfs_quota, cfs_period, cores', [
    ('400000 100000', None, None, 4.0),         # v2: 400 ms of CPU per 100 ms period.
    ('150000 100000', None, None, 1.5),
    ('max 100000', None, None, None),           # v2 without a quota.
    (None, '200000', '100000', 2.0),            # v1.
    (None, '-1', '100000', None),               # v1 without a quota.
    (None, None, None, None)])                  # No cgroup files.
def test_cgroup_cores(cpu_max, cfs_quota, cfs_period, cores):
  assert host.cgroup_cores(cpu_max, cfs_quota, cfs_period) == cores


def test_usable_cores_are_the_affinity_masks_at_most():
  assert 1 <= host.usable_cores() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize('environ, processes', [
    ({}, 1),
    ({'SLURM_NTASKS_PER_NODE': '8', 'SLURM_CPUS_PER_TASK': '24'}, 1),   # The mask is per task.
    ({'SLURM_NTASKS_PER_NODE': '8'}, 8),
    ({'SLURM_NTASKS_PER_NODE': '4(x2)'}, 4),
    ({'JAX_COORDINATOR_ADDRESS': 'localhost:1234', 'JAX_NUM_PROCESSES': '2'}, 2),   # local.sh
    ({'JAX_COORDINATOR_ADDRESS': '10.0.0.1:1234', 'JAX_NUM_PROCESSES': '64'}, 1)])  # A pod.
def test_processes_sharing_cores(environ, processes):
  assert host.processes_sharing_cores(environ) == processes
