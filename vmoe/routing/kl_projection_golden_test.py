"""The project's Sinkhorn routers against V-MoE's KL-projection routers
(testing/goldens/kl_projection_routers.py): the same tokens and gating kernel through the
project's Router module, in evaluation (no noise), as the reference ran deterministic.

Tolerances (u = 2^-24, float32's unit roundoff), and why:
  logits    (inside the router) per entry 2 D u sum_d |x_d w_d|: each side's D-term float32 dot
            product is within D u sum |x w| of the exact one, whatever order it sums in.
  plan      rtol (4 (T + 2) + 4 max|logit|) u. Sinkhorn's fixed point contracts, so what stays of
            the rounding is that of the last column and row updates: each a sum of at most T
            terms and a quotient, (T + 2) u each, two updates, two sides. The reference's
            scaling domain takes exp(logit) and the project's log domain subtracts log-sums from
            the logits: exp's relative error follows its argument's absolute error, up to
            max|logit| u per side and update. Fed the golden's own logits.
  dispatch  exact: every choice depends on the order of a token's top k + 1 plan entries (token
            choice) or an expert's top C + 1 (expert choice); the test checks that each such gap
            in the reference's plan exceeds twice the plan tolerance, so rounding cannot reorder.
  combine   rtol 2 (E + 2) u + 4 max logit error: softmax of the logits at the dispatched slots
            (both routers' softmax combine), (E + 2) roundings per side; a logit error delta moves
            a softmax entry by a factor within exp(+-2 delta).
"""
import jax
import numpy as np
import pytest

from testing import goldens
from testing.goldens import decided
from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import router
from vmoe.routing import router_config

U = 2.0**-24


@pytest.fixture(scope='module')
def golden():
  return goldens.load('kl_projection_routers')


def logit_bound(golden):
  """The logits' per-entry bound (module docstring)."""
  x, kernel = golden['x'].astype(np.float64), golden['kernel'].astype(np.float64)
  return 2 * x.shape[-1] * U * np.einsum('gsd,de->gse', np.abs(x), np.abs(kernel))


def plan_rtol(golden):
  return (4 * (golden['logits'].shape[1] + 2) + 4 * np.abs(golden['logits']).max()) * U


def test_sinkhorn_plan_equals_ott_s(golden):
  plan = jax.vmap(affinity.sinkhorn)(golden['logits'])
  np.testing.assert_allclose(plan, golden['plan'], rtol=plan_rtol(golden), atol=0)


@pytest.mark.parametrize('case', ['tc_k1', 'tc_k2', 'ec'])
def test_router_dispatch_and_combine_equal_the_references(golden, case):
  k, capacity = int(golden[f'{case}_k']), int(golden[f'{case}_capacity'])
  plan = golden['plan']
  num_tokens, num_experts = plan.shape[1:]
  gaps = (decided.deciding_gaps(plan, k) if k
          else decided.deciding_gaps(np.swapaxes(plan, 1, 2), capacity))
  assert gaps.min() > 2 * plan_rtol(golden)     # Plan entries are at most 1.
  config = router_config.RouterConfig(name='sinkhorn_tc' if k else 'sinkhorn_ec', capacity_factor=k or 1)
  assert config.capacity(num_tokens, num_experts, train=False) == capacity
  route, _ = router.Router(config, num_experts).apply(
      {'params': {'kernel': golden['kernel']}}, golden['x'], train=False)
  dispatch, combine = jax.vmap(allocation.to_dense, in_axes=(0, 0, None))(
      route.slot_token, route.slot_weight, num_tokens)
  np.testing.assert_array_equal(dispatch, golden[f'{case}_dispatch'].astype(np.float32))
  rtol = 2 * (num_experts + 2) * U + 4 * logit_bound(golden).max()
  np.testing.assert_allclose(combine, golden[f'{case}_combine'], rtol=rtol, atol=0)
