"""Routers: the Flax module that runs a registered router (registry.py), and the routing of one
group by its spec.

Axis letters: g = routing group, s = token within a group (T = S in the paper's notation),
d = model dim, e = expert, c = buffer slot.

A router maps a batch of token groups X (G, S, D) to routing tensors. Sparse routers return them in
index form (`SparseRouting`: the token held by every buffer slot and its combine weight); Soft MoE
returns dense tensors (`DenseRouting`). The maths lives in pure functions (affinity.py,
allocation.py, soft.py, losses.py); the `Router` module only owns the parameters and the noise.
"""
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import declarations
from vmoe.routing import losses
from vmoe.routing import registry
from vmoe.routing import router_config
from vmoe.routing import router_spec
from vmoe.routing import soft

ROUTERS = registry.ROUTERS                    # Every registered router's spec, by name.
PAPER_ROUTERS = declarations.PAPER_ROUTERS    # The paper's six, in its row order.


def check_allocations(config: router_config.RouterConfig, num_tokens: int | None,
                      num_experts: int | None) -> None:
  """The checks of the router's allocations, in training and in evaluation, that need T (tokens
  per group) and E (None where not yet known); each fails saying what to change. Run by
  vmoe/train/experiment.py `parse`, since they need the router's implementation."""
  spec = registry.get(config.name)
  for allocation_used in {spec.allocation, spec.allocation_at(train=False)}:
    allocation_used.check(config, num_tokens, num_experts)


class SparseRouting(NamedTuple):
  """Index-form routing tensors of G groups: slot_token (G, E, C) int32 (S = empty slot) and
  slot_weight (G, E, C), the combine weight of the slot's token (0 for empty slots)."""
  slot_token: jax.Array
  slot_weight: jax.Array


class DenseRouting(NamedTuple):
  """The paper's dense routing tensors of G groups, each (G, S, E, C)."""
  dispatch: jax.Array
  combine: jax.Array


def route_inputs(inputs: router_spec.GroupInputs):
  """Sparse routing of one group by its router's spec -> (slot_token, slot_weight, report,
  dispatch scores).

  slot_token and slot_weight are (E, C); report is the sparsity-constrained solver's
  affinity.SolverReport, None for the other affinities. The affinity picks the dispatch (a
  discrete choice: no gradient flows through it); the spec's combine gives the weights at the
  dispatched positions and carries the router's gradient.
  """
  spec = registry.get(inputs.config.name)
  scores, report = spec.affinity(inputs)
  slots = spec.allocation_at(inputs.train).slots
  slot_token = slots(jax.lax.stop_gradient(scores), inputs.capacity, inputs.config)
  combine_scores = spec.combine_fn(inputs, scores)
  return slot_token, allocation.slot_weights(slot_token, combine_scores), report, scores


def route_group(logits: jax.Array, config: router_config.RouterConfig, capacity: int,
                clean_logits: jax.Array | None = None, state=None, train: bool = True):
  """Sparse routing of one group: logits (S, E) -> (slot_token, slot_weight, report).

  clean_logits: the logits before training noise (default: `logits`, no noise drawn); state:
  the router's state ({} without); see route_inputs.
  """
  inputs = router_spec.GroupInputs(logits, logits if clean_logits is None else clean_logits,
                                affinity.softmax(logits), capacity, config, state or {}, train)
  return route_inputs(inputs)[:3]


def auxiliary_loss(logits, noisy_logits, config: router_config.RouterConfig) -> jax.Array:
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
  config: router_config.RouterConfig
  num_experts: int

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool):
    _, num_tokens, dim = x.shape
    capacity = self.config.capacity(num_tokens, self.num_experts, train)
    spec = registry.get(self.config.name)
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
      return router_spec.GroupInputs(noisy, clean, group_probs, capacity, self.config, values,
                                     train)

    slot_token, slot_weight, report, scores = jax.vmap(
        lambda *group: route_inputs(inputs_of(*group)))(noisy_logits, logits, probs)
    metrics = {'aux_loss': auxiliary_loss(logits, noisy_logits, self.config)}
    if spec.extras is not None:
      extra_loss, extra_metrics = spec.extras(router_spec.BatchRouting(noisy_logits, logits,
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

  def _frozen_state(self, state: router_spec.RouterState, dim: int) -> dict:
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
