"""The loader of a user's router module (config argument `router_module=`, docs/routers.md): the
module declares its routers (declarations.declare) and registers their implementations
(registry.register) when imported. Free of JAX itself; the module it loads may import JAX.

It never edits sys.path: a dotted name is imported as it is where importable, else from its file
under the working directory, and a .py path from its file (importlib.util.spec_from_file_location).
"""
import importlib
import importlib.util
import os
import sys

USER_MODULE_PREFIX = 'vmoe_router_module_'   # sys.modules' name of a router module given as a path.


def import_router_module(module: str) -> None:
  """Imports the module that declares a user's routers: a dotted module name (importable, or a
  file under the working directory), or the path of a .py file. '' imports nothing."""
  if not module or _loaded_name(module) in sys.modules:
    return
  try:
    if module.endswith('.py'):
      _load_file(_loaded_name(module), os.path.abspath(module))
    else:
      try:
        importlib.import_module(module)
      except ModuleNotFoundError as e:
        if module != e.name and not module.startswith(f'{e.name}.'):   # Its own import failed.
          raise
        _load_file(module, _file_of(module))
  except ModuleNotFoundError as e:
    raise ValueError(f'router_module={module!r} cannot be imported ({e}); pass a .py file path '
                     'or a dotted module name importable from the working directory.') from None


def _loaded_name(module: str) -> str:
  """The name the module has in sys.modules."""
  if module.endswith('.py'):
    return USER_MODULE_PREFIX + os.path.splitext(os.path.basename(module))[0]
  return module


def _file_of(dotted: str) -> str:
  """The file of a dotted module name under the working directory (a module or a package)."""
  path = os.path.join(os.getcwd(), *dotted.split('.'))
  return path + '.py' if os.path.isfile(path + '.py') else os.path.join(path, '__init__.py')


def _load_file(name: str, path: str) -> None:
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or not os.path.isfile(path):
    raise ModuleNotFoundError(f'no file {path}')
  loaded = importlib.util.module_from_spec(spec)
  sys.modules[name] = loaded
  try:
    spec.loader.exec_module(loaded)
  except BaseException:
    del sys.modules[name]
    raise
