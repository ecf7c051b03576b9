"""The routers' names and what each composes, free of JAX.

Tools that only need names (results/, launch/sweep.py) read them here and start without loading
JAX. The specs themselves are paper_routers.py's and lab_routers.py's; router_test checks that
this table names their affinities, allocations and titles.
"""
from base import published

# Soft MoE's allocation: dense, from its own slot parameters, with no affinity.
SOFT_ALLOCATION = 'soft'
TOKEN_CHOICE, EXPERT_CHOICE = 'token_choice', 'expert_choice'
BALANCED_ASSIGNMENT = 'balanced_assignment'   # BASE layers' allocation (lab_routers.py).

# Router name -> (affinity, allocation). The paper's six routers, plus sparsity_tc: any affinity
# composes with any sparse allocation.
ROUTERS = {
    'softmax_tc': ('softmax', TOKEN_CHOICE),
    'sinkhorn_tc': ('sinkhorn', TOKEN_CHOICE),
    'sparsity_tc': ('sparsity_constrained', TOKEN_CHOICE),
    'softmax_ec': ('softmax', EXPERT_CHOICE),
    'sinkhorn_ec': ('sinkhorn', EXPERT_CHOICE),
    'sparsity_ec': ('sparsity_constrained', EXPERT_CHOICE),
    'soft_moe': (None, SOFT_ALLOCATION),
}
PAPER_ROUTERS = published.ROUTERS   # The paper's six, in its row order.
# The routers published after the paper (lab_routers.py builds them): name -> allocation kind.
LAB_ROUTERS = {
    'sigmoid_tc': TOKEN_CHOICE,
    'lossfree_tc': TOKEN_CHOICE,
    'base': BALANCED_ASSIGNMENT,
    'topp_tc': TOKEN_CHOICE,
    'random_tc': TOKEN_CHOICE,
}
# Every built-in router's name in tables and figures (its RouterSpec's title). A user's router
# brings its own title, which its runs record (summary.json's router_title).
TITLES = {
    'softmax_tc': 'Softmax Token Choice', 'sinkhorn_tc': 'Sinkhorn Token Choice',
    'sparsity_tc': 'Sparsity-constrained Token Choice', 'softmax_ec': 'Softmax Expert Choice',
    'sinkhorn_ec': 'Sinkhorn Expert Choice', 'sparsity_ec': 'Sparsity-constrained Expert Choice',
    'soft_moe': 'Soft MoE',
    'sigmoid_tc': 'Sigmoid Token Choice', 'lossfree_tc': 'Loss-free balanced Token Choice',
    'base': 'BASE layers', 'topp_tc': 'Top-p Token Choice',
    'random_tc': 'Fixed random Token Choice',
}
# The router name of a model without MoE layers (moe.num_experts = 0): the dense ViT baseline.
DENSE = 'dense'


def allocation_of(router: str) -> str | None:
  """A built-in router's allocation kind; None for a user's router (or the dense baseline)."""
  if router in ROUTERS:
    return ROUTERS[router][1]
  return LAB_ROUTERS.get(router)


def with_allocation(allocation: str, routers=PAPER_ROUTERS) -> tuple[str, ...]:
  """The routers among `routers` whose allocation is `allocation`, in their order."""
  return tuple(r for r in routers if allocation_of(r) == allocation)
