"""Routers: a registry composing an affinity with an allocation, or Soft MoE.

Axis letters: g = routing group, s = token within a group (T = S in the paper's notation),
d = model dim, e = expert, c = buffer slot.

A router maps a batch of token groups X (G, S, D) to routing tensors. Sparse routers return them in
index form (`SparseRouting`: the token held by every buffer slot and its combine weight); Soft MoE
returns dense tensors (`DenseRouting`). The maths lives in pure functions (affinity.py,
allocation.py, soft.py, losses.py); the `Router` module only owns the parameters and the noise.
"""
import dataclasses
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import losses
from vmoe.routing import names
from vmoe.routing import soft


# Affinities by name: (logits (S, E), probs = softmax(logits), capacity C, RouterConfig) ->
# (scores (S, E), the sparsity-constrained solver's SolverReport or None). A new affinity is one
# such function and one entry in AFFINITIES; routers then name it in names.ROUTERS.


def _softmax_scores(logits, probs, capacity, config):
  del logits, capacity, config   # Pi_softmax is softmax(X W) itself.
  return probs, None


def _sinkhorn_scores(logits, probs, capacity, config):
  del probs, capacity
  return affinity.sinkhorn(logits, config.sinkhorn_iters), None


def _sparsity_constrained_scores(logits, probs, capacity, config):
  del logits   # The paper's utility is softmax(X W).
  return affinity.sparsity_constrained_with_info(probs, capacity, config.sparsity_steps,
                                                 memory_size=config.sparsity_memory,
                                                 warm_start_iters=config.sparsity_warm_start)


AFFINITIES = {
    'softmax': _softmax_scores,
    'sinkhorn': _sinkhorn_scores,
    'sparsity_constrained': _sparsity_constrained_scores,
}


# Sparse allocations by name: (scores (S, E), capacity C, RouterConfig) -> slot_token (E, C).


def _token_choice_slots(scores, capacity, config):
  return allocation.token_choice_slots(scores, capacity, int(config.capacity_factor))


def _expert_choice_slots(scores, capacity, config):
  del config
  return allocation.expert_choice_slots(scores, capacity)


ALLOCATIONS = {names.TOKEN_CHOICE: _token_choice_slots, names.EXPERT_CHOICE: _expert_choice_slots}


def _check_name(kind: str, name, registry) -> None:
  if name not in registry:
    raise ValueError(f'unknown {kind} {name!r}; valid: {", ".join(registry)}.')


@dataclasses.dataclass(frozen=True)
class RouterSpec:
  """Which affinity (an AFFINITIES name) feeds which allocation (an ALLOCATIONS name); Soft MoE
  has affinity None and allocation names.SOFT_ALLOCATION. Unknown names fail listing the valid
  ones."""
  affinity: str | None
  allocation: str

  def __post_init__(self):
    if self.allocation == names.SOFT_ALLOCATION and self.affinity is None:
      return
    _check_name('affinity', self.affinity, AFFINITIES)
    _check_name('allocation', self.allocation, ALLOCATIONS)


# Router name -> RouterSpec, from names.py's JAX-free table (the paper's six routers and
# sparsity_tc); a router naming an unknown affinity or allocation fails here, at import.
ROUTERS = {name: RouterSpec(*parts) for name, parts in names.ROUTERS.items()}
PAPER_ROUTERS = names.PAPER_ROUTERS


def get_router_spec(name: str) -> RouterSpec:
  """Looks a router up by name; an unknown name fails listing the valid ones."""
  if name not in ROUTERS:
    raise ValueError(f'unknown router {name!r}; valid routers: {", ".join(sorted(ROUTERS))}.')
  return ROUTERS[name]


def sparsity_solver_defaults(capacity_factor: float) -> tuple[int, int]:
  """(sparsity_steps, sparsity_warm_start) of the sparsity-constrained solver at capacity c.

  From the potentials of 10 Sinkhorn iterations when c <= 1 (the plan is then nearly an
  assignment; 5 L-BFGS steps from there beat 10 from 0, in less time), and 10 steps from 0 when
  c > 1 (the entropic start is worse there); see affinity.sparsity_constrained and
  bench/results/sparsity_solver.json.
  """
  return (5, 10) if capacity_factor <= 1 else (10, 0)


# Routers whose combine weights take the softmax of the clean logits in training, when
# RouterConfig.noisy_combine is not set: the reference's token-choice Sinkhorn (KL-projection)
# router does (vmoe/projects/sparsity_constrained_ot/kl_projection_routing.py, where
# `gates_softmax_noisy = jax.nn.softmax(gates_logits)`), and so does the paper's softmax(X W).
# Its other routers combine with the noisy softmax (docs/fidelity.md, D5).
CLEAN_COMBINE_ROUTERS = ('sinkhorn_tc',)


