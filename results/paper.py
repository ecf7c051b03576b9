"""The paper's rows as results/ shows them: titles, order and allocations of its routers,
beside the published numbers (base/published.py, which configs/ read too).
"""
from base.published import (  # pylint: disable=unused-import
    ARCHS, CAPACITIES, PAPER, ROUTERS, RUNG_ARCH, RUNG_CELL)
from base.published import (  # pylint: disable=unused-import
    RUNG_PUBLISHED, RUNG_SPLITS, SOURCES, PaperCell, RungCell)
from base.published import lookup  # pylint: disable=unused-import
from vmoe.routing import declarations

# The dense ViT baseline's title (the paper tabulates none).
DENSE_TITLE = 'Dense ViT (no MoE layers)'
PM = '\u00b1'
ROUTER_TITLES = {r: declarations.title_of(r) for r in ROUTERS}
# The allocation of each router, from its JAX-free declaration (results/ and launch/sweep.py start
# without JAX). Capacity is k for token choice.
TOKEN_CHOICE = declarations.with_allocation(declarations.TOKEN_CHOICE, ROUTERS)
EXPERT_CHOICE = declarations.with_allocation(declarations.EXPERT_CHOICE, ROUTERS)


def router_order(router: str) -> tuple:
  """The paper's routers in its order, then any other router by name."""
  return (ROUTERS.index(router) if router in ROUTERS else len(ROUTERS), router)


def row_order(key: tuple) -> tuple:
  """Sort key of a table row (arch, dataset, router, capacity, softmax_combine): the dense
  baseline first; then the capacity block, the paper's router order (others after, by name),
  the ablation after its router."""
  _, _, router, capacity, softmax_combine = key
  return router != declarations.DENSE, capacity or 0.0, router_order(router), not softmax_combine


def router_title(router: str, title: str | None = None) -> str:
  """A router's name in tables and figures: the title its runs recorded, else its declaration's
  (the built-in ones: summaries written before runs recorded titles), else its name."""
  return title or declarations.title_of(router)


def row_title(router: str, capacity, title: str | None = None,
              allocation: str | None = None) -> str:
  """'Sinkhorn Token Choice (k=2)', 'Soft MoE (c=1)': the paper's row labels; 'Dense ViT (no
  MoE layers)' for the baseline. title and allocation: what a run recorded of its router (a
  user's router is not declared where no run imports its module); else its declaration's."""
  if router == declarations.DENSE:
    return DENSE_TITLE
  if (router, capacity) == RUNG_CELL:
    return f"V-MoE's {ROUTER_TITLES[router]} (k=2, c={capacity:g})"
  allocation = allocation or declarations.allocation_of(router)
  symbol = 'k' if allocation == declarations.TOKEN_CHOICE else 'c'
  return f'{router_title(router, title)} ({symbol}={capacity:g})'
