"""A router's implementation: the `RouterSpec` type and the types its functions see.

Axis letters: g = routing group, s = token of a routing group (T = S in the paper's notation),
e = expert, c = buffer slot.

A router is its declaration (declarations.py: name, title, allocation kind, presets, options;
free of JAX) and its implementation, a RouterSpec. A spec composes, as the paper decouples them
(Sec. 2-3), in at most five fields:
- affinity: a pure function of one group's `GroupInputs` -> (dispatch scores (S, E), solver
  report or None); the allocation picks slots from these scores, and no gradient flows through
  the pick;
- allocation: an `Allocation`, the record of a sparse allocation: its slot function, the checks
  it owns (token choice's integer k <= E, expert choice's C <= T, ...) and, where evaluation
  allocates otherwise, the allocation it uses there (`in_evaluation`: BASE's greedy top-1);
- combine: (GroupInputs, dispatch scores) -> combine scores (S, E), gathered at the dispatched
  slots; it carries the router's gradient and may differ from the scores that dispatch;
- state: a `RouterState`, a non-gradient collection the router keeps: updated once per training
  step from statistics summed over every group (on a mesh, a global sum), or never (a frozen
  state: random_tc's gating kernel, drawn once);
- extras: (BatchRouting of all the layer's groups) -> (auxiliary loss, {name: scalar metric}),
  once per call: a router's own losses and health metrics.
The built-in specs are paper_routers.py's and lab_routers.py's; registry.py maps names to specs.
"""
import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import jax

from vmoe.routing import affinity
from vmoe.routing import router_config


class GroupInputs(NamedTuple):
  """What an affinity, a combine and a state's statistics see of one routing group."""
  logits: jax.Array          # (S, E) the routed logits: with the training noise where drawn.
  clean_logits: jax.Array    # (S, E) the same logits before any noise.
  probs: jax.Array           # (S, E) softmax(logits), the paper's softmax affinity.
  capacity: int              # C, slots per expert.
  config: router_config.RouterConfig
  state: Mapping[str, jax.Array]   # The router's state ({} for a router without one).
  train: bool


def _no_check(config, num_tokens: int | None, num_experts: int | None) -> None:
  del config, num_tokens, num_experts


@dataclasses.dataclass(frozen=True)
class Allocation:
  """A sparse allocation (or Soft MoE's, slots None): how scores fill the experts' buffers.

  kind: the allocation kind its router declares (declarations.py; results group routers by it).
  slots(scores (S, E), capacity C, config) -> slot_token (E, C) int32, S for an empty slot.
  check(config, num_tokens, num_experts) raises ValueError, saying what to change, for a config
  this allocation cannot run; num_tokens and num_experts are None where not yet known (the
  config alone is checked then). in_evaluation: the allocation evaluation uses instead, if
  another (BASE: greedy top-1).
  """
  kind: str
  slots: Callable | None
  check: Callable = _no_check
  in_evaluation: 'Allocation | None' = None


@dataclasses.dataclass(frozen=True)
class RouterState:
  """A router's non-gradient state, one set of arrays per MoE layer.

  init(rng, dim, num_experts, config) -> {name: array}: the initial values (rng for a state
  drawn at random, such as a frozen gating kernel).
  statistics(GroupInputs, dispatch scores, slot_token) -> {name: array}: one group's
  contribution; the layer sums them over its groups, so under a mesh the sum is global.
  update(state, summed statistics, config) -> new state, once per training step. Evaluation
  never updates.
  A frozen state (no statistics, no update) is drawn once and never changes; each of its arrays
  is a variable of its own, and one named 'kernel' (D, E) is the gating kernel, in place of the
  trained parameter (random_tc).
  """
  init: Callable
  statistics: Callable | None = None
  update: Callable | None = None

  @property
  def frozen(self) -> bool:
    return self.update is None


class BatchRouting(NamedTuple):
  """What a spec's `extras` sees of one call: all G groups of the layer."""
  logits: jax.Array          # (G, S, E) the routed logits, with the training noise where drawn.
  clean_logits: jax.Array    # (G, S, E) the same logits before any noise.
  slot_token: jax.Array      # (G, E, C) the allocation's slots (S marks an empty one).
  config: router_config.RouterConfig


_DECLARED = 'declarations.RouterDeclaration(name, title, allocation, presets=, options=)'
# Fields of specs of the forms before, and what replaces each.
REPLACED_FIELDS = {
    'eval_allocation': "allocation=Allocation(..., in_evaluation=<the evaluation's Allocation>)",
    'loss': 'extras=(BatchRouting) -> (aux_loss, metrics), which returns the loss',
    'metrics': 'extras=(BatchRouting) -> (aux_loss, metrics), which returns the metrics',
    'frozen_kernel': "state=RouterState(init returning {'kernel': W0}) with no update",
    'presets': f'presets in the router\'s declaration, {_DECLARED}',
    'options': f'options in the router\'s declaration, {_DECLARED}',
    'title': f'title in the router\'s declaration, {_DECLARED}',
}


@dataclasses.dataclass(frozen=True)
class RouterSpec:
  """One router's implementation: see the module docstring."""
  affinity: Callable | None
  allocation: Allocation
  combine: Callable | None = None          # None: paper_combine.
  state: RouterState | None = None
  extras: Callable | None = None           # (BatchRouting) -> (aux_loss, {name: scalar}).

  def __new__(cls, *args: Any, **kwargs: Any):
    """Names the field to give instead, for a spec written to a form before (the dataclass's
    own __init__ would only say 'unexpected keyword')."""
    del args
    old = sorted(set(kwargs) & set(REPLACED_FIELDS))
    if old:
      raise ValueError(f'RouterSpec has no field {old[0]!r} any more: give '
                       f'{REPLACED_FIELDS[old[0]]} (docs/routers.md, "What a spec holds").')
    return super().__new__(cls)

  def __post_init__(self):
    if (self.affinity is None) != (self.allocation.slots is None):
      raise ValueError('a router has an affinity exactly when its allocation has slots (Soft '
                       'MoE has neither).')

  @property
  def combine_fn(self) -> Callable:
    return self.combine or paper_combine

  def allocation_at(self, train: bool) -> Allocation:
    evaluation = self.allocation.in_evaluation
    return self.allocation if train or evaluation is None else evaluation


def paper_combine(inputs: GroupInputs, scores: jax.Array) -> jax.Array:
  """The paper's combine weights (Sec. 3.2, 4.4): softmax(X W) at the dispatched positions, of the
  noisy logits the router dispatched with, or of the clean ones where config.noisy_combine is
  False; the affinity itself where config.softmax_combine is False."""
  config = inputs.config
  if not config.softmax_combine:
    return scores
  if config.noisy_combine:
    return inputs.probs
  return affinity.softmax(inputs.clean_logits)
