"""Config files are data: every file in configs/, with its arguments, loads and builds its config
without JAX or TensorFlow, and so does the reporting that `make tables` runs.

Each check runs in one fresh interpreter (the test process has JAX loaded already), which loads
everything it checks and then lists the modules it imported.
"""
import json
import os
import pathlib
import subprocess
import sys

from configs import common
from testing import layers
from vmoe.routing import declarations

REPO = pathlib.Path(__file__).resolve().parent.parent
# Files of configs/ that build no config: the shared recipe and helpers.
HELPERS = {'__init__.py', 'common.py', 'blocks.py'}
ROUTERS = sorted(declarations.BUILT_IN) + [declarations.DENSE]
ARCH_FILES = sorted(f'{name}.py' for name in common.paper_config_modules())
# Every config file and the arguments it is loaded with (a user's router_module= is left out:
# such a config may load that module's JAX).
ARGUMENTS = {
    **{name: ['', 'c=2', 'runlocal=True'] for name in ARCH_FILES},
    'tiny.py': [f'router={r}' for r in ROUTERS] + ['c=2', 'runlocal=True'],
    'ilsvrc_s32.py': [f'router={r}' for r in ROUTERS] + ['c=2', 'runlocal=True'],
    'ilsvrc_s32_vmoe.py': ['', 'runlocal=True'],
    'router_lab.py': [f'arch={arch},router={r}' for arch in ('b32', 'b16', 'l16')
                      for r in sorted(declarations.BUILT_IN)] + ['runlocal=True'],
}
# Loads what `load` names, then prints the modules it imported (JSON): those of the frameworks,
# and those of the project's `package`, which show that it loaded what it checks.
REPORT = """
import json, sys
{load}
print({marker!r} + json.dumps({{
    'frameworks': sorted(m for m in sys.modules if m.split('.')[0] in {frameworks!r}),
    'package': sorted(m for m in sys.modules if m.startswith({package!r}))}}))
"""
MARKER = 'LOADED MODULES: '   # The report's line, among what the loaded code prints.
LOAD_CONFIGS = """
import importlib
for name, args in {arguments!r}.items():
  module = importlib.import_module('configs.' + name[:-3])
  for arg in args:
    module.get_config(arg or None)
"""


def _loaded(load: str, package: str) -> dict:
  script = REPORT.format(load=load, frameworks=layers.JAX_LIBRARIES, package=package,
                         marker=MARKER)
  done = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True, text=True,
                        check=False, env={**os.environ, 'PYTHONPATH': str(REPO)})
  assert done.returncode == 0, done.stderr[-3000:]
  report = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
  return json.loads(report[-1][len(MARKER):])


def test_every_config_file_is_loaded_with_its_arguments():
  files = {p.name for p in (REPO / 'configs').glob('*.py') if not p.name.endswith('_test.py')}
  assert files - HELPERS == set(ARGUMENTS)


def test_config_files_load_without_jax_or_tensorflow():
  loaded = _loaded(LOAD_CONFIGS.format(arguments=ARGUMENTS), 'configs.')
  assert {f'configs.{name[:-3]}' for name in ARGUMENTS} <= set(loaded['package'])
  assert loaded['frameworks'] == []


def test_make_tables_loads_without_jax_or_tensorflow(tmp_path):
  # `make tables` on the committed study runs, written elsewhere.
  load = ('import runpy\n'
          f'sys.argv = ["tables", "--runs", {str(REPO / "results/tiny/runs")!r}, "--out", '
          f'{str(tmp_path)!r}]\n'
          'try:\n'
          '  runpy.run_module("results.tables", run_name="__main__")\n'
          'except SystemExit as done:\n'
          '  assert not done.code, done.code\n')
  loaded = _loaded(load, 'results.')
  assert 'results.summaries' in loaded['package'] and loaded['frameworks'] == []
  assert any(tmp_path.iterdir())     # It wrote its tables.
