"""Golden: V-MoE's KL-projection (Sinkhorn) routers, token choice (k = 1, 2) and expert choice,
deterministic (no noise), given their gating kernel.

kl_projection_routing.py imports ott-jax's 0.2 API (`ott.core.sinkhorn`), which the reference
does not pin; ott-jax 0.2.11 (requirements-goldens.txt) runs under today's JAX with three names
that JAX has since removed put back (`stub_jax_names`), each recorded. jaxopt is stubbed: only
`use_lbfgs=True` calls it, and the paper's routers run Sinkhorn. Stored: the tokens, the kernel,
the logits (the router's bias-free Dense), the reference's plan of them (its own
`_get_kl_projection_algorithm`), and each router's dense dispatch and combine weights.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

REFERENCE = ('vmoe/projects/sparsity_constrained_ot/kl_projection_routing.py '
             'KLProjectionNoisyTopExpertsPerItemRouter (k = 1, 2), '
             'KLProjectionNoisyTopItemsPerExpertRouter; deterministic')
GROUPS, TOKENS, DIM, EXPERTS = 4, 32, 8, 4
# name -> (k, capacity): capacities round(c T / E) at c = k for token choice, c = 1 for expert
# choice (the project's rule at these sizes, so its Router picks the same C).
CASES = {'tc_k1': (1, 8), 'tc_k2': (2, 16), 'ec': (None, 8)}


def _unavailable(*args, **kwargs):
  raise RuntimeError('stubbed for the goldens: not on the path they run')


def stub_jax_names(context) -> None:
  """What ott-jax 0.2.11 needs of JAX that JAX no longer has."""
  context.stub_module('jax.experimental.host_callback', {'call': _unavailable},
                      'removed from JAX; ott-jax 0.2.11 imports it for its sparse Cholesky '
                      'solver only, which Sinkhorn on a dense geometry never calls')
  jax.random.PRNGKeyArray = jax.Array
  context.patch('jax.random.PRNGKeyArray = jax.Array: removed from JAX; ott-jax 0.2.11 names '
                'it in a default argument\'s annotation')
  jnp.DeviceArray = jax.Array
  context.patch('jax.numpy.DeviceArray = jax.Array: removed from JAX; ott-jax 0.2.11\'s '
                'Geometry tests a cost scale against it')


def stub_jaxopt(context) -> None:
  why = ('not installed; kl_projection_routing.py calls it only with use_lbfgs=True, and the '
         'paper\'s Sinkhorn routers run ott-jax\'s Sinkhorn')
  projection = context.stub_module('jaxopt._src.projection',
                                   {'kl_projection_transport': _unavailable}, why)
  private = context.stub_module('jaxopt._src', {'projection': projection}, why)
  context.stub_module('jaxopt', {'LBFGS': _unavailable, '_src': private}, why)


def generate(context) -> dict[str, np.ndarray]:
  stub_jax_names(context)
  stub_jaxopt(context)
  kl = context.module('vmoe.projects.sparsity_constrained_ot.kl_projection_routing', 'vmoe')
  rng = np.random.default_rng(56)
  x = rng.normal(size=(GROUPS, TOKENS, DIM)).astype(np.float32)
  kernel = (2 * rng.normal(size=(DIM, EXPERTS)) / np.sqrt(DIM)).astype(np.float32)
  params = {'params': {'dense': {'kernel': kernel}}}
  logits = nn.Dense(EXPERTS, use_bias=False).apply({'params': {'kernel': kernel}}, x)
  out = {'x': x, 'kernel': kernel, 'logits': np.asarray(logits)}
  for name, (k, capacity) in CASES.items():
    if k is None:
      router = kl.KLProjectionNoisyTopItemsPerExpertRouter(
          num_experts=EXPERTS, deterministic=True,
          dispatcher={'name': 'einsum', 'capacity': capacity})
    else:
      router = kl.KLProjectionNoisyTopExpertsPerItemRouter(
          num_experts=EXPERTS, num_selected_experts=k, deterministic=True,
          dispatcher={'name': 'einsum', 'capacity': capacity, 'batch_priority': False})
    dispatcher, _ = router.apply(params, x)
    out[f'{name}_dispatch'] = np.asarray(dispatcher.dispatch_weights)
    out[f'{name}_combine'] = np.asarray(dispatcher.combine_weights)
    out[f'{name}_k'] = np.int32(k or 0)
    out[f'{name}_capacity'] = np.int32(capacity)
  plan_of = router._get_kl_projection_algorithm(TOKENS)   # pylint: disable=protected-access
  out['plan'] = np.asarray(plan_of(sim_matrix=logits))
  return out
