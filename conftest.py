"""Settings of every test session, applied before any test module imports jax.

Most of the suite's time is XLA:CPU compiling small functions, so tests run under the fast-compile
flags (base/fast_compile.py), a good trade for tests. Every comparison in a test runs both sides
under the same flags, and subprocesses that tests start inherit them. Benchmarks run as their own
processes (python -m bench.NAME) and do not see them.

The session also shares one JAX persistent compilation cache, in a fresh directory: many tests
and their main.py subprocesses compile the same programs (the tiny config's step and
evaluations), and each program then compiles once per session. A cache hit is the executable
that the first compile wrote, under the same flags (part of the cache key), so runs that a test
compares bit for bit stay comparable. Every entry is kept (no minimum compile time): under the
fast-compile flags most programs compile in under the default second.

The `hard_deadline` fixture is testing/watchdog.py's backstop for tests of background threads;
`once_per_session` shares a costly result among the session's pytest-xdist workers;
`tiny_experiment` builds configs/tiny.py's record for the end-to-end tests under vmoe/, which do
not import configs/ (imports go configs -> vmoe, never back). `pytest --cpu-report=FILE`
(testing/cpu_report.py) writes what each test costs in CPU, its subprocesses included.
"""
import fcntl
import functools
import glob
import json
import os
import shutil
import sys
import tempfile

import pytest

from base import atomic
from base import fast_compile
from testing import watchdog

pytest_plugins = ('testing.cpu_report',)     # pytest --cpu-report=FILE
os.environ['XLA_FLAGS'] = f'{os.environ.get("XLA_FLAGS", "")} {fast_compile.as_xla_flags()}'.strip()
_STDERR = []   # A copy of the session's real stderr, made before pytest captures it.
# The session's compilation cache: made by the process pytest started, before any jax import;
# pytest-xdist's workers and every subprocess inherit the environment.
_OWN_CACHE = not os.environ.get('PYTEST_XDIST_WORKER')
_CACHE_PREFIX = 'vmoe-test-jax-cache-'


def _fresh_cache_dir() -> str:
  """TMPDIR/vmoe-test-jax-cache-PID, emptied; the caches of sessions whose process is gone
  (killed before pytest_unconfigure removed theirs) are removed first."""
  root = tempfile.gettempdir()
  for stale in glob.glob(os.path.join(root, f'{_CACHE_PREFIX}*')):
    pid = os.path.basename(stale)[len(_CACHE_PREFIX):]
    if not (pid.isdigit() and _alive(int(pid))):
      shutil.rmtree(stale, ignore_errors=True)
  path = os.path.join(root, f'{_CACHE_PREFIX}{os.getpid()}')
  shutil.rmtree(path, ignore_errors=True)
  os.makedirs(path)
  return path


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:      # Another user's process.
    return True
  return True


if _OWN_CACHE:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = _fresh_cache_dir()
  os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'


def pytest_addoption(parser):
  parser.addoption(
      '--router-module', default='', metavar='PATH',
      help='A .py file or dotted module that registers routers of your own (docs/routers.md): '
           'it is imported before collection, and only the shared per-router checks (marked '
           'per_router) run, on the routers it registers.')


def pytest_configure(config):
  # pytest-xdist's mark, known also when a run goes without it (-p no:xdist).
  config.addinivalue_line('markers', 'xdist_group(name): run on the same pytest-xdist worker')
  config.addinivalue_line('markers', 'per_router(argname): a check every router must pass, '
                          'parametrised by router name in ARGNAME (pytest --router-module)')
  _STDERR.append(os.dup(2))
  module = config.getoption('router_module')
  if module:
    # After XLA_FLAGS above; the registry holds the built-in routers first.
    from vmoe.routing import registry   # pylint: disable=import-outside-toplevel
    from vmoe.routing import user_module   # pylint: disable=import-outside-toplevel
    try:
      user_module.import_router_module(module)
    except ValueError as e:
      raise pytest.UsageError(str(e)) from None
    config.user_routers = sorted(set(registry.ROUTERS) - registry.BUILT_IN)
    if not config.user_routers:
      raise pytest.UsageError(f'--router-module={module} registers no router of its own.')


