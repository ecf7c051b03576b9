"""Mixed precision and rematerialisation: what config.model.dtype, moe.dispatch_dtype and
config.model.remat change, and what they must not (routing decisions, values).

Tolerances are in units of the formats' rounding, not measured on this machine: float32 has
eps = 2^-23 and bfloat16 eps = 2^-7 (8 significant bits); round-to-nearest errs by half an eps.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.model import mesh_config
from vmoe.model import moe
from vmoe.model import sharding
from vmoe.model import vit
from vmoe.routing import allocation
from vmoe.routing import lab_routers
from vmoe.routing import router as router_lib
from vmoe.routing import router_config
from vmoe.train import train_program
from vmoe.train import train_step as train_lib

F32_EPS = float(np.finfo(np.float32).eps)
BF16_EPS = float(jnp.finfo(jnp.bfloat16).eps)
NUM_EXPERTS, MLP_DIM, GROUP_SIZE = 4, 32, 2
BATCH = 16                              # One routing group of configs/tiny.py (16 x 17 tokens).
TOKENS = BATCH * 17


@pytest.fixture
def small(tiny_experiment):
  """small(**overrides): configs/tiny.py at batch 16 (one routing group), warm-up 10 steps, with
  `overrides` ({'dotted.key': value}); tiny_experiment is conftest.py's."""
  return lambda **overrides: tiny_experiment('', {
      'batch_size': BATCH, 'num_train_steps': 100, 'schedule.warmup_steps': 10, **overrides})


def learnable_batches(num_steps: int, seed: int = 0):
  """`num_steps` batches of 28x28x1 images whose class is a fixed random prototype plus noise:
  enough signal for 50 steps to lower the loss 20-fold, drawn once so both dtypes see the same
  data."""
  rng = np.random.default_rng(seed)
  prototypes = rng.uniform(-1, 1, (10, 28, 28, 1)).astype(np.float32)
  for _ in range(num_steps):
    labels = rng.integers(0, 10, BATCH)
    noise = rng.normal(0, 0.5, (BATCH, 28, 28, 1)).astype(np.float32)
    yield {'image': np.clip(prototypes[labels] + noise, -1, 1),
           'labels': np.eye(10, dtype=np.float32)[labels]}


def one_device_program(experiment) -> train_program.TrainProgram:
  """`experiment`'s training program (the one setup path) on this process's first device."""
  return train_program.build(experiment, sharding.make_mesh(mesh_config.MeshConfig(1, 1),
                                                            jax.devices()[:1]))


def train_losses(setup: train_program.TrainProgram, start, num_steps: int) -> np.ndarray:
  """The per-step training losses of `setup`'s compiled step from the host state `start`."""
  state = jax.device_put(start, setup.state_shardings)    # Fresh buffers: the step donates them.
  compiled = setup.compile()
  found = []
  for i, batch in enumerate(learnable_batches(num_steps)):
    state, metrics = compiled(state, sharding.put_batch(batch, setup.batch_sharding),
                              jax.random.PRNGKey(i))
    found.append(metrics['loss'])
  return np.asarray(jax.device_get(found), np.float64)


@pytest.mark.parametrize('router', router_lib.PAPER_ROUTERS)
def test_bfloat16_model_routes_as_the_float32_model(router):
  # Tokens exactly representable in bfloat16, so that both layers see the same values: the router
  # reads them in float32 under either model dtype, so its logits, and the routing decisions and
  # weights computed from them, are identical; only the experts and the buffers are bfloat16.
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 16)).astype(jnp.bfloat16)
  config = router_config.RouterConfig(router, capacity_factor=1.0, noise_std=1.0)
  layer = lambda dtype: moe.moe_mlp(NUM_EXPERTS, MLP_DIM, config, GROUP_SIZE, dtype=dtype,
                                    dispatch_dtype=moe.buffer_dtype(dtype, 'float32'))
  params = layer(jnp.float32).init(jax.random.PRNGKey(1), x.astype(jnp.float32))
  rngs = {'gating': jax.random.PRNGKey(2)}

  def route(dtype):
    (y, _), state = layer(dtype).apply(params, x.astype(dtype), train=True, rngs=rngs,
                                       capture_intermediates=True)
    (found, _), = state['intermediates']['router']['__call__']
    return y, found

  y_32, route_32 = route(jnp.float32)
  y_16, route_16 = route(jnp.bfloat16)
  assert y_32.dtype == jnp.float32 and y_16.dtype == jnp.bfloat16
  assert type(route_32) is type(route_16)
  for a, b in zip(route_32, route_16):
    assert a.dtype == b.dtype and a.dtype in (jnp.int32, jnp.float32)
    np.testing.assert_array_equal(a, b)     # Same slot_token (and weights), bit for bit.


