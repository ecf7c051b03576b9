"""A router of one's own, declared and registered from this file alone: docs/routers.md's worked
example.

`ema_tc` is token choice on softmax(X W) penalised by each expert's recent share of the requests:
an expert that was asked for more than 1/E of the time is chosen less. The share is an
exponential moving average over training steps, so the router has state; it is not a renamed
paper router (those have no state), and it has presets and options of its own.

  python main.py --config=configs/tiny.py:router=ema_tc,router_module=docs/example_router.py \
      --workdir=workdirs/ema_tc
"""
import jax
import jax.numpy as jnp

from vmoe.routing import declarations
from vmoe.routing import paper_routers
from vmoe.routing import registry
from vmoe.routing import router_spec


def _scores(inputs: router_spec.GroupInputs):
  """Dispatch scores: the softmax minus `penalty` times the expert's recent share of requests."""
  penalty = inputs.config.options['penalty']
  return inputs.probs - penalty * inputs.state['share'][None, :], None


def _initial_share(rng, dim, num_experts, config):
  del rng, dim, config
  return {'share': jnp.full((num_experts,), 1.0 / num_experts, jnp.float32)}


def _requests(inputs: router_spec.GroupInputs, scores, slot_token):
  """One group's requests per expert: every token's top k of the dispatch scores."""
  del slot_token   # Requests, before any token is dropped.
  k = inputs.config.experts_per_token
  _, chosen = jax.lax.top_k(scores, k)                                  # (S, k)
  return {'requests': jnp.zeros(scores.shape[-1]).at[chosen.ravel()].add(1.0)}


def _moving_average(state, statistics, config):
  decay = config.options['decay']
  share = statistics['requests'] / jnp.sum(statistics['requests'])
  return {'share': decay * state['share'] + (1 - decay) * share}


ROUTER = declarations.declare(declarations.RouterDeclaration(
    'ema_tc', title='EMA-balanced Token Choice', allocation=declarations.TOKEN_CHOICE,
    presets={'noise_std': 0.5},
    options={'decay': 0.9, 'penalty': 1.0}))
SPEC = registry.register(ROUTER.name, router_spec.RouterSpec(
    _scores, paper_routers.TOKEN_CHOICE,
    state=router_spec.RouterState(_initial_share, _requests, _moving_average)))
