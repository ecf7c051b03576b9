"""XLA:TPU's compiler on a machine without a TPU (deviceless ahead-of-time compilation).

libtpu describes a TPU slice by its topology name ('v3:4x4' is a v3-32: 16 chips, 32 cores), and
`jit(...).lower(...).compile()` for those devices runs the TPU compiler itself: its fusion, its
memory-aware schedule, native bfloat16 and the rematerialisation it adds when a program would not
fit the chip. Nothing executes. launch/plan.py reads the memory_analysis() of such programs.

`make tpu-compiler` (which `make plan` runs first; `make install` leaves it out) puts libtpu
(requirements-tpu-compiler.txt: the version jax[tpu] pins) in COMPILER_DIR, off Python's path, and
this module points jax at its shared library alone, so that no other process of the project ever
tries to start a TPU backend.
"""
import functools
import os
import pathlib

COMPILER_DIR = pathlib.Path(__file__).resolve().parent.parent / '.venv' / 'tpu-compiler'
LIBRARY = COMPILER_DIR / 'libtpu' / 'libtpu.so'
# What a missing compiler's message says to do (tpu_compiler, launch/plan.py, plan_test).
MISSING = (f'no TPU compiler at {LIBRARY}: run `make tpu-compiler` (it installs '
           'requirements-tpu-compiler.txt there; `make install` leaves it out)')
# libtpu otherwise asks the GCE metadata server which TPU it runs on, and warns that it cannot.
_ENVIRONMENT = {'TPU_SKIP_MDS_QUERY': '1', 'TPU_WORKER_HOSTNAMES': 'localhost',
                # No chip is opened, so processes need not take turns (libtpu's lockfile).
                'ALLOW_MULTIPLE_LIBTPU_LOAD': '1'}


class NotInstalled(RuntimeError):
  """libtpu is not where `make tpu-compiler` puts it."""


def available() -> bool:
  return LIBRARY.is_file()


@functools.cache
def devices(topology: str) -> list:
  """The devices of TPU slice `topology` ('v3:4x4', 'v5p:2x2x2'): compile for them, never run.
  Described once per process: every row and precision of a slice compiles for the same ones."""
  if not available():
    raise NotInstalled(f'{MISSING}, or use --no-tpu-compiler.')
  os.environ.setdefault('TPU_LIBRARY_PATH', str(LIBRARY))
  for name, value in _ENVIRONMENT.items():
    os.environ.setdefault(name, value)
  from jax.experimental import topologies   # pylint: disable=import-outside-toplevel
  return list(topologies.get_topology_desc(topology_name=topology, platform='tpu').devices)