@dataclasses.dataclass(frozen=True)
class RouterConfig:
  """Everything that defines a router; built from `config.moe.router` (`RouterConfig(**cfg)`).

  capacity_factor is c for expert choice and Soft MoE, and k (experts per token, an integer) for
  token choice; the buffer capacity is C = round(c * T / E), rounded by capacity_rounding
  (allocation.CAPACITY_ROUNDINGS; default the paper's round, halves to even).
  noise_std is relative, as V-MoE's: the Gaussian noise added to the logits in training has std
  noise_std / E. The default 0 means no noise; the paper configs' presets (configs/common.py,
  moe_config) set 1.0, the reference routers' default, for the softmax and Sinkhorn routers.
  softmax_combine: sparse routers whose affinity is not softmax dispatch with it but combine with
  softmax(X W) at the dispatched positions (the paper's trick); False combines with the affinity.
  noisy_combine: in training, whether that softmax is of the noisy logits the router dispatched
  with (True) or of the clean ones (False); None (the default) takes the reference's choice for
  the router (False for CLEAN_COMBINE_ROUTERS, True otherwise). Without noise both are the same.
  sparsity_steps and sparsity_warm_start: L-BFGS steps of the sparsity-constrained OT solver and
  Sinkhorn iterations of its entropic starting point (0: start at 0); see
  affinity.sparsity_constrained. None (the default) takes `sparsity_solver_defaults(c)`;
  sparsity_memory: the curvature pairs its L-BFGS keeps.
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

  def __post_init__(self):
    spec = get_router_spec(self.name)
    steps, warm_start = sparsity_solver_defaults(self.capacity_factor)
    if self.sparsity_steps is None:
      object.__setattr__(self, 'sparsity_steps', steps)
    if self.sparsity_warm_start is None:
      object.__setattr__(self, 'sparsity_warm_start', warm_start)
    if self.noisy_combine is None:
      object.__setattr__(self, 'noisy_combine', self.name not in CLEAN_COMBINE_ROUTERS)
    if self.capacity_factor <= 0:
      raise ValueError(f'router {self.name}: capacity factor must be > 0, got '
                       f'{self.capacity_factor} (moe.router.capacity_factor).')
    if spec.allocation == names.TOKEN_CHOICE and int(self.capacity_factor) != self.capacity_factor:
      raise ValueError(f'router {self.name}: token choice uses capacity_factor as k, the number of '
                       f'experts per token, which must be an integer; got {self.capacity_factor} '
                       '(moe.router.capacity_factor).')
    if self.noise_std < 0 or self.importance_loss_weight < 0 or self.load_loss_weight < 0:
      raise ValueError(f'router {self.name}: noise_std and loss weights must be >= 0.')
    if self.load_loss_weight > 0 and (spec.allocation != names.TOKEN_CHOICE or self.noise_std <= 0):
      raise ValueError(f'router {self.name}: the load loss is defined for token choice with router '
                       'noise; set load_loss_weight=0 or use noise_std > 0 with a *_tc router.')
    if self.sinkhorn_iters < 1 or self.sparsity_steps < 0 or self.sparsity_warm_start < 0:
      raise ValueError('sinkhorn_iters must be >= 1, sparsity_steps and sparsity_warm_start >= 0.')
    if self.sparsity_memory < 1:
      raise ValueError(f'sparsity_memory must be >= 1 (L-BFGS curvature pairs), got '
                       f'{self.sparsity_memory}.')
    if self.capacity_rounding not in allocation.CAPACITY_ROUNDINGS:
      raise ValueError(f'unknown capacity_rounding {self.capacity_rounding!r}; valid: '
                       f'{", ".join(allocation.CAPACITY_ROUNDINGS)}.')

  @property
  def spec(self) -> RouterSpec:
    return ROUTERS[self.name]

  def check_num_experts(self, num_experts: int) -> None:
    """Token choice selects k <= E experts per token; fails naming both otherwise (moe.MoeConfig
    checks it as it is built)."""
    if self.spec.allocation == names.TOKEN_CHOICE and self.capacity_factor > num_experts:
      raise ValueError(f'router {self.name} selects k={int(self.capacity_factor)} experts per '
                       f'token but only E={num_experts} experts exist; lower k '
                       '(moe.router.capacity_factor) or raise moe.num_experts.')

  def capacity(self, num_tokens: int, num_experts: int) -> int:
    """Buffer capacity C (slots per expert) for groups of `num_tokens` tokens."""
    return allocation.compute_capacity(num_tokens, num_experts, self.capacity_factor,
                                       self.capacity_rounding)


class SparseRouting(NamedTuple):
  """Index-form routing tensors of G groups: slot_token (G, E, C) int32 (S = empty slot) and
  slot_weight (G, E, C), the combine weight of the slot's token (0 for empty slots)."""
  slot_token: jax.Array
  slot_weight: jax.Array


