"""The project's Soft MoE router against V-MoE's SoftRouter (testing/goldens/soft_router.py): the
same tokens, slot parameters and scale through the project's Router module, in evaluation.

Tolerance (u = 2^-24), and why: rtol 4 |scale| (3 D + 5) u + 2 (max(T, E C) + 2) u.
  Each side normalises the tokens and the slot vectors (a sum of D squares, a rsqrt and a
  product: within (D + 2) u relative each), multiplies by the scale (u) and takes a D-term dot
  product of unit vectors (within D u |scale|, as sum |x_d mu_d| <= 1): its logits are within
  |scale| (3 D + 5) u of the exact ones, so the two sides' within twice that. A logit error delta
  moves a softmax entry by a factor within exp(+-2 delta); the softmax itself adds (n + 2) u per
  side over its n = T tokens (dispatch) or E C slots (combine).
"""
import numpy as np

from testing import goldens
from vmoe.routing import router
from vmoe.routing import router_config

U = 2.0**-24


def test_dispatch_and_combine_equal_v_moe_s_soft_router():
  g = goldens.load('soft_router')
  _, num_tokens, dim = g['x'].shape
  _, num_experts, slots = g['mu'].shape
  config = router_config.RouterConfig(name='soft_moe', capacity_factor=1)
  assert config.capacity(num_tokens, num_experts) == slots   # The reference's round, halves even.
  route, _ = router.Router(config, num_experts).apply(
      {'params': {'phi': g['mu'], 'scale': g['scale']}}, g['x'], train=False)
  logits_rtol = 4 * abs(float(g['scale'])) * (3 * dim + 5) * U
  softmax_rtol = 2 * (max(num_tokens, num_experts * slots) + 2) * U
  np.testing.assert_allclose(route.dispatch, g['dispatch'], rtol=logits_rtol + softmax_rtol, atol=0)
  np.testing.assert_allclose(route.combine, g['combine'], rtol=logits_rtol + softmax_rtol, atol=0)
