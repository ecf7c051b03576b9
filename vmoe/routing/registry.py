"""The router registry: every router is one `RouterSpec`, registered under its name.

Axis letters: g = routing group, s = token of a routing group (T = S in the paper's notation),
e = expert, c = buffer slot.

A spec composes, as the paper decouples them (Sec. 2-3), in at most eight fields:
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
- presets: the RouterConfig values the configs give this router (noise, clean or noisy combine,
  loss weights); options: knobs of its own with their defaults (`config.moe.router.options`);
- extras: (BatchRouting of all the layer's groups) -> (auxiliary loss, {name: scalar metric}),
  once per call: a router's own losses and health metrics;
- title: its name in tables and figures.

The paper's routers are literal specs in paper_routers.py, the routers after it in
lab_routers.py; router.py registers both. A user's router is one `register(name,
RouterSpec(...))` call in a module of their own, named by the config argument `router_module=`
(docs/routers.md); nothing under vmoe/, launch/ or results/ changes. This module holds no
JAX-traced code of its own beyond the paper's combine.
"""
import dataclasses
import importlib
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple

import jax

from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import names

if TYPE_CHECKING:   # The config's class; router.py imports this module.
  from vmoe.routing.router import RouterConfig


class GroupInputs(NamedTuple):
  """What an affinity, a combine and a state's statistics see of one routing group."""
  logits: jax.Array          # (S, E) the routed logits: with the training noise where drawn.
  clean_logits: jax.Array    # (S, E) the same logits before any noise.
  probs: jax.Array           # (S, E) softmax(logits), the paper's softmax affinity.
  capacity: int              # C, slots per expert.
  config: 'RouterConfig'
  state: Mapping[str, jax.Array]   # The router's state ({} for a router without one).
  train: bool


def _no_check(config, num_tokens: int | None, num_experts: int | None) -> None:
  del config, num_tokens, num_experts


@dataclasses.dataclass(frozen=True)
class Allocation:
  """A sparse allocation (or Soft MoE's, slots None): how scores fill the experts' buffers.

  kind: the allocation's name in names.py (results group routers by it). slots(scores (S, E),
  capacity C, config) -> slot_token (E, C) int32, S for an empty slot. check(config, num_tokens,
  num_experts) raises ValueError, saying what to change, for a config this allocation cannot run;
  num_tokens and num_experts are None where not yet known (the config alone is checked then).
  in_evaluation: the allocation evaluation uses instead, if another (BASE: greedy top-1).
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
  config: 'RouterConfig'


# RouterSpec fields of before (one hook per router), and what replaces each.
_REPLACED_FIELDS = {
    'eval_allocation': "allocation=Allocation(..., in_evaluation=<the evaluation's Allocation>)",
    'loss': 'extras=(BatchRouting) -> (aux_loss, metrics), which returns the loss',
    'metrics': 'extras=(BatchRouting) -> (aux_loss, metrics), which returns the metrics',
    'frozen_kernel': "state=RouterState(init returning {'kernel': W0}) with no update",
}


@dataclasses.dataclass(frozen=True)
class RouterSpec:
  """One router: see the module docstring."""
  affinity: Callable | None
  allocation: Allocation
  combine: Callable | None = None          # None: paper_combine.
  presets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  state: RouterState | None = None
  extras: Callable | None = None           # (BatchRouting) -> (aux_loss, {name: scalar}).
  title: str = ''

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


def _spec_init(self, *args, **kwargs):
  """RouterSpec's constructor, naming the field to change for a spec written to its old form."""
  old = sorted(set(kwargs) & set(_REPLACED_FIELDS))
  if old:
    raise ValueError(f'RouterSpec has no field {old[0]!r} any more: give '
                     f'{_REPLACED_FIELDS[old[0]]} (docs/routers.md, "What a spec holds").')
  _dataclass_init(self, *args, **kwargs)


