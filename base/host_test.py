"""The host record: the CPU model and its SIMD extensions, read from /proc/cpuinfo's text."""
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