class DenseRouting(NamedTuple):
  """The paper's dense routing tensors of G groups, each (G, S, E, C)."""
  dispatch: jax.Array
  combine: jax.Array


def route_group(logits: jax.Array, config: RouterConfig, capacity: int,
                clean_logits: jax.Array | None = None):
  """Sparse routing of one group: logits (S, E) -> (slot_token, slot_weight, report).

  slot_token and slot_weight are (E, C); report is the sparsity-constrained solver's
  affinity.SolverReport, None for the other affinities. The affinity picks the dispatch (a
  discrete choice: no gradient flows through it); the combine weights are softmax(logits) at the
  dispatched positions (softmax(clean_logits) when given and config.noisy_combine is False: the
  logits before training noise), or the affinity itself when softmax_combine is off, and carry
  the router's gradient.
  """
  spec = config.spec
  probs = affinity.softmax(logits)
  scores, report = AFFINITIES[spec.affinity](logits, probs, capacity, config)
  slot_token = ALLOCATIONS[spec.allocation](jax.lax.stop_gradient(scores), capacity, config)
  if not config.softmax_combine:
    combine_scores = scores
  elif clean_logits is None or config.noisy_combine:
    combine_scores = probs
  else:
    combine_scores = affinity.softmax(clean_logits)
  return slot_token, allocation.slot_weights(slot_token, combine_scores), report


def auxiliary_loss(logits, noisy_logits, config: RouterConfig) -> jax.Array:
  """Weighted importance + load losses (Appendix A), averaged over groups; logits (G, S, E).

  The importance loss takes the clean probabilities softmax(X W), as Appendix A defines it and as
  V-MoE computes it (before adding the noise); the load loss takes both (losses.load_loss).
  """
  total = jnp.zeros((), jnp.float32)
  if config.importance_loss_weight > 0:
    gates = jax.nn.softmax(logits, axis=-1)
    total += config.importance_loss_weight * jnp.mean(jax.vmap(losses.importance_loss)(gates))
  if config.load_loss_weight > 0:
    std = config.noise_std / logits.shape[-1]
    k = int(config.capacity_factor)
    per_group = jax.vmap(lambda l, n: losses.load_loss(l, n, std, k))(logits, noisy_logits)
    total += config.load_loss_weight * jnp.mean(per_group)
  return total


class Router(nn.Module):
  """Owns the router parameters (W (D, E), or Soft MoE's Phi (D, E, C) and scale) and the noise.

  Call with groups x (G, S, D); returns (SparseRouting | DenseRouting, metrics): metrics holds
  'aux_loss' and, for the sparsity-constrained affinity, the solver's health over the G groups,
  'solver_row_error' (mean |row sum - 1|) and 'solver_fallbacks' (how many groups' solvers
  returned their start; see affinity.SolverReport). Training noise draws from the 'gating' RNG
  stream.
  """
  config: RouterConfig
  num_experts: int

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    _, num_tokens, dim = x.shape
    capacity = self.config.capacity(num_tokens, self.num_experts)
    if self.config.spec.allocation == names.SOFT_ALLOCATION:
      # lecun_normal with its default axes on (D, E, C), as the reference's Soft MoE router
      # initialises its (D, E, C) slot parameters: fan-in = E * D (in_axis E, receptive field D),
      # so Phi starts sqrt(E) times smaller than with fan-in D.
      phi = self.param('phi', nn.initializers.lecun_normal(), (dim, self.num_experts, capacity))
      scale = self.param('scale', nn.initializers.ones, ())
      dispatch, combine = jax.vmap(soft.soft_routing, in_axes=(0, None, None))(x, phi, scale)
      return DenseRouting(dispatch, combine), {'aux_loss': jnp.zeros((), jnp.float32)}

    kernel = self.param('kernel', nn.initializers.lecun_normal(), (dim, self.num_experts))
    logits = jnp.einsum('gsd,de->gse', x.astype(jnp.float32), kernel)
    noisy_logits = logits
    if train and self.config.noise_std > 0:
      std = self.config.noise_std / self.num_experts
      noisy_logits = logits + std * jax.random.normal(self.make_rng('gating'), logits.shape)
    # The clean logits go along only when noise was drawn: otherwise they are the routed ones.
    routed = (noisy_logits,) if noisy_logits is logits else (noisy_logits, logits)
    slot_token, slot_weight, report = jax.vmap(
        lambda noisy, clean=None: route_group(noisy, self.config, capacity, clean))(*routed)
    metrics = {'aux_loss': auxiliary_loss(logits, noisy_logits, self.config)}
    if report is not None:
      metrics.update(solver_row_error=jnp.mean(report.row_error),
                     solver_fallbacks=jnp.sum(report.fell_back))
    return SparseRouting(slot_token, slot_weight), metrics