_dataclass_init = RouterSpec.__init__
RouterSpec.__init__ = _spec_init


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


ROUTERS: dict[str, RouterSpec] = {}
BUILT_IN: set[str] = set()     # The routers this repository registers (router.py): never replaced.


def register(name: str, spec: RouterSpec) -> RouterSpec:
  """Adds `spec` under `name`. A user's router registered again (its module imported once by
  pytest and once by name) replaces itself; a built-in router's name cannot be taken."""
  if name == names.DENSE or (name in BUILT_IN and ROUTERS[name] != spec):
    raise ValueError(f'router name {name!r} is taken by this repository; pick another.')
  ROUTERS[name] = spec
  return spec


def get(name: str) -> RouterSpec:
  """The spec of `name`; an unknown name fails listing the registered ones."""
  if name not in ROUTERS:
    raise ValueError(f'unknown router {name!r}; valid routers: {", ".join(sorted(ROUTERS))} '
                     '(a router of your own: register it in a module and pass '
                     'router_module=PATH, docs/routers.md).')
  return ROUTERS[name]


USER_MODULE_PREFIX = 'vmoe_router_module_'   # sys.modules' name of a router module given as a path.


def import_router_module(module: str) -> None:
  """Imports the module that registers a user's routers: a dotted module name importable from
  the working directory, or the path of a .py file. '' imports nothing."""
  if not module:
    return
  try:
    if module.endswith('.py'):
      path = os.path.abspath(module)
      name = USER_MODULE_PREFIX + os.path.splitext(os.path.basename(path))[0]
      if name in sys.modules:
        return
      spec = importlib.util.spec_from_file_location(name, path)
      if spec is None or not os.path.isfile(path):
        raise ModuleNotFoundError(f'no file {path}')
      loaded = importlib.util.module_from_spec(spec)
      sys.modules[name] = loaded
      spec.loader.exec_module(loaded)
    else:
      if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
      importlib.import_module(module)
  except ModuleNotFoundError as e:
    raise ValueError(f'router_module={module!r} cannot be imported ({e}); pass a .py file path '
                     'or a dotted module name importable from the working directory.') from None


# The allocations of the paper (Algorithms 1 and 2) and Soft MoE's.


def check_token_choice(config, num_tokens: int | None, num_experts: int | None) -> None:
  """Token choice takes k experts per token, k <= E: config.experts_per_token, which is the
  capacity factor (then an integer) unless num_selected_experts sets k apart."""
  key = 'moe.router.capacity_factor'
  if config.num_selected_experts is None and int(config.capacity_factor) != config.capacity_factor:
    raise ValueError(f'router {config.name}: token choice uses capacity_factor as k, the number '
                     f'of experts per token, which must be an integer; got '
                     f'{config.capacity_factor} ({key}).')
  if config.num_selected_experts is not None:
    key = 'moe.router.num_selected_experts'
  k = config.experts_per_token
  if num_experts is not None and k > num_experts:
    raise ValueError(f'router {config.name} selects k={k} experts per token but only '
                     f'E={num_experts} experts exist; lower k ({key}) or raise moe.num_experts.')


def check_expert_choice(config, num_tokens: int | None, num_experts: int | None) -> None:
  """An expert choosing its top C tokens needs C <= T, in training and in evaluation."""
  if num_tokens is not None and num_experts is not None:
    for train in (True, False):
      allocation.check_expert_choice_capacity(config.capacity(num_tokens, num_experts, train),
                                              num_tokens)


TOKEN_CHOICE = Allocation(
    names.TOKEN_CHOICE,
    lambda scores, capacity, config: allocation.token_choice_slots(
        scores, capacity, config.experts_per_token),
    check_token_choice)
EXPERT_CHOICE = Allocation(
    names.EXPERT_CHOICE,
    lambda scores, capacity, config: allocation.expert_choice_slots(scores, capacity),
    check_expert_choice)
SOFT = Allocation(names.SOFT_ALLOCATION, None)
