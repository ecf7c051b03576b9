"""The project's V-MoE, given V-MoE's parameters through vmoe_params.convert, against V-MoE's own
VisionTransformerMoe (testing/goldens/vit_moe.py): the same images, the same routing in every MoE
layer, and the same logits.

Tolerances, and why:
  routing   exact (the dense dispatch of every MoE layer). A token's requests depend on the order
            of its top k + 1 gates; the test checks that each such gap in the reference exceeds
            the logits' tolerance below, which bounds the rounding of the router's inputs too
            (they pass through fewer of the same operations than the logits).
  logits    2 lambda sqrt(n) u ||J (.) w||_2 per logit, u = 2^-24. A float32 dot product of n terms
            equals the exact one of its weights each moved by a relative backward error (Higham,
            Accuracy and Stability of Numerical Algorithms, Sec. 3.1); taken as mean-zero
            roundings, that error is within lambda sqrt(n) u with probability at least
            1 - 2 exp(-lambda^2 (1 - u)^2 / 2) (Higham and Mary 2019, Theorem 2.4), n = 192 the
            longest reduction (the 8 x 8 x 3 patch embedding), lambda = 6 (1 - 3e-8). Independent
            across the parameters, their first-order effect on a logit is within lambda sqrt(n) u
            times the l2 norm of (d logit / d w) w over all parameters w, computed here from the
            Jacobian; the elementwise operations' single roundings (a few u an activation) are
            inside that margin. Each side rounds alike: twice that.
"""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from testing import goldens
from testing.goldens import decided
from vmoe.model import moe_config
from vmoe.model import vit
from vmoe.model import vit_config
from vmoe.model import vmoe_params
from vmoe.routing import allocation
from vmoe.routing import router_config

U = 2.0**-24
LAMBDA = 6.0
LONGEST_SUM = 8 * 8 * 3     # The patch embedding's reduction; the others are 64 terms or fewer.
PARAMS = 'params/'


@pytest.fixture(scope='module')
def golden():
  return goldens.load('vit_moe')


def vmoe_tree(golden) -> dict:
  """V-MoE's nested parameter dict, as restore_checkpoint(prefix, tree=None) gives it."""
  flat = {k[len(PARAMS):]: v for k, v in golden.arrays.items() if k.startswith(PARAMS)}
  return flax.traverse_util.unflatten_dict(flat, sep='/')


def project_model(golden, dispatch='indices') -> vit.VisionTransformer:
  """The golden's V-MoE config in this project's terms (testing/goldens/vit_moe.py CONFIG):
  NoisyTopExpertsPerItemRouter k = 2 with capacity factor 1.05 on k T / E, ceil to a multiple of
  4 (compute_capacity's defaults), routing groups of 34 tokens = 2 images of 17."""
  _, image_size, _, _ = golden['images'].shape
  tokens_per_image = (image_size // 8) ** 2 + 1
  config = router_config.RouterConfig(name='softmax_tc', capacity_factor=1.05,
                                      num_selected_experts=2,
                                      capacity_rounding='ceil_multiple_of_4')
  layers = moe_config.MoeConfig(
      num_experts=4, group_size=vmoe_params.group_size_in_images(34, tokens_per_image),
      router=config, every=2, dispatch=dispatch)
  return vit.VisionTransformer(num_classes=golden['logits'].shape[1], patch_size=8, width=32,
                               depth=4, mlp_dim=64, num_heads=2, moe=layers)


@pytest.fixture(scope='module')
def tolerance(golden) -> np.ndarray:
  """Per logit (B, classes): the module docstring's bound, a property of the arithmetic, so
  taken once (through the einsum path, whose Jacobian computes fastest)."""
  model, params, images = project_model(golden, 'einsum'), converted(golden), golden['images']
  jacobian = jax.jit(jax.jacrev(lambda p: model.apply({'params': p}, images, train=False)[0]))(
      params)
  squares = sum(jnp.einsum('bc...,...->bc', j**2, w**2)
                for j, w in zip(jax.tree.leaves(jacobian), jax.tree.leaves(params)))
  return 2 * LAMBDA * np.sqrt(LONGEST_SUM) * U * np.sqrt(np.asarray(squares))


def converted(golden) -> dict:
  return vmoe_params.convert(vmoe_tree(golden))


def test_converted_tree_has_the_project_s_structure(golden):
  params = converted(golden)
  model = project_model(golden)
  fresh = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), golden['images'],
                                            train=False)['params'])
  assert jax.tree.structure(params) == jax.tree.structure(fresh)
  assert jax.tree.map(np.shape, params) == jax.tree.map(lambda a: a.shape, fresh)


@pytest.mark.parametrize('dispatch', ['indices', 'einsum'])
def test_converted_model_routes_and_classifies_as_v_moe(golden, tolerance, dispatch):
  model = project_model(golden, dispatch)
  apply = jax.jit(lambda p, x: model.apply({'params': p}, x, train=False,
                                           capture_intermediates=True, mutable=['intermediates']))
  (logits, aux), state = apply(converted(golden), golden['images'])
  moe_blocks = sorted(int(k.split('/')[1]) for k in golden.arrays if k.startswith('dispatch/'))
  assert sorted(aux['router']) == [vit_config.block_name(b) for b in moe_blocks]
  for block in moe_blocks:
    gates = jax.nn.softmax(golden[f'router_logits/{block}'])
    assert decided.deciding_gaps(np.asarray(gates), 2).min() > tolerance.max()
    route, _ = state['intermediates'][vit_config.block_name(block)]['moe']['router']['__call__'][0]
    num_tokens = gates.shape[1]
    dispatched, _ = jax.vmap(allocation.to_dense, in_axes=(0, 0, None))(
        route.slot_token, route.slot_weight, num_tokens)
    want = golden[f'dispatch/{block}']
    assert want.sum() < 2 * want.shape[0] * num_tokens     # Some requests overflow: order counts.
    np.testing.assert_array_equal(dispatched, want.astype(np.float32))
  assert np.all(np.abs(np.asarray(logits) - golden['logits']) <= tolerance)