@pytest.fixture(autouse=True)
def _registry_keeps_its_built_in_routers(request):
  """After each test, the router declarations and registry hold the built-in routers (and
  --router-module's) alone: a test that declares a router of its own (docs/example_router.py's
  ema_tc) leaves no trace for the tests that list the routers later in the same worker. Neither
  is imported here: a test that never loaded them has nothing to clean."""
  yield
  keep = set(getattr(request.config, 'user_routers', ()))
  for table in (('vmoe.routing.declarations', 'DECLARED'), ('vmoe.routing.registry', 'ROUTERS')):
    module = sys.modules.get(table[0])
    routers = getattr(module, table[1], {})
    for name in set(routers) - keep - set(getattr(module, 'BUILT_IN', ())):
      del routers[name]
  loader = sys.modules.get('vmoe.routing.user_module')
  if loader is not None and not keep:
    for module in [m for m in sys.modules if m.startswith(loader.USER_MODULE_PREFIX)]:
      del sys.modules[module]


def _router_of(item) -> str | None:
  """The router a per_router check's instance tests: its parameter named by the marker, up to
  a case suffix such as '_no_softmax_combine'."""
  marker = item.get_closest_marker('per_router')
  callspec = getattr(item, 'callspec', None)
  if marker is None or callspec is None:
    return None
  return callspec.params.get(marker.args[0])


def pytest_collection_modifyitems(config, items):
  """With --router-module, keeps the per_router checks of the module's routers alone."""
  routers = getattr(config, 'user_routers', None)
  if routers is None:
    return
  kept = [item for item in items if _router_of(item) in routers]
  config.hook.pytest_deselected(items=[item for item in items if item not in kept])
  items[:] = kept


def pytest_unconfigure(config):
  del config
  if _OWN_CACHE:
    shutil.rmtree(os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)


@pytest.fixture
def hard_deadline():
  """watchdog.hard_deadline(seconds) writing to the real stderr: during a test, fd 2 goes to a
  capture file that dies with the process."""
  return functools.partial(watchdog.hard_deadline, file=_STDERR[0])


@pytest.fixture(scope='session')
def once_per_session(tmp_path_factory):
  """once(name, compute) -> compute()'s JSON-able result, computed once per test session.

  For results that cost minutes of subprocesses (vmoe/train/multidevice_test.py, main_test.py).
  Under pytest-xdist every worker that gets a test needing the result asks for it: the first to take
  a lock in the session's shared temporary directory computes it and leaves it there as NAME.json;
  the others wait for the lock and read it. A result computed in process would keep the waiting
  workers idle: it belongs in a session fixture instead, whose tests carry one
  pytest.mark.xdist_group, which `make test`'s --dist loadgroup runs on one worker
  (vmoe/train/trainer_test.py's short_run, launch/plan_test.py's small_plan).
  """
  session_dir = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    session_dir = session_dir.parent          # .../pytest-N, above each worker's popen-gwK.

  def once(name: str, compute):
    path = session_dir / f'{name}.json'
    with open(session_dir / f'{name}.lock', 'w', encoding='utf-8') as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      if not path.exists():
        atomic.write_json(str(path), compute())
    return json.loads(path.read_text())
  return once


@pytest.fixture(scope='session')
def tiny_experiment():
  """build(arg='', overrides=None, num_devices=1) -> the Experiment of configs/tiny.py:ARG with
  `overrides` ({'dotted.key': value}, as --config.dotted.key=value) for `num_devices` devices."""
  from configs import common           # pylint: disable=import-outside-toplevel  (after XLA_FLAGS)
  from configs import tiny             # pylint: disable=import-outside-toplevel
  from vmoe.train import experiment as experiment_lib   # pylint: disable=import-outside-toplevel

  def build(arg: str = '', overrides: dict | None = None, num_devices: int = 1):
    config = common.override(tiny.get_config(arg), overrides or {})
    return experiment_lib.parse(config, num_devices=num_devices)
  return build
