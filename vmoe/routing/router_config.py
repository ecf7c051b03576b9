"""`RouterConfig`: everything that defines a router, as plain values (free of JAX: the configs
build `config.moe.router` from it). Its checks read the router's declaration (declarations.py);
those that need the implementation (the allocation's own) run in vmoe/train/experiment.py
`parse`, through router.check_allocations.
"""
import dataclasses
import math
from typing import Any, Mapping

from vmoe.routing import capacity as capacity_lib
from vmoe.routing import declarations


def sparsity_solver_defaults(capacity_factor: float) -> tuple[int, int]:
  """(sparsity_steps, sparsity_warm_start) of the sparsity-constrained solver at capacity c.

  From the potentials of 10 Sinkhorn iterations when c <= 1 (the plan is then nearly an
  assignment; 5 L-BFGS steps from there beat 10 from 0, in less time), and 10 steps from 0 when
  c > 1 (the entropic start is worse there); see affinity.sparsity_constrained and
  bench/results/sparsity_solver.json.
  """
  return (5, 10) if capacity_factor <= 1 else (10, 0)


@dataclasses.dataclass(frozen=True)
class RouterConfig:
  """Everything that defines a router; built from `config.moe.router` (`RouterConfig(**cfg)`).

  capacity_factor is c for expert choice and Soft MoE, and k (experts per token, an integer) for
  token choice; the buffer capacity is C = round(c * T / E), rounded by capacity_rounding
  (capacity.CAPACITY_ROUNDINGS; default the paper's round, halves to even).
  num_selected_experts: token choice's k apart from c, as V-MoE's routers have it: k experts per
  token and C = rounding(c * k * T / E) (V-MoE's ImageNet-1k S/32: k = 2, c = 1.05, C on 2T/E up
  to a multiple of 4). None (the default): k is capacity_factor, the paper configs' convention.
  eval_capacity_factor: c in evaluation, for sparse routers (V-MoE evaluates at 4.0; token choice
  needs num_selected_experts with it, so that k stays what training used); None: as training.
  noise_std is relative, as V-MoE's: the Gaussian noise added to the logits in training has std
  noise_std / E. The default 0 means no noise; the router's presets (its declaration's, which
  configs/common.py moe_config applies) set 1.0, the reference routers' default, for the softmax
  and Sinkhorn routers.
  softmax_combine: sparse routers whose affinity is not softmax dispatch with it but combine with
  softmax(X W) at the dispatched positions (the paper's trick); False combines with the affinity.
  noisy_combine: in training, whether that softmax is of the noisy logits the router dispatched
  with (True) or of the clean ones (False); None (the default) takes the router's preset (True
  where it has none). Without noise both are the same.
  sparsity_steps and sparsity_warm_start: L-BFGS steps of the sparsity-constrained OT solver and
  Sinkhorn iterations of its entropic starting point (0: start at 0); see
  affinity.sparsity_constrained. None (the default) takes `sparsity_solver_defaults(c)`;
  sparsity_memory: the curvature pairs its L-BFGS keeps.
  options: the router's own knobs (its declaration's options), given values over its defaults;
  an unknown key fails listing the valid ones. A plain dict, read-only by convention, left out of
  the hash (the config stays hashable, as a flax Module field must be).
  module: the module that declares and registers this router, for a router of a user's own
  (user_module.import_router_module: a dotted name or a .py path); '' for the built-in routers;
  `parse` imports it before it builds this config.
  The defaults are the configs' (configs/common.py builds `config.moe.router` from this class).
  """
  name: str
  capacity_factor: float
  softmax_combine: bool = True
  noisy_combine: bool | None = None
  noise_std: float = 0.0
  importance_loss_weight: float = 0.0
  load_loss_weight: float = 0.0
  sinkhorn_iters: int = 20
  sparsity_steps: int | None = None
  sparsity_warm_start: int | None = None
  sparsity_memory: int = 3
  capacity_rounding: str = 'round_half_even'
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
  module: str = ''
  num_selected_experts: int | None = None
  eval_capacity_factor: float | None = None

  def __post_init__(self):
    declared = declarations.get(self.name)
    steps, warm_start = sparsity_solver_defaults(self.capacity_factor)
    if self.sparsity_steps is None:
      object.__setattr__(self, 'sparsity_steps', steps)
    if self.sparsity_warm_start is None:
      object.__setattr__(self, 'sparsity_warm_start', warm_start)
    if self.noisy_combine is None:
      object.__setattr__(self, 'noisy_combine', declared.presets.get('noisy_combine', True))
    given = dict(self.options or {})
    unknown = sorted(set(given) - set(declared.options))
    if unknown:
      raise ValueError(f'router {self.name} has no option {", ".join(unknown)}; its options: '
                       f'{", ".join(sorted(declared.options)) or "none"} (moe.router.options).')
    object.__setattr__(self, 'options', {**declared.options, **given})
    if not math.isfinite(self.capacity_factor) or self.capacity_factor <= 0:
      raise ValueError(f'router {self.name}: capacity factor must be > 0, got '
                       f'{self.capacity_factor} (moe.router.capacity_factor).')
    self._check_capacities(declared.allocation)
    weights = (self.noise_std, self.importance_loss_weight, self.load_loss_weight)
    if not all(math.isfinite(w) and w >= 0 for w in weights):
      raise ValueError(f'router {self.name}: noise_std and loss weights must be finite and >= 0.')
    if self.load_loss_weight > 0 and (declared.allocation != declarations.TOKEN_CHOICE
                                      or self.noise_std <= 0):
      raise ValueError(f'router {self.name}: the load loss is defined for token choice with router '
                       'noise; set load_loss_weight=0 or use noise_std > 0 with a *_tc router.')
    if self.sinkhorn_iters < 1 or self.sparsity_steps < 0 or self.sparsity_warm_start < 0:
      raise ValueError('sinkhorn_iters must be >= 1, sparsity_steps and sparsity_warm_start >= 0.')
    if self.sparsity_memory < 1:
      raise ValueError(f'sparsity_memory must be >= 1 (L-BFGS curvature pairs), got '
                       f'{self.sparsity_memory}.')
    if self.capacity_rounding not in capacity_lib.CAPACITY_ROUNDINGS:
      raise ValueError(f'unknown capacity_rounding {self.capacity_rounding!r}; valid: '
                       f'{", ".join(capacity_lib.CAPACITY_ROUNDINGS)}.')

  def _check_capacities(self, kind: str) -> None:
    """num_selected_experts for token choice only; eval_capacity_factor for sparse routers."""
    k, c_eval = self.num_selected_experts, self.eval_capacity_factor
    if k is not None and (kind != declarations.TOKEN_CHOICE or int(k) != k or k < 1):
      raise ValueError(f'router {self.name}: moe.router.num_selected_experts={k} is token '
                       'choice\'s k apart from c: an integer >= 1, for a token choice router '
                       '(None: k is the capacity factor).')
    if c_eval is None:
      return
    if not math.isfinite(c_eval) or c_eval <= 0:
      raise ValueError(f'router {self.name}: moe.router.eval_capacity_factor must be > 0 or '
                       f'None, got {c_eval}.')
    if kind == declarations.SOFT_ALLOCATION:
      raise ValueError(f'router {self.name}: Soft MoE\'s slots are parameters, so its capacity '
                       'cannot change in evaluation; set moe.router.eval_capacity_factor=None.')
    if kind == declarations.TOKEN_CHOICE and k is None:
      raise ValueError(f'router {self.name}: token choice reads the capacity factor as k; set '
                       'moe.router.num_selected_experts too, to evaluate at another capacity '
                       'with the same k.')

  @property
  def experts_per_token(self) -> int:
    """Token choice's k: num_selected_experts, else the capacity factor."""
    return int(self.num_selected_experts or self.capacity_factor)

  def capacity(self, num_tokens: int, num_experts: int, train: bool = True) -> int:
    """Buffer capacity C (slots per expert) for groups of `num_tokens` tokens: c T / E rounded,
    with T counted k times where k is set apart (num_selected_experts), and c the evaluation's
    where it is set (eval_capacity_factor) and train is False."""
    factor = self.capacity_factor
    if not train and self.eval_capacity_factor is not None:
      factor = self.eval_capacity_factor
    requests = num_tokens * (self.num_selected_experts or 1)
    return capacity_lib.compute_capacity(requests, num_experts, factor, self.capacity_rounding)
