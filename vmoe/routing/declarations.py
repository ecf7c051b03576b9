"""Every router's declaration, free of JAX: its name, title, allocation kind, presets and options.

A router is a declaration (here) and an implementation (a registry.RouterSpec of JAX functions).
The configs, reporting (results/), results/paper.py and launch/sweep.py read only the
declarations, so they load without JAX; the registry pairs each declaration with its
implementation. A user's router module declares its router with `declare` and registers its
implementation (docs/routers.md).

Presets (docs/fidelity.md traces each). V-MoE's router noise, std noise_std / E with noise_std =
1.0 ("Actually, it's 1.0 / num_experts"), for the softmax and Sinkhorn routers: the paper's
softmax affinity is softmax(X W + sigma eps) for Softmax Token and Expert Choice (eq.
softmax-affinity), and the reference's expert-choice and Sinkhorn routers default to the same
noise (vmoe/nn/routing.py). Only Softmax Token Choice needs balancing losses (Sec. 3.1, Appendix
A): importance and load losses of weight 0.005 each (V-MoE common.get_vmoe_config); Sinkhorn
(Sec. 3.2: "eliminate the need for auxiliary losses"), expert choice (balanced by construction)
and Soft MoE use neither. The reference's token-choice Sinkhorn (KL-projection) router combines
with the softmax of the clean logits
(vmoe/projects/sparsity_constrained_ot/kl_projection_routing.py, `gates_softmax_noisy =
jax.nn.softmax(gates_logits)`); its other routers with the noisy softmax (docs/fidelity.md, D5).
The routers after the paper (lab_routers.py) use no router noise.
"""
import dataclasses
from typing import Any, Mapping

from base import published

# Allocation kinds: results group routers by them (token choice rows read k = c, others c).
TOKEN_CHOICE, EXPERT_CHOICE = 'token_choice', 'expert_choice'
SOFT_ALLOCATION = 'soft'       # Soft MoE's: dense, from its own slot parameters, no affinity.
BALANCED_ASSIGNMENT = 'balanced_assignment'   # BASE layers' (lab_routers.py).
# The router name of a model without MoE layers (moe.num_experts = 0): the dense ViT baseline.
DENSE = 'dense'
PAPER_ROUTERS = published.ROUTERS   # The paper's six, in its row order.


@dataclasses.dataclass(frozen=True)
class RouterDeclaration:
  """One router as the configs and the reports know it.

  title: its name in tables and figures (each run records it as summary.json's router_title).
  allocation: its allocation kind (TOKEN_CHOICE, ...; a user's router may name its own).
  presets: the RouterConfig values the configs give it (noise_std, noisy_combine, loss weights).
  options: knobs of its own with their defaults (`config.moe.router.options`).
  """
  name: str
  title: str
  allocation: str
  presets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if not self.name or not self.title or not self.allocation:
      raise ValueError(f'a router declaration needs a name, a title and an allocation kind; got '
                       f'{self.name!r}, {self.title!r}, {self.allocation!r}.')


NOISE = {'noise_std': 1.0}
BALANCING_LOSSES = {'importance_loss_weight': 0.005, 'load_loss_weight': 0.005}
# DeepSeek-V3's expert groups and route scale, at the defaults that make its gate the plain
# sigmoid gate (its published configs: 8 groups, 4 kept, scale 2.5; docs/fidelity.md).
GATE_OPTIONS = {'n_groups': 1, 'topk_groups': 1, 'route_scale': 1.0}
# DeepSeek-V3's bias update speed gamma (Sec. 4.2, "Hyper-Parameters"): 0.001 for most of
# training, the u = 1e-3 that Wang et al. also choose.
BIAS_UPDATE_RATE = 1e-3
# BASE's auction (balanced_assignment.py). Epsilon is relative to the spread max(a) - min(a) of
# the group's affinities: the assignment's total is within E C epsilon (max(a) - min(a)) of the
# optimum, a bound that random problems beat by orders of magnitude (balanced_assignment_test.py
# checks 1e-4 of the optimum; fairseq's 1/50 stops further from it). Under epsilon scaling the
# last tenfold costs few bids, and it keeps small groups close to the optimum, where one larger
# epsilon is already a sizeable share of the total (bench/auction.py measures both).
AUCTION_EPSILON = 1e-4
# A bound on the bids, so that a step's time is bounded; a group that needs more keeps the slots
# it filled, leaves the rest empty and says so in AuctionReport.unfilled. Skewed affinities (a
# trained router's) need the most bids at c = 2; the bound leaves B/32's 800 slots room there
# (bench/auction.py counts the bids).
AUCTION_MAX_ITERS = 50_000
# Top-p's threshold, the authors' code's (ZhenweiAn/Dynamic_MoE, MoEConfig.top_p_threshold).
TOP_P = 0.4


