"""The routers' names and what each composes, free of JAX.

Tools that only need names (results/, launch/sweep.py) read them here and start without loading
JAX; router.py builds its registry of RouterSpecs from this table, and checks every affinity and
allocation named here against its AFFINITIES and ALLOCATIONS.
"""
# Soft MoE's allocation: dense, from its own slot parameters, with no affinity.
SOFT_ALLOCATION = 'soft'
TOKEN_CHOICE, EXPERT_CHOICE = 'token_choice', 'expert_choice'

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
PAPER_ROUTERS = ('softmax_tc', 'sinkhorn_tc', 'softmax_ec', 'sinkhorn_ec', 'sparsity_ec', 'soft_moe')
# The router name of a model without MoE layers (moe.num_experts = 0): the dense ViT baseline.
DENSE = 'dense'


def with_allocation(allocation: str, routers=PAPER_ROUTERS) -> tuple[str, ...]:
  """The routers among `routers` whose allocation is `allocation`, in their order."""
  return tuple(r for r in routers if ROUTERS[r][1] == allocation)