def init_and_apply_shapes(model, images):
  """The model's variables, and its (output, captured intermediates) on `images`, as shapes and
  dtypes: jax.eval_shape traces init and apply, with the very dtypes a run computes in, and
  neither compiles nor runs them."""
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)
  outputs = jax.eval_shape(lambda v: model.apply(v, images, capture_intermediates=True),
                           variables)
  return variables, outputs


def test_dtype_sets_the_compute_dtype_and_keeps_parameters_features_and_logits_float32(small):
  experiment = small(**{'model.dtype': 'bfloat16'})
  model = vit.build_model(experiment.model, experiment.moe)
  images = jnp.zeros((BATCH, 28, 28, 1), jnp.float32)
  variables, ((logits, aux), state) = init_and_apply_shapes(model, images)
  assert {p.dtype for p in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
  assert logits.dtype == aux['pre_logits'].dtype == aux['encoded'].dtype == jnp.float32
  captured = state['intermediates']
  (block, _), = captured['block_00']['__call__']
  assert block.dtype == jnp.bfloat16                  # The residual stream.
  buffers, = captured['block_01']['moe']['experts']['__call__']
  assert buffers.dtype == jnp.bfloat16                # Expert outputs, before the combine.


def test_float32_model_with_bfloat16_dispatch_moves_bfloat16_buffers(small):
  # V-MoE's Bfloat16Dispatcher: the experts compute in float32 from bfloat16 buffers.
  assert moe.buffer_dtype(jnp.float32, 'bfloat16') == jnp.bfloat16
  assert moe.buffer_dtype(jnp.float32, 'float32') == jnp.float32
  assert moe.buffer_dtype(jnp.bfloat16, 'float32') == jnp.bfloat16
  experiment = small(**{'moe.dispatch_dtype': 'bfloat16'})
  model = vit.build_model(experiment.model, experiment.moe)
  images = jnp.zeros((BATCH, 28, 28, 1), jnp.float32)
  _, (_, state) = init_and_apply_shapes(model, images)
  buffers, = state['intermediates']['block_01']['moe']['experts']['__call__']
  (block, _), = state['intermediates']['block_01']['__call__']
  assert buffers.dtype == jnp.bfloat16 and block.dtype == jnp.float32


# V-MoE's combine (its Bfloat16Dispatcher around the einsum or index dispatcher): the experts'
# outputs are cast to bfloat16, and jnp.einsum of the float32 combine weights with them promotes
# to float32, so each product w * y and the sum over a token's slots are float32 (Soft MoE's
# dispatch likewise: float32 weights times bfloat16 tokens, summed in float32). A float32 dot of
# n terms, in any order and with or without fused multiply-adds, errs from the exact sum by at
# most gamma_n * sum_i |w_i y_i|, gamma_n = n u / (1 - n u), u = 2^-24 (Higham, "Accuracy and
# Stability of Numerical Algorithms", eq. 3.5), so the test does not depend on XLA's order.
def gamma(n: int) -> float:
  u = F32_EPS / 2
  return n * u / (1 - n * u)


def as_float64(a) -> np.ndarray:
  return np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64)


