"""Every module's imports point down the layers of testing/layers.py (nested imports included),
no modules import each other in a circle, the plain modules and configs/ load no framework, and
only main.py edits sys.path."""
import ast
import pathlib
import subprocess
import sys

import pytest

from testing import layers

ROOT = pathlib.Path(__file__).resolve().parent.parent
# main.py's own directory first on the path (what `python main.py` from the repository root
# gives, kept under PYTHONSAFEPATH).
SYS_PATH_EDITORS = {'main.py'}


def _modules():
  files = subprocess.run(['git', '-C', str(ROOT), 'ls-files', '--cached', '--others',
                          '--exclude-standard', '*.py'], capture_output=True, text=True,
                         check=True).stdout.split()
  return [f for f in files if (ROOT / f).exists()]


def _name(path: str) -> str:
  return path[:-3].replace('/', '.').removesuffix('.__init__')


def _is_test(path: str) -> bool:
  return path.endswith('_test.py') or path.endswith('conftest.py')


def imports(source: str, module: str) -> list[tuple[int, str]]:
  """(line, imported module) of every import in `source`, nested ones included; `from X import
  y` counts as X.y (y may be a module) and relative imports resolve against `module`."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      found += [(node.lineno, alias.name) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        base = '.'.join(module.split('.')[:-node.level] + ([base] if base else []))
      found += [(node.lineno, f'{base}.{alias.name}') for alias in node.names]
  return found


def eager_imports(source: str, module: str) -> list[str]:
  """The modules `source` imports when it is loaded: imports outside function bodies."""
  tree = ast.parse(source)
  stack, found = list(tree.body), []
  while stack:
    node = stack.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      continue
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      found += [name for _, name in imports(ast.unparse(node), module)]
    stack.extend(ast.iter_child_nodes(node))
  return found


def loaded_with(entry: str) -> set[str]:
  """Every module, the project's and others', that loading module `entry` imports."""
  seen, todo = set(), [entry]
  while todo:
    name = todo.pop()
    if name in seen:
      continue
    seen.add(name)
    path = next((p for p in (ROOT / (name.replace('.', '/') + '.py'),
                             ROOT / name.replace('.', '/') / '__init__.py') if p.exists()), None)
    if path is None:
      continue
    for imported in eager_imports(path.read_text(encoding='utf-8'), name):
      parts = imported.split('.')
      # Its packages load first; `from X import y` names X.y, which may be a module or a name.
      todo += ['.'.join(parts[:n]) for n in range(1, len(parts) + 1)]
  return seen


@pytest.mark.parametrize('entry', layers.TENSORFLOW_FREE)
def test_the_gpu_machines_entry_points_load_without_tensorflow(entry):
  found = sorted(m for m in loaded_with(entry) if m.split('.')[0] in layers.TENSORFLOW)
  assert not found, f'{entry} loads {found}'


def test_a_tensorflow_import_on_the_way_is_found():
  assert 'tensorflow' in loaded_with('data.pp.ops')
  assert 'data.pp.syntax' in loaded_with('data.pp.ops')
  assert 'tensorflow' not in loaded_with('data.pp.device_augment')


def climbs(path: str, source: str) -> list[str]:
  """What in `source` (the file at `path`) breaks the layers, one line each."""
  module = _name(path)
  own = layers.unit_of(module)
  if own is None or _is_test(path):
    return []
  problems = []
  for line, imported in imports(source, module):
    target = layers.unit_of(imported)
    top = imported.split('.')[0]
    where = f'{path}:{line} imports {imported}'
    if own == layers.REPORTING and top in layers.JAX_LIBRARIES:
      problems.append(f'{where}: reporting code imports no JAX-era library')
    if own == layers.CONFIGS and not _plain_for_configs(imported):
      problems.append(f'{where}: configs/ import only {", ".join(layers.CONFIGS_MAY_IMPORT)} '
                      'and the plain modules (layers.PLAIN)')
    if target is None or target == own:
      continue
    if target == layers.TESTS_ONLY:
      problems.append(f'{where}: only tests import {layers.TESTS_ONLY}/')
    elif own == layers.REPORTING and not imported.startswith(layers.REPORTING_MAY_IMPORT):
      problems.append(f'{where}: reporting code may import only '
                      f'{", ".join(layers.REPORTING_MAY_IMPORT)}')
    elif layers.RANKS[target] >= layers.RANKS[own] and own != layers.REPORTING:
      problems.append(f'{where}: {target} is not below {own}')
  return problems


def _plain_for_configs(imported: str) -> bool:
  """Whether configs/ may import `imported` (a module, or a name of one): Python's own modules,
  CONFIGS_MAY_IMPORT and the plain modules."""
  top = imported.split('.')[0]
  names = (imported, imported.rpartition('.')[0])
  return (top in sys.stdlib_module_names or top in layers.CONFIGS_MAY_IMPORT
          or any(name in layers.PLAIN for name in names))


def test_imports_point_down_the_layers():
  problems = []
  for path in _modules():
    problems += climbs(path, (ROOT / path).read_text(encoding='utf-8'))
  assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('path,source,expected', [
    ('vmoe/model/moe.py', 'from vmoe.train import trainer\n', 'vmoe.train is not below vmoe.model'),
    ('base/stats.py', 'def f():\n  import data.pp.ops\n', 'data.pp is not below base'),
    # data/'s subpackages climb as much as the top-level packages do.
    ('data/pp/ops.py', 'from data.stream import pipeline\n', 'data.stream is not below data.pp'),
    ('data/config.py', 'from data.datasets import sources\n',
     'data.datasets is not below data.config'),
    ('data/datasets/sources.py', 'from data.stream import reader\n',
     'data.stream is not below data.datasets'),
    ('data/stream/reader.py', 'def f():\n  from data import prepare\n',
     'data.prepare is not below data.stream'),
    ('results/tables.py', 'import jax.numpy as jnp\n', 'imports no JAX-era library'),
    ('results/tables.py', 'from vmoe.train import experiment\n', 'may import only'),
    ('launch/rehearsal.py', 'from testing import data\n', 'only tests import testing/'),
    ('configs/tiny.py', 'from vmoe.model import vit\n', 'configs/ import only'),
    ('configs/tiny.py', 'import numpy as np\n', 'configs/ import only'),
    ('vmoe/routing/router.py', 'from . import names\nfrom .. import model\n',
     'is not below vmoe.routing'),
])
def test_a_climbing_import_is_found(path, source, expected):
  assert any(expected in p for p in climbs(path, source)), climbs(path, source)
  assert climbs(path.replace('.py', '_test.py'), source) == []     # Tests are exempt.


def test_only_main_edits_sys_path():
  editors = {path for path in _modules() if not _is_test(path)
             and 'sys.path.insert' in (ROOT / path).read_text(encoding='utf-8')}
  assert editors <= SYS_PATH_EDITORS


@pytest.mark.parametrize('module', layers.PLAIN)
def test_plain_modules_load_no_framework(module):
  found = sorted(m for m in loaded_with(module) if m.split('.')[0] in layers.JAX_LIBRARIES)
  assert not found, f'{module} loads {found}'


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
  """module -> the modules of `sources` it imports (every import, nested and TYPE_CHECKING ones
  included); `sources` maps dotted module names to their text."""
  graph = {}
  for module, source in sources.items():
    targets = set()
    for _, imported in imports(source, module):
      parts = imported.split('.')
      # `from X import y` names X.y: the module X.y where one exists, else X.
      target = next((name for name in ('.'.join(parts[:n]) for n in (len(parts), len(parts) - 1))
                     if name in sources), None)
      if target is not None and target != module:
        targets.add(target)
    graph[module] = targets
  return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The groups of modules that import each other in a circle (the strongly connected
  components of more than one module; Tarjan's algorithm), each sorted."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(module):
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    for target in sorted(graph[module]):
      if target not in index:
        visit(target)
        low[module] = min(low[module], low[target])
      elif target in on_stack:
        low[module] = min(low[module], index[target])
    if low[module] == index[module]:
      component = []
      while not component or component[-1] != module:
        component.append(stack.pop())
        on_stack.discard(component[-1])
      if len(component) > 1:
        found.append(sorted(component))

  for module in sorted(graph):
    if module not in index:
      visit(module)
  return found


def test_no_modules_import_each_other_in_a_circle():
  sources = {_name(path): (ROOT / path).read_text(encoding='utf-8') for path in _modules()
             if not _is_test(path)}
  assert circles(import_graph(sources)) == []


def test_a_circle_inside_a_package_is_found():
  # A TYPE_CHECKING import closes a circle as much as any other; a one-way chain is none.
  sources = {
      'vmoe.routing.registry': 'from vmoe.routing import spec\n',
      'vmoe.routing.spec': 'import typing\nif typing.TYPE_CHECKING:\n'
                           '  from vmoe.routing import router\n',
      'vmoe.routing.router': 'from vmoe.routing import registry\n',
      'vmoe.routing.affinity': 'from vmoe.routing import capacity\n',
      'vmoe.routing.capacity': 'import math\n',
  }
  assert circles(import_graph(sources)) == [
      ['vmoe.routing.registry', 'vmoe.routing.router', 'vmoe.routing.spec']]