def _declare_all(*declarations: RouterDeclaration) -> dict[str, RouterDeclaration]:
  return {d.name: d for d in declarations}


BUILT_IN = _declare_all(
    # The paper's (Sec. 2-3), and sparsity_tc: any affinity composes with any sparse allocation.
    RouterDeclaration('softmax_tc', 'Softmax Token Choice', TOKEN_CHOICE,
                      presets={**NOISE, **BALANCING_LOSSES}),
    RouterDeclaration('sinkhorn_tc', 'Sinkhorn Token Choice', TOKEN_CHOICE,
                      presets={**NOISE, 'noisy_combine': False}),
    RouterDeclaration('sparsity_tc', 'Sparsity-constrained Token Choice', TOKEN_CHOICE),
    RouterDeclaration('softmax_ec', 'Softmax Expert Choice', EXPERT_CHOICE, presets=NOISE),
    RouterDeclaration('sinkhorn_ec', 'Sinkhorn Expert Choice', EXPERT_CHOICE, presets=NOISE),
    RouterDeclaration('sparsity_ec', 'Sparsity-constrained Expert Choice', EXPERT_CHOICE),
    RouterDeclaration('soft_moe', 'Soft MoE', SOFT_ALLOCATION),
    # Published after the paper (lab_routers.py's docstring cites each).
    RouterDeclaration('sigmoid_tc', 'Sigmoid Token Choice', TOKEN_CHOICE, options=GATE_OPTIONS),
    RouterDeclaration('lossfree_tc', 'Loss-free balanced Token Choice', TOKEN_CHOICE,
                      options={**GATE_OPTIONS, 'bias_update_rate': BIAS_UPDATE_RATE}),
    RouterDeclaration('base', 'BASE layers', BALANCED_ASSIGNMENT,
                      options={'auction_epsilon': AUCTION_EPSILON,
                               'auction_max_iters': AUCTION_MAX_ITERS}),
    RouterDeclaration('topp_tc', 'Top-p Token Choice', TOKEN_CHOICE,
                      options={'top_p': TOP_P, 'dynamic_loss_weight': 1e-4,
                               'balance_loss_weight': 1e-2}),
    RouterDeclaration('random_tc', 'Fixed random Token Choice', TOKEN_CHOICE),
)
LAB_ROUTERS = tuple(name for name in BUILT_IN if name not in PAPER_ROUTERS + ('sparsity_tc',))
# Every declared router: the built-in ones, then those a user's module declares.
DECLARED: dict[str, RouterDeclaration] = dict(BUILT_IN)


def declare(declaration: RouterDeclaration) -> RouterDeclaration:
  """Adds a user's router. Declaring it again (its module imported once by pytest and once by
  name) replaces it; a built-in router's name, and 'dense', cannot be taken."""
  name = declaration.name
  if name == DENSE or (name in BUILT_IN and BUILT_IN[name] != declaration):
    raise ValueError(f'router name {name!r} is taken by this repository; pick another.')
  DECLARED[name] = declaration
  return declaration


def get(name: str) -> RouterDeclaration:
  """The declaration of `name`; an unknown name fails listing the declared ones."""
  if name not in DECLARED:
    raise ValueError(f'unknown router {name!r}; valid routers: {", ".join(sorted(DECLARED))} '
                     '(a router of your own: declare it in a module and pass '
                     'router_module=PATH, docs/routers.md).')
  return DECLARED[name]


def title_of(router: str) -> str:
  """A declared router's title; the name itself for another (the dense baseline)."""
  return DECLARED[router].title if router in DECLARED else router


def allocation_of(router: str) -> str | None:
  """A declared router's allocation kind; None for another (the dense baseline)."""
  return DECLARED[router].allocation if router in DECLARED else None


def with_allocation(allocation: str, routers=PAPER_ROUTERS) -> tuple[str, ...]:
  """The routers among `routers` whose allocation is `allocation`, in their order."""
  return tuple(r for r in routers if allocation_of(r) == allocation)
