"""Golden: V-MoE's dispatchers given the gates, top experts per item (k = 1, 2) and top items per
expert.

The reference's routers draw their noise inside, so the golden starts after it: softmax gates of
fixed logits, through `get_top_experts_per_item_dispatcher` (batch_priority False, as both paper
configs set `dispatcher.batch_priority`) and `get_top_items_per_expert_dispatcher`, each vmapped
over groups as V-MoE's routers call them, with capacities that make buffers overflow. Stored: the
logits, the gates, and each dispatcher's dense (G, S, E, C) dispatch and combine weights.
"""
import functools

import jax
import numpy as np

REFERENCE = ('vmoe/moe.py get_top_experts_per_item_dispatcher (k = 1, 2; batch_priority=False), '
             'get_top_items_per_expert_dispatcher')
GROUPS, TOKENS, EXPERTS = 4, 32, 4
# name -> (k, capacity); None for top items per expert. Token choice's capacities are under
# k T / E (8 and 16), so requests overflow and the order of the queue decides which are kept.
CASES = {'tc_k1': (1, 6), 'tc_k2': (2, 12), 'ec': (None, 6)}


def generate(context) -> dict[str, np.ndarray]:
  moe = context.module('vmoe.moe', 'vmoe')
  logits = np.random.default_rng(55).normal(size=(GROUPS, TOKENS, EXPERTS)).astype(np.float32)
  gates = jax.nn.softmax(logits)     # What V-MoE's routers dispatch with (vmoe/nn/routing.py).
  out = {'logits': logits, 'gates': np.asarray(gates)}
  for name, (k, capacity) in CASES.items():
    if k is None:
      dispatcher, _ = jax.vmap(functools.partial(
          moe.get_top_items_per_expert_dispatcher, name='einsum', capacity=capacity))(gates)
    else:
      dispatcher = jax.vmap(functools.partial(
          moe.get_top_experts_per_item_dispatcher, name='einsum', num_selected_experts=k,
          batch_priority=False, capacity=capacity))(gates)
    out[f'{name}_dispatch'] = np.asarray(dispatcher.dispatch_weights)
    out[f'{name}_combine'] = np.asarray(dispatcher.combine_weights)
    out[f'{name}_k'] = np.int32(k or 0)
    out[f'{name}_capacity'] = np.int32(capacity)
  return out
