"""The loader of a user's router module: a .py path or a dotted name, sys.path left as it is."""
import sys

import pytest

from vmoe.routing import user_module


def test_a_dotted_name_under_the_working_directory_loads_without_editing_sys_path(
    tmp_path, monkeypatch):
  (tmp_path / 'mine').mkdir()
  (tmp_path / 'mine' / 'routers.py').write_text('LOADED = "dotted"\n')
  monkeypatch.chdir(tmp_path)
  monkeypatch.delitem(sys.modules, 'mine.routers', raising=False)
  path = list(sys.path)
  user_module.import_router_module('mine.routers')
  assert sys.modules['mine.routers'].LOADED == 'dotted' and sys.path == path
  monkeypatch.delitem(sys.modules, 'mine.routers')


def test_a_py_path_loads_once_under_its_prefixed_name(tmp_path, monkeypatch):
  (tmp_path / 'counted.py').write_text('import builtins\n'
                                       'builtins.counted_loads = getattr(builtins, '
                                       '"counted_loads", 0) + 1\n')
  name = user_module.USER_MODULE_PREFIX + 'counted'
  monkeypatch.delitem(sys.modules, name, raising=False)
  for _ in range(2):
    user_module.import_router_module(str(tmp_path / 'counted.py'))
  import builtins   # pylint: disable=import-outside-toplevel
  assert builtins.counted_loads == 1
  del builtins.counted_loads
  monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize('module', ['no_such_router_module', 'no/such/file.py'])
def test_a_missing_module_fails_saying_what_to_pass(module):
  with pytest.raises(ValueError, match='cannot be imported .*pass a .py file path or a dotted'):
    user_module.import_router_module(module)


def test_an_import_the_module_itself_makes_fails_as_it_is(tmp_path, monkeypatch):
  (tmp_path / 'broken_router.py').write_text('import no_such_dependency_of_the_router\n')
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ValueError, match="No module named 'no_such_dependency_of_the_router'"):
    user_module.import_router_module('broken_router')
  assert 'broken_router' not in sys.modules
