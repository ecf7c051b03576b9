"""Golden: V-MoE's SoftRouter (Soft MoE), deterministic, given its slot parameters and scale.

Stored: the tokens (one routing group per image, as the Soft MoE paper routes), the parameters
`mu` (D, E, slots) and `scale`, and the router's dispatch and combine weights (G, T, E, slots). The
scale is not 1, so that where it multiplies (the reference scales the smaller of the tokens and
mu) shows.
"""
import numpy as np

REFERENCE = 'vmoe/projects/soft_moe/router.py SoftRouter (deterministic, capacity_factor 1)'
IMAGES, TOKENS, DIM, EXPERTS = 3, 17, 16, 4
SCALE = 1.7


def generate(context) -> dict[str, np.ndarray]:
  soft = context.module('vmoe.projects.soft_moe.router', 'vmoe')
  rng = np.random.default_rng(57)
  x = rng.normal(size=(IMAGES, TOKENS, DIM)).astype(np.float32)
  slots = round(TOKENS / EXPERTS)   # The router's rule at c = 1 (flax refuses another shape).
  mu = rng.normal(size=(DIM, EXPERTS, slots)).astype(np.float32)
  router = soft.SoftRouter(num_experts=EXPERTS, capacity_factor=1.0, deterministic=True)
  params = {'params': {'mu': mu, 'scale': np.float32(SCALE)}}
  dispatcher, _ = router.apply(params, x)
  inner = dispatcher.dispatcher      # Bfloat16Dispatcher wraps the EinsumDispatcher.
  return {'x': x, 'mu': mu, 'scale': np.float32(SCALE),
          'dispatch': np.asarray(inner.dispatch_weights),
          'combine': np.asarray(inner.combine_weights)}
