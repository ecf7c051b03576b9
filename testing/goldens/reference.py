"""What a component's generator sees while it runs the references' code (the child process).

The generator runs each component in a process of its own whose PYTHONPATH puts the reference
checkouts before this repository, so `vmoe` there is google-research/vmoe, not this project's
package; `testing` and `base` still resolve here (no reference has packages of those names).
Nothing edits sys.path. A component imports reference code through `Context.module`, which
checks that the module came from the checkout, and says through `Context.patch` each change it
made to let old reference code run; the patches go into the golden's record.
"""
import ast
import dataclasses
import importlib
import json
import os
import pathlib
import sys
import types

# The checkouts (name -> path) the parent passes to the child process.
CHECKOUTS_ENV = 'VMOE_GOLDENS_CHECKOUTS'


@dataclasses.dataclass
class Context:
  """The checkouts a component may read, and the patches it applied so far."""
  checkouts: dict[str, str]
  patches: list[str] = dataclasses.field(default_factory=list)

  @classmethod
  def from_environment(cls) -> 'Context':
    return cls(json.loads(os.environ[CHECKOUTS_ENV]))

  def patch(self, description: str) -> None:
    """Records one change made to let a reference run (it goes into the golden's record)."""
    if description not in self.patches:
      self.patches.append(description)

  def module(self, name: str, checkout: str) -> types.ModuleType:
    """Imports `name` and checks that it is the file of `checkout` (a key of checkouts), not
    this repository's module of the same name."""
    module = importlib.import_module(name)
    root = pathlib.Path(self.checkouts[checkout]).resolve()
    where = pathlib.Path(module.__file__).resolve()
    if root not in where.parents:
      raise RuntimeError(f'{name} was imported from {where}, not from the {checkout} checkout '
                         f'{root}: the PYTHONPATH order is wrong')
    return module

  def file(self, checkout: str, relative: str) -> pathlib.Path:
    """A file of a checkout."""
    return pathlib.Path(self.checkouts[checkout]) / relative

  def function_alone(self, checkout: str, relative: str, function: str,
                     namespace: dict) -> types.FunctionType:
    """One top-level function of a checkout's file, compiled on its own in `namespace` (the
    names it uses), for a file whose module does not import as it stands. Recorded as a
    patch."""
    path = self.file(checkout, relative)
    tree = ast.parse(path.read_text(encoding='utf-8'))
    found = [node for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name == function]
    if not found:
      raise RuntimeError(f'{relative} of {checkout} has no top-level function {function}')
    code = compile(ast.Module(body=found, type_ignores=[]), str(path), 'exec')
    scope = dict(namespace)
    exec(code, scope)  # pylint: disable=exec-used
    self.patch(f'{checkout}/{relative}: {function} compiled alone (its module does not import '
               f'here), with {", ".join(sorted(namespace))} bound by the component')
    return scope[function]

  def stub_module(self, name: str, attributes: dict, why: str) -> types.ModuleType:
    """Installs a module `name` made of `attributes` in sys.modules (for a dependency that
    no longer installs), recorded as a patch with its reason."""
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    self.patch(f'module {name} stubbed ({", ".join(sorted(attributes))}): {why}')
    return module