def layer_inside(layer, variables, x):
  """The layer's output, and the router's routing and the experts' (buffers, outputs) it made."""
  seen = {}

  def record(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if context.method_name == '__call__' and type(context.module) in (moe.Experts,
                                                                      router_lib.Router):
      seen[type(context.module)] = (args[0], out)
    return out
  with nn.intercept_methods(record):
    y, _ = layer.apply(variables, x, train=True, rngs={'gating': jax.random.PRNGKey(2)})
  (_, (route, _)), (buffers, outputs) = seen[router_lib.Router], seen[moe.Experts]
  return y, route, buffers, outputs


# The paper's routers on both paths, and the five after it (lab_routers) on the configs' path.
V_MOE_CASES = [(name, 'indices') for name in router_lib.PAPER_ROUTERS + tuple(lab_routers.ROUTERS)
               ] + [(name, 'einsum') for name in router_lib.PAPER_ROUTERS if name != 'soft_moe']


@pytest.mark.parametrize('router,dispatch', V_MOE_CASES)
def test_bfloat16_dispatch_combines_in_float32_as_v_moe(router, dispatch):
  # With noise for the routers whose presets have it (the paper's softmax and Sinkhorn ones).
  config = router_config.RouterConfig(router, capacity_factor=1.0, noise_std=1.0 if router in
                                   router_lib.PAPER_ROUTERS else 0.0)
  layer = moe.moe_mlp(NUM_EXPERTS, MLP_DIM, config, GROUP_SIZE, dispatch=dispatch,
                      dispatch_dtype=jnp.bfloat16)
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 16))   # Float32 tokens of a float32 model.
  y, route, buffers, outputs = layer_inside(layer, layer.init(jax.random.PRNGKey(1), x), x)
  soft_moe = isinstance(route, router_lib.DenseRouting)
  num_groups = x.shape[0] if soft_moe else x.shape[0] // GROUP_SIZE
  if soft_moe:
    dispatch_weights, combine_weights = route
  else:
    dispatch_weights, combine_weights = jax.vmap(allocation.to_dense, in_axes=(0, 0, None))(
        route.slot_token, route.slot_weight, x.size // (num_groups * x.shape[-1]))
  assert combine_weights.dtype == jnp.float32                     # Weights stay float32.
  tokens = as_float64(x.astype(jnp.bfloat16)).reshape(num_groups, -1, x.shape[-1])
  d, c = as_float64(dispatch_weights), as_float64(combine_weights)   # (G, S, E, C)
  num_tokens, num_experts, capacity = d.shape[1:]

  # Dispatch: bfloat16 tokens. A sparse router's buffers are those tokens, bit for bit; Soft MoE's
  # are float32 weighted sums of them over the group's S tokens.
  exact_buffers = np.einsum('gsec,gsd->egcd', d, tokens)
  if soft_moe:
    assert buffers.dtype == jnp.float32
    bound = gamma(num_tokens) * np.einsum('gsec,gsd->egcd', np.abs(d), np.abs(tokens))
    assert np.all(np.abs(as_float64(buffers) - exact_buffers) <= bound)
  else:
    assert buffers.dtype == jnp.bfloat16
    np.testing.assert_array_equal(as_float64(buffers), exact_buffers)

  # Combine: the experts' outputs leave them in bfloat16; float32 weights times them, summed in
  # float32 over the E * C slots, then cast to the model's float32.
  assert outputs.dtype == jnp.bfloat16 and y.dtype == jnp.float32
  expert_outputs = as_float64(outputs)                            # (E, G, C, D), exact.
  exact = np.einsum('gsec,egcd->gsd', c, expert_outputs)
  bound = gamma(num_experts * capacity) * np.einsum('gsec,egcd->gsd', np.abs(c),
                                                    np.abs(expert_outputs))
  found = as_float64(y).reshape(exact.shape)
  assert np.all(np.abs(found - exact) <= bound), np.max(np.abs(found - exact) - bound)
  # The bound tells a bfloat16 combine (weights and sums rounded to 8 bits, the former default)
  # from this one: rounding the weights alone already moves some token's output past it.
  # (random_tc's weights, 1/k, are bfloat16 numbers already: nothing to tell apart.)
  to_bfloat16 = lambda a: as_float64(jnp.asarray(a, jnp.float32).astype(jnp.bfloat16))
  bfloat16_combine = np.einsum('gsec,egcd->gsd', to_bfloat16(c), expert_outputs)
  assert np.any(np.abs(bfloat16_combine - exact) > bound) or np.array_equal(to_bfloat16(c), c)


def test_unknown_dtypes_name_the_key(small):
  with pytest.raises(ValueError, match='model.dtype'):
    small(**{'model.dtype': 'float16'})
  with pytest.raises(ValueError, match='moe.dispatch_dtype'):
    small(**{'moe.dispatch_dtype': 'int8'})


# bfloat16 training tracks float32 (test_bfloat16_training_tracks_float32). A first-order
# estimate, not a measurement: in bfloat16 every activation on the path from the images to the
# loss is rounded, relative error <= u = BF16_EPS / 2 = 2^-8 each. The tiny model's path holds
# about ROUNDINGS roundings in series (4 blocks x ~12: two LayerNorms, q, k, v, the attention
# output and its projection, a residual add, fc1, GELU, fc2, a residual add; plus the embedding).
# Independent roundings add in quadrature: the loss and each gradient carry a relative error of
# about delta = sqrt(ROUNDINGS) u (2.8%). Over a run, the forward rounding moves the loss by
# delta L(t), and each Adam step's update (normalised, so its size does not depend on the
# gradient's scale) errs in direction by ~delta, so the decrease the run has achieved,
# L(0) - L(t), is reached to within delta (L(0) - L(t)): |L_bf16(t) - L_f32(t)| <= 2 delta L(0),
# with L(0) = log(10) (zero head). Window means of WINDOW steps are compared, as a spike of a few
# steps in one run (an Adam step that overshoots in one dtype and not the other) is in the bound
# of a single step but not meant by "tracks". The runs take the first TRACKING_STEPS steps of the
# `small` fixture's 100-step schedule: by then the loss has fallen from 2.2 to about 0.11 (window
# means), far enough to show learning, and nothing in the bound depends on the run's length.
ROUNDINGS = 4 * 12 + 2
TRACKING_ATOL = 2 * np.sqrt(ROUNDINGS) * (BF16_EPS / 2) * np.log(10)
WINDOW = 10
TRACKING_STEPS = 50


def test_bfloat16_training_tracks_float32(small):
  float32_program, bfloat16_program = (one_device_program(small(**{'model.dtype': dtype}))
                                       for dtype in ('float32', 'bfloat16'))
  # Parameters and Adam's state are float32 under either compute dtype: one start for both runs.
  start = jax.device_get(float32_program.init_state(
      jax.random.PRNGKey(float32_program.experiment.seed)))
  float32 = train_losses(float32_program, start, TRACKING_STEPS)
  bfloat16 = train_losses(bfloat16_program, start, TRACKING_STEPS)
  assert np.all(np.isfinite(bfloat16))
  windows = lambda losses: losses.reshape(-1, WINDOW).mean(axis=1)
  np.testing.assert_allclose(windows(bfloat16), windows(float32), rtol=0, atol=TRACKING_ATOL)
  assert windows(bfloat16)[-1] < 0.1 * windows(bfloat16)[0]     # And it learns.


# remat recomputes the same operations; only XLA's fusion of the recomputed blocks may reorder a
# float32 sum. Two orders of an n-term sum differ by at most n ulps of the sum of the terms'
# magnitudes; the longest sums are the weight gradients' over the batch's TOKENS tokens.
REMAT_RTOL = TOKENS * F32_EPS


@pytest.mark.parametrize('router', ['sinkhorn_ec', 'soft_moe'])
def test_remat_changes_memory_not_values(small, router):
  batch = next(learnable_batches(1))

  def model_and_loss(remat):
    experiment = small(**{'model.remat': remat, 'moe.router.name': router})
    return vit.build_model(experiment.model, experiment.moe), experiment.loss

  # remat changes no parameter: both sides start from the parameters of the model without it,
  # initialised once (jitted: run op by op, a Sinkhorn router's init costs twice the compile).
  params = jax.jit(model_and_loss(False)[0].init)(jax.random.PRNGKey(0), batch['image'])['params']
  # A random head: with the zero-initialised one no gradient reaches the encoder.
  head = params['head']['kernel']
  params['head']['kernel'] = 0.1 * jax.random.normal(jax.random.PRNGKey(3), head.shape)

  def loss_and_grads(remat):
    model, loss = model_and_loss(remat)
    loss_fn = lambda p: train_lib.training_loss(model, p, batch['image'], batch['labels'],
                                                jax.random.PRNGKey(1), loss)[0]
    return jax.jit(jax.value_and_grad(loss_fn))(params)

  # What remat saves is measured where activations dominate (launch/plan.py's remat column); at
  # this size XLA:CPU's temporaries are mostly the parameters' gradients.
  # On the host: numpy's maxima below compile nothing (jnp's, one program per leaf shape).
  loss, grads = jax.device_get(loss_and_grads(False))
  loss_remat, grads_remat = jax.device_get(loss_and_grads(True))
  np.testing.assert_allclose(loss_remat, loss, rtol=REMAT_RTOL)
  largest = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads))
  for (path, g), g_remat in zip(jax.tree_util.tree_flatten_with_path(grads)[0],
                                jax.tree.leaves(grads_remat)):
    # The attention keys' bias has an exactly zero gradient (softmax ignores a shift shared by
    # all keys): on both sides it is rounding, bounded by the largest gradient's.
    zero = "['key']['bias']" in jax.tree_util.keystr(path)
    scale = largest if zero else float(np.max(np.abs(g)))
    np.testing.assert_allclose(g_remat, g, rtol=0, atol=REMAT_RTOL * scale, err_msg=str(path))
