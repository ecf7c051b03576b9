"""The project's token and expert choice against V-MoE's own dispatchers
(testing/goldens/router_dispatchers.py): the same gates through route_group, the public path.

Tolerances, and why:
  dispatch  exact. A token's requests depend on the order of its top k + 1 gates, an expert's
            slots on the order of its top C + 1 tokens; the test first checks that every such gap
            in the golden exceeds GAP, far above where the two sides' float32 softmaxes could
            disagree (below), so no rounding can reorder them. The queue order (token order,
            first choices before second ones) is then the allocation itself.
  combine   rtol 2 (E + 2) 2^-24. Both sides take jax.nn.softmax of the same float32 logits; each
            computes exp (1 ulp), a sum of E terms (E - 1 roundings) and a quotient (1): at most
            (E + 2) roundings of 2^-24 each per side, so their difference is within twice that.
"""
import jax
import numpy as np
import pytest

from testing import goldens
from testing.goldens import decided
from vmoe.routing import allocation
from vmoe.routing import router
from vmoe.routing import router_config

GAP = 1e-5


@pytest.fixture(scope='module')
def golden():
  return goldens.load('router_dispatchers')


def project_routing(logits, name, k, capacity):
  """route_group on each group (no noise: train=False) -> dense (G, S, E, C) dispatch, combine."""
  config = router_config.RouterConfig(name=name, capacity_factor=k)

  def one(group):
    slot_token, slot_weight, _ = router.route_group(group, config, capacity, train=False)
    return allocation.to_dense(slot_token, slot_weight, group.shape[0])
  dispatch, combine = jax.jit(jax.vmap(one))(logits)
  return np.asarray(dispatch), np.asarray(combine)


@pytest.mark.parametrize('case', ['tc_k1', 'tc_k2', 'ec'])
def test_dispatch_and_combine_equal_v_moe_s_dispatchers(golden, case):
  k, capacity = int(golden[f'{case}_k']), int(golden[f'{case}_capacity'])
  gates = golden['gates']
  num_experts = gates.shape[-1]
  if k:   # Token choice: each token's top k and the next.
    gaps = decided.deciding_gaps(gates, k)
  else:   # Expert choice: each expert's top C tokens and the next.
    gaps = decided.deciding_gaps(np.swapaxes(gates, 1, 2), capacity)
  assert gaps.min() > GAP
  name = 'softmax_tc' if k else 'softmax_ec'
  dispatch, combine = project_routing(golden['logits'], name, k or 1, capacity)
  want_dispatch = golden[f'{case}_dispatch']
  assert want_dispatch.shape == dispatch.shape
  if k:   # Some requests overflow their buffers, so the queue order decides what is kept.
    assert want_dispatch.sum() < k * gates.shape[0] * gates.shape[1]
  np.testing.assert_array_equal(dispatch, want_dispatch.astype(np.float32))
  rtol = 2 * (num_experts + 2) * 2.0**-24
  np.testing.assert_allclose(combine, golden[f'{case}_combine'], rtol=rtol, atol=0)
