"""pytest --cpu-report=FILE: the CPU seconds each test costs, its subprocesses' included.

Under pytest-xdist a test's wall time (--durations) counts the cores it shared with the other
worker and with subprocesses; on a 2-core machine the suite's time is its CPU over 2. FILE (JSON)
lists each test's CPU, the largest first: the test process's own (`own`: its setup, with the
session fixtures it is the first to need, call and teardown) and that of the subprocesses it
waited for (`children`); of its own, the seconds JAX spent tracing, lowering and compiling
(jax.monitoring events). Then each file's sums, and the suite's total. conftest.py registers
this plugin; without the option it does nothing.
"""
import collections
import json
import resource
import time

import pytest

from base import atomic

OPTION = '--cpu-report'
_JAX_EVENTS = {'/jax/core/compile/jaxpr_trace_duration': 'trace',
               '/jax/core/compile/jaxpr_to_mlir_module_duration': 'lower',
               '/jax/core/compile/backend_compile_duration': 'compile'}
_jax_seconds = collections.Counter()    # Since the current test started.
_start = {}
_records = {}                           # nodeid -> record (on the process that writes FILE).


def pytest_addoption(parser):
  parser.addoption(OPTION, metavar='FILE', default=None,
                   help='write each test\'s CPU seconds (own, subprocesses\', JAX compiles) '
                        'to FILE')


def _on_event(event: str, duration: float, **kwargs):
  del kwargs
  if event in _JAX_EVENTS:
    _jax_seconds[_JAX_EVENTS[event]] += duration


def _children_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  del nextitem
  if item.config.getoption(OPTION):
    if not _start:     # The first test of this process (a pytest-xdist controller runs none).
      import jax  # pylint: disable=import-outside-toplevel
      jax.monitoring.register_event_duration_secs_listener(_on_event)
    _jax_seconds.clear()
    _start.update(own=time.process_time(), children=_children_seconds())
  yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  # The teardown report is the test's last: the record rides on it, also to pytest-xdist's
  # controller.
  if call.when == 'teardown' and item.config.getoption(OPTION):
    own = time.process_time() - _start['own']
    children = _children_seconds() - _start['children']
    item.user_properties.append(('cpu_seconds', {
        'total': round(own + children, 3), 'own': round(own, 3), 'children': round(children, 3),
        **{name: round(_jax_seconds[name], 3) for name in _JAX_EVENTS.values()}}))
  yield


def pytest_runtest_logreport(report):
  if report.when == 'teardown':
    for name, record in report.user_properties:
      if name == 'cpu_seconds':
        _records[report.nodeid] = record


def pytest_sessionfinish(session):
  path = session.config.getoption(OPTION)
  if not path or hasattr(session.config, 'workerinput'):    # A pytest-xdist worker.
    return
  # Every sum runs over the tests in the order FILE lists them, so a reader who adds up the
  # listed tests gets the very floats written here.
  by_total = lambda pair: -pair[1]['total']
  records = sorted(_records.items(), key=by_total)
  files = collections.defaultdict(collections.Counter)
  for nodeid, record in records:
    files[nodeid.split('::')[0]].update(record)
  atomic.write_json(path, {
      'total': round(sum(r['total'] for _, r in records), 1),
      'files': [{'file': f, **{k: round(v, 1) for k, v in sums.items()}}
                for f, sums in sorted(files.items(), key=by_total)],
      'tests': [{'test': t, **r} for t, r in records]})
