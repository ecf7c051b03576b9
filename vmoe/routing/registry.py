"""The router registry: router name -> implementation (router_spec.RouterSpec).

Every registered router is declared (declarations.py), and its spec's allocation is of the kind
its declaration names. The built-in routers (paper_routers.py, lab_routers.py) are registered
here, once, and never replaced; a user's router is one `declarations.declare` and one `register`
call in a module of their own, named by the config argument `router_module=`
(user_module.py, docs/routers.md).
"""
from vmoe.routing import declarations
from vmoe.routing import lab_routers
from vmoe.routing import paper_routers
from vmoe.routing import router_spec

ROUTERS: dict[str, router_spec.RouterSpec] = {**paper_routers.ROUTERS, **lab_routers.ROUTERS}
BUILT_IN = frozenset(ROUTERS)


def register(name: str, spec: router_spec.RouterSpec) -> router_spec.RouterSpec:
  """Adds `spec` under `name`, a declared router's. A user's router registered again (its module
  imported once by pytest and once by name) replaces itself; a built-in router's name cannot be
  taken."""
  declared = declarations.get(name)
  if name in BUILT_IN and ROUTERS[name] != spec:
    raise ValueError(f'router name {name!r} is taken by this repository; pick another.')
  if spec.allocation.kind != declared.allocation:
    raise ValueError(f'router {name!r} is declared with allocation {declared.allocation!r} but '
                     f'its spec allocates by {spec.allocation.kind!r}; make them one.')
  ROUTERS[name] = spec
  return spec


def get(name: str) -> router_spec.RouterSpec:
  """The spec of `name`; an unknown name fails listing the registered ones."""
  if name not in ROUTERS:
    raise ValueError(f'unknown router {name!r}; valid routers: {", ".join(sorted(ROUTERS))} '
                     '(a router of your own: declare and register it in a module and pass '
                     'router_module=PATH, docs/routers.md).')
  return ROUTERS[name]


def _check_tables() -> None:
  """The built-in implementations are exactly the built-in declarations, kind for kind."""
  if set(ROUTERS) != set(declarations.BUILT_IN):
    raise ValueError(f'built-in specs {sorted(ROUTERS)} and declarations '
                     f'{sorted(declarations.BUILT_IN)} differ.')
  for name, spec in ROUTERS.items():
    register(name, spec)


_check_tables()
