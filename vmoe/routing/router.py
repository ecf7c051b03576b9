"""Routers: a registry composing an affinity with an allocation, or Soft MoE.

Axis letters: g = routing group, s = token within a group (T = S in the paper's notation),
d = model dim, e = expert, c = buffer slot.

A router maps a batch of token groups X (G, S, D) to routing tensors. Sparse routers return them in
index form (`SparseRouting`: the token held by every buffer slot and its combine weight); Soft MoE
returns dense tensors (`DenseRouting`). The maths lives in pure functions (affinity.py,
allocation.py, soft.py, losses.py); the `Router` module only owns the parameters and the noise.
"""
import dataclasses
import math
from typing import Any, Mapping, NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import lab_routers
from vmoe.routing import losses
from vmoe.routing import names
from vmoe.routing import paper_routers
from vmoe.routing import registry
from vmoe.routing import soft


# The built-in routers: the paper's (paper_routers.py) and those published after it
# (lab_routers.py), each a literal spec in its module; registered here, and never replaced.
for _name, _spec in {**paper_routers.ROUTERS, **lab_routers.ROUTERS}.items():
  registry.register(_name, _spec)
registry.BUILT_IN.update(registry.ROUTERS)
ROUTERS = registry.ROUTERS
PAPER_ROUTERS = names.PAPER_ROUTERS


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
  (allocation.CAPACITY_ROUNDINGS; default the paper's round, halves to even).
  num_selected_experts: token choice's k apart from c, as V-MoE's routers have it: k experts per
  token and C = rounding(c * k * T / E) (V-MoE's ImageNet-1k S/32: k = 2, c = 1.05, C on 2T/E up
  to a multiple of 4). None (the default): k is capacity_factor, the paper configs' convention.
  eval_capacity_factor: c in evaluation, for sparse routers (V-MoE evaluates at 4.0; token choice
  needs num_selected_experts with it, so that k stays what training used); None: as training.
  noise_std is relative, as V-MoE's: the Gaussian noise added to the logits in training has std
  noise_std / E. The default 0 means no noise; the router's presets (RouterSpec.presets, which
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
  options: the router's own knobs (RouterSpec.options), given values over its defaults; an
  unknown key fails listing the valid ones.
  module: the module that registers this router, for a router of a user's own
  (registry.import_router_module: a dotted name or a .py path); '' for the built-in routers.
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
  options: Mapping[str, Any] = flax.core.FrozenDict()
  module: str = ''
  num_selected_experts: int | None = None
  eval_capacity_factor: float | None = None

  def __post_init__(self):
    registry.import_router_module(self.module)
    spec = registry.get(self.name)
    steps, warm_start = sparsity_solver_defaults(self.capacity_factor)
    if self.sparsity_steps is None:
      object.__setattr__(self, 'sparsity_steps', steps)
    if self.sparsity_warm_start is None:
      object.__setattr__(self, 'sparsity_warm_start', warm_start)
    if self.noisy_combine is None:
      object.__setattr__(self, 'noisy_combine', spec.presets.get('noisy_combine', True))
    given = dict(self.options or {})
    unknown = sorted(set(given) - set(spec.options))
    if unknown:
      raise ValueError(f'router {self.name} has no option {", ".join(unknown)}; its options: '
                       f'{", ".join(sorted(spec.options)) or "none"} (moe.router.options).')
    object.__setattr__(self, 'options', flax.core.FrozenDict({**spec.options, **given}))
    if not math.isfinite(self.capacity_factor) or self.capacity_factor <= 0:
      raise ValueError(f'router {self.name}: capacity factor must be > 0, got '
                       f'{self.capacity_factor} (moe.router.capacity_factor).')
    self._check_capacities(spec)
    for allocation_used in {spec.allocation, spec.allocation_at(train=False)}:
      allocation_used.check(self, None, None)
    weights = (self.noise_std, self.importance_loss_weight, self.load_loss_weight)
    if not all(math.isfinite(w) and w >= 0 for w in weights):
      raise ValueError(f'router {self.name}: noise_std and loss weights must be finite and >= 0.')
    if self.load_loss_weight > 0 and (spec.allocation.kind != names.TOKEN_CHOICE
                                      or self.noise_std <= 0):
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

  def _check_capacities(self, spec: registry.RouterSpec) -> None:
    """num_selected_experts for token choice only; eval_capacity_factor for sparse routers."""
    k, c_eval = self.num_selected_experts, self.eval_capacity_factor
    if k is not None and (spec.allocation.kind != names.TOKEN_CHOICE or int(k) != k or k < 1):
      raise ValueError(f'router {self.name}: moe.router.num_selected_experts={k} is token '
                       'choice\'s k apart from c: an integer >= 1, for a token choice router '
                       '(None: k is the capacity factor).')
    if c_eval is None:
      return
    if not math.isfinite(c_eval) or c_eval <= 0:
      raise ValueError(f'router {self.name}: moe.router.eval_capacity_factor must be > 0 or '
                       f'None, got {c_eval}.')
    if spec.allocation.slots is None:
      raise ValueError(f'router {self.name}: Soft MoE\'s slots are parameters, so its capacity '
                       'cannot change in evaluation; set moe.router.eval_capacity_factor=None.')
    if spec.allocation.kind == names.TOKEN_CHOICE and k is None:
      raise ValueError(f'router {self.name}: token choice reads the capacity factor as k; set '
                       'moe.router.num_selected_experts too, to evaluate at another capacity '
                       'with the same k.')

  @property
  def spec(self) -> registry.RouterSpec:
    return registry.get(self.name)

  @property
  def experts_per_token(self) -> int:
    """Token choice's k: num_selected_experts, else the capacity factor."""
    return int(self.num_selected_experts or self.capacity_factor)

  def check_shape(self, num_tokens: int | None, num_experts: int) -> None:
    """The allocations' checks that need T (tokens per group; None where not yet known) and E,
    in training and in evaluation; each fails saying what to change."""
    spec = self.spec
    for allocation_used in {spec.allocation, spec.allocation_at(train=False)}:
      allocation_used.check(self, num_tokens, num_experts)

  def capacity(self, num_tokens: int, num_experts: int, train: bool = True) -> int:
    """Buffer capacity C (slots per expert) for groups of `num_tokens` tokens: c T / E rounded,
    with T counted k times where k is set apart (num_selected_experts), and c the evaluation's
    where it is set (eval_capacity_factor) and train is False."""
    factor = self.capacity_factor
    if not train and self.eval_capacity_factor is not None:
      factor = self.eval_capacity_factor
    requests = num_tokens * (self.num_selected_experts or 1)
    return allocation.compute_capacity(requests, num_experts, factor, self.capacity_rounding)


class SparseRouting(NamedTuple):
  """Index-form routing tensors of G groups: slot_token (G, E, C) int32 (S = empty slot) and
  slot_weight (G, E, C), the combine weight of the slot's token (0 for empty slots)."""
  slot_token: jax.Array
  slot_weight: jax.Array


class DenseRouting(NamedTuple):
  """The paper's dense routing tensors of G groups, each (G, S, E, C)."""
  dispatch: jax.Array
  combine: jax.Array


def route_inputs(inputs: registry.GroupInputs):
  """Sparse routing of one group by its router's spec -> (slot_token, slot_weight, report,
  dispatch scores).

  slot_token and slot_weight are (E, C); report is the sparsity-constrained solver's
  affinity.SolverReport, None for the other affinities. The affinity picks the dispatch (a
  discrete choice: no gradient flows through it); the spec's combine gives the weights at the
  dispatched positions and carries the router's gradient.
  """
  spec = inputs.config.spec
  scores, report = spec.affinity(inputs)
  slots = spec.allocation_at(inputs.train).slots
  slot_token = slots(jax.lax.stop_gradient(scores), inputs.capacity, inputs.config)
  combine_scores = spec.combine_fn(inputs, scores)
  return slot_token, allocation.slot_weights(slot_token, combine_scores), report, scores


def route_group(logits: jax.Array, config: RouterConfig, capacity: int,
                clean_logits: jax.Array | None = None, state=None, train: bool = True):
  """Sparse routing of one group: logits (S, E) -> (slot_token, slot_weight, report).

  clean_logits: the logits before training noise (default: `logits`, no noise drawn); state:
  the router's state ({} without); see route_inputs.
  """
  inputs = registry.GroupInputs(logits, logits if clean_logits is None else clean_logits,
                                affinity.softmax(logits), capacity, config, state or {}, train)
  return route_inputs(inputs)[:3]


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
    k = config.experts_per_token
    per_group = jax.vmap(lambda l, n: losses.load_loss(l, n, std, k))(logits, noisy_logits)
    total += config.load_loss_weight * jnp.mean(per_group)
  return total


ROUTER_STATE = 'router_state'   # The flax collection of the routers' states (TrainState's too).


class Router(nn.Module):
  """Owns the router parameters (W (D, E), or Soft MoE's Phi (D, E, C) and scale), its state and
  the noise.

  Call with groups x (G, S, D); returns (SparseRouting | DenseRouting, metrics): metrics holds
  'aux_loss', the spec's own metrics, 'state_NAME_range' (max - min) of each floating array of
  a router state (lossfree_tc's 'state_bias_range') and, for the sparsity-constrained affinity,
  the solver's health over the G groups, 'solver_row_error' (mean |row sum - 1|) and
  'solver_fallbacks' (how many groups' solvers returned their start; see affinity.SolverReport).
  Training noise draws from the 'gating' RNG stream.

  A router with a RouterState keeps it in the ROUTER_STATE collection ('state'; a frozen gating
  kernel is 'kernel' there). In training, where that collection is mutable, the state is updated
  once per call, after routing with the old state, from the statistics summed over all G groups
  (under a mesh the sum spans every device). Evaluation passes the collection immutable: frozen.
  """
  config: RouterConfig
  num_experts: int

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    _, num_tokens, dim = x.shape
    capacity = self.config.capacity(num_tokens, self.num_experts, train)
    spec = self.config.spec
    if spec.allocation.slots is None:
      # lecun_normal with its default axes on (D, E, C), as the reference's Soft MoE router
      # initialises its (D, E, C) slot parameters: fan-in = E * D (in_axis E, receptive field D),
      # so Phi starts sqrt(E) times smaller than with fan-in D.
      phi = self.param('phi', nn.initializers.lecun_normal(), (dim, self.num_experts, capacity))
      scale = self.param('scale', nn.initializers.ones, ())
      dispatch, combine = jax.vmap(soft.soft_routing, in_axes=(0, None, None))(x, phi, scale)
      return DenseRouting(dispatch, combine), {'aux_loss': jnp.zeros((), jnp.float32)}

    state, frozen = None, {}
    if spec.state is not None and spec.state.frozen:   # Drawn at init, each array a variable.
      frozen = self._frozen_state(spec.state, dim)
    elif spec.state is not None:
      state = self.variable(ROUTER_STATE, 'state', lambda: spec.state.init(
          self.make_rng('params'), dim, self.num_experts, self.config))
    if 'kernel' in frozen:   # A frozen gating kernel, out of the parameters (and the optimizer).
      kernel = frozen['kernel']
    else:
      kernel = self.param('kernel', nn.initializers.lecun_normal(), (dim, self.num_experts))
    logits = jnp.einsum('gsd,de->gse', x.astype(jnp.float32), kernel)
    noisy_logits = logits
    if train and self.config.noise_std > 0:
      std = self.config.noise_std / self.num_experts
      noisy_logits = logits + std * jax.random.normal(self.make_rng('gating'), logits.shape)
    values = {**frozen, **({} if state is None else state.value)}

    probs = affinity.softmax(noisy_logits)     # Once, for the routing and the state's statistics.

    def inputs_of(noisy, clean, group_probs):   # One group's inputs; the state is shared.
      return registry.GroupInputs(noisy, clean, group_probs, capacity, self.config, values, train)

    slot_token, slot_weight, report, scores = jax.vmap(
        lambda *group: route_inputs(inputs_of(*group)))(noisy_logits, logits, probs)
    metrics = {'aux_loss': auxiliary_loss(logits, noisy_logits, self.config)}
    if spec.extras is not None:
      extra_loss, extra_metrics = spec.extras(registry.BatchRouting(noisy_logits, logits,
                                                                    slot_token, self.config))
      metrics.update(extra_metrics, aux_loss=metrics['aux_loss'] + extra_loss)
    for name, value in ({} if state is None else state.value).items():   # Its health: a
      # state's spread, as the bias's range.
      if jnp.ndim(value) >= 1 and jnp.issubdtype(value.dtype, jnp.floating):
        metrics[f'state_{name}_range'] = jnp.max(value) - jnp.min(value)
    if report is not None:
      metrics.update(solver_row_error=jnp.mean(report.row_error),
                     solver_fallbacks=jnp.sum(report.fell_back))
    if (train and state is not None and spec.state.update is not None
        and self.is_mutable_collection(ROUTER_STATE)):
      per_group = jax.vmap(lambda noisy, clean, group_probs, scores, slots: spec.state.statistics(
          inputs_of(noisy, clean, group_probs), scores, slots))(noisy_logits, logits, probs,
                                                                scores, slot_token)
      summed = jax.tree.map(lambda v: jnp.sum(jax.lax.stop_gradient(v), axis=0), per_group)
      state.value = spec.state.update(state.value, summed, self.config)
    return SparseRouting(slot_token, slot_weight), metrics

  def _frozen_state(self, state: registry.RouterState, dim: int) -> dict:
    """A frozen state's arrays, each a variable of ROUTER_STATE under its own name, drawn once
    at init from one 'params' key (the key a gating parameter would take at this point)."""
    keys = jax.eval_shape(lambda: state.init(jax.random.PRNGKey(0), dim, self.num_experts,
                                             self.config))
    drawn = {}

    def draw(name):
      if not drawn:
        drawn.update(state.init(self.make_rng('params'), dim, self.num_experts, self.config))
      return drawn[name]

    return {name: self.variable(ROUTER_STATE, name, lambda n=name: draw(n)).value for name in keys}
