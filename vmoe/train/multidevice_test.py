"""Expert parallelism on 8 simulated CPU devices: a sharded training step equals the 1-device step.

XLA reads --xla_force_host_platform_device_count only when jax starts and pytest's own process has
one CPU device, so the steps run in a subprocess, `python -m vmoe.train.multidevice_test RUNS.json`,
which reads the runs' experiment records from a JSON file and prints one JSON line per run for the
test to check; two such subprocesses take half the routers each, one per core.

The model is configs/tiny.py shrunk to the 'mu/7' ViT (two blocks, block 1 an MoE layer of E = 8
experts) with routing groups of 2 images and a batch of 16 = 8 devices x 2 images: every device
holds one whole group, so the groups, and therefore the routing, are the same on 1 and 8 devices.
The mesh is data=2 x expert=4: each device holds 2 of the 8 experts.

What the compiled 8-device step shows (softmax_ec; every router alike): the dispatched buffers
(E, G, C, D) and the expert outputs move with all-to-alls over the 4 devices of the 'expert' axis,
forward and backward (tuples of four f32[1,1,1,2,4,32] pieces: 2 experts' share of C = 4 slots of
D = 32 for each of the 4 groups of a data row); the expert weights' gradients are all-reduced over
'data' only (f32[2,32,128], 2 experts per device); the rest of the parameters' gradients are
all-reduced over all 8 devices. The only all-gathers are inside the router: XLA's SPMD partitioner
(Shardy or GSPMD alike) does not split lax.top_k along batch dimensions, so every device gathers
the (G, E, S) scores and ranks all groups itself. Without the MoE layer's sharding constraints
the partitioner falls back to replicating the buffers ('As the last resort, SPMD will replicate')
and all-gathers them in the backward pass.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from data.pp import device_split
from vmoe.model import mesh_config
from vmoe.model import sharding
from vmoe.routing import lab_routers
from vmoe.routing import router as router_lib
from vmoe.routing import router_config
from vmoe.train import experiment as experiment_lib
from vmoe.train import train_program
from vmoe.train import train_step as train_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The paper's routers and the five after it (vmoe/routing/lab_routers.py): lossfree_tc updates
# its state from a sum over every device's groups, random_tc keeps its kernel in that state.
ROUTERS = router_lib.PAPER_ROUTERS + tuple(lab_routers.ROUTERS)
NUM_DEVICES, EXPERT_AXIS, GROUP_SIZE, STEPS = 8, 4, 2, 2
# 8 CPU devices, on top of the session's fast-compile flags (conftest.py); both sides of every
# comparison run with the same flags.
XLA_FLAGS = (f'{os.environ.get("XLA_FLAGS", "")} '
             f'--xla_force_host_platform_device_count={NUM_DEVICES}')
COLLECTIVES = ('all-to-all', 'all-gather', 'all-reduce', 'reduce-scatter', 'collective-permute')
TOKENS = NUM_DEVICES * GROUP_SIZE * 17   # The batch's tokens: 16 images of 16 patches + class.

# Tolerances, in units of float32 rounding: F32_EPS = 2^-23 is one ulp at 1; round-to-nearest errs
# by at most half an ulp. Nothing below depends on which CPU runs the test.
F32_EPS = float(np.finfo(np.float32).eps)
# The two programs sum in different orders (per-device partial sums and an all-reduce, against one
# sum). A float32 sum of n terms errs by at most (n - 1) half-ulps of the sum of the terms'
# magnitudes, so two orders differ by at most n ulps of it; the longest sums are the weight
# gradients' over the batch's TOKENS tokens (272: 3.2e-5). Measured on 2026-11-24: up to 1.8e-6
# of a parameter's largest gradient and 1.1e-7 of the loss; a sharding bug (a missing all-reduce,
# a token at the wrong expert) changes a gradient by a sizeable fraction of itself.
REDUCTION_RTOL = TOKENS * F32_EPS
# Elementwise roundings on one side between Adam's moments and the update, each <= half an ulp:
# the two bias-corrected moments, sqrt, + eps, the division, + wd p, x lr (3.5-4 ulps); twice that.
UPDATE_ULPS = 8
ADAM_EPS = 1e-8   # optax.adamw's default eps, which optim.make_optimizer keeps.
# The bfloat16 step (model.dtype = 'bfloat16') on both meshes, for one sparse router and Soft MoE.
BFLOAT16_ROUTERS = ('softmax_ec', 'soft_moe')
# In bfloat16 the two programs' float32 sums (above) can round to neighbouring bfloat16 values
# (eps 2^-7; half of it is the rounding error u), and such a difference travels on through every
# later rounding. The path from the images to a gradient passes about BF16_ROUNDINGS roundings in
# series: per block ~12 forward (two LayerNorms, q, k, v, attention output and projection, a
# residual add, fc1, GELU, fc2, a residual add), mu/7's 2 blocks plus the embedding, and as many
# backward. In the worst case their relative errors add: BF16_ROUNDINGS u for a gradient, half
# that for the loss (forward only). Measured on 2026-11-24 (softmax_ec): 7% of the value bias's
# largest gradient, 1e-5 of the loss; a sharding bug (a missing all-reduce, a token at the wrong
# expert) changes a gradient by a sizeable fraction of itself or more.
BF16_ROUNDINGS = 2 * (2 * 12 + 2)
BF16_GRAD_RTOL = BF16_ROUNDINGS * float(jnp.finfo(jnp.bfloat16).eps) / 2
BF16_LOSS_RTOL = BF16_GRAD_RTOL / 2


def small_experiment(tiny_experiment, router: str, dtype: str = 'float32'):
  """configs/tiny.py with the mu/7 model computing in `dtype`, 2-image groups, 16 images and no
  warm-up (tiny_experiment is conftest.py's)."""
  return tiny_experiment(f'router={router}', {
      'model.variant': 'mu/7', 'model.dtype': dtype, 'moe.group_size': GROUP_SIZE,
      'batch_size': NUM_DEVICES * GROUP_SIZE, 'num_train_steps': 10, 'mesh.expert': EXPERT_AXIS,
      'schedule.warmup_steps': 0},    # A non-zero learning rate from the first step.
      num_devices=NUM_DEVICES)


def collectives(hlo_text: str) -> dict:
  """{collective: [op_name of each instance]} in a compiled module's text."""
  found = {}
  for line in hlo_text.splitlines():
    match = re.search(r' (' + '|'.join(COLLECTIVES) + r')(-start)?\(', line)
    if match:
      op_name = re.search(r'op_name="([^"]*)"', line)
      found.setdefault(match[1], []).append(op_name[1] if op_name else '')
  return found


def compile_step(setup: train_program.TrainProgram):
  """The trainer's step of a setup compiled for its mesh: run(state, batch, rng) -> (state,
  metrics) on host trees, and the compiled executable."""
  compiled = setup.compile()

  def run(state, batch, rng):
    state = jax.device_put(state, setup.state_shardings)   # Fresh buffers: the step donates them.
    new_state, metrics = compiled(state, sharding.put_batch(batch, setup.batch_sharding), rng)
    return jax.device_get(new_state), jax.device_get(metrics)

  return run, compiled


def leaves(tree) -> dict:
  """{leaf path: float64 array} of a host tree."""
  return {jax.tree_util.keystr(path): np.asarray(x, np.float64)
          for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def adam_state(opt_state) -> optax.ScaleByAdamState:
  """The one Adam state (count and moments) inside the optimizer's chain state."""
  is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)
  (found,) = [x for x in jax.tree.leaves(opt_state, is_leaf=is_adam) if is_adam(x)]
  return found


def adam_direction(state, b1: float, b2: float, eps: float) -> dict:
  """{leaf path: m_hat / (sqrt(v_hat) + eps)}, Adam's step direction, from a state's moments."""
  adam = adam_state(state.opt_state)
  count, mu, nu = int(adam.count), leaves(adam.mu), leaves(adam.nu)
  return {k: (mu[k] / (1 - b1**count)) / (np.sqrt(nu[k] / (1 - b2**count)) + eps) for k in mu}


def step_differences(experiment, lr: float, start, state_1, state_8) -> dict:
  """How the 8-device step from `start` differs from the 1-device one, leaf by leaf.

  - grad_diff, grad_scale: max |g_8 - g_1| and max |g_1|. Each side's gradient (after clipping)
    comes from Adam's first moment: g = (mu - b1 mu_start) / (1 - b1), mu_start being shared.
  - param_excess: the parameters' difference beyond what the two gradients explain, in units of
    its float32 rounding bound (see test_expert_sharded_step_equals_the_single_device_step).
  """
  # The step multiplies by b1 and b2 as float32 constants; the reference uses the same values.
  b1, b2 = (float(np.float32(b)) for b in (experiment.optimizer.b1, experiment.optimizer.b2))
  mu = [leaves(adam_state(s.opt_state).mu) for s in (start, state_1, state_8)]
  grad_1, grad_8 = ({k: (m[k] - b1 * mu[0][k]) / (1 - b1) for k in m} for m in mu[1:])
  p0, p1, p8 = leaves(start.params), leaves(state_1.params), leaves(state_8.params)
  u1, u8 = (adam_direction(s, b1, b2, ADAM_EPS) for s in (state_1, state_8))
  found = {'grad_diff': {}, 'grad_scale': {}, 'grad_8_scale': {}, 'param_excess': {}}
  for k in p0:
    found['grad_diff'][k] = float(np.max(np.abs(grad_8[k] - grad_1[k])))
    found['grad_scale'][k] = float(np.max(np.abs(grad_1[k])))
    found['grad_8_scale'][k] = float(np.max(np.abs(grad_8[k])))
    # Both sides compute p - lr (u + wd p) from the same p: their difference is -lr (u_8 - u_1),
    # up to (1) each side's elementwise rounding: at most UPDATE_ULPS ulps of lr |u| on the way
    # from (mu, nu) to the update, and half an ulp of the new parameter when the update is added
    # (counted twice here); (2) the scalars both sides share, the learning rate and the bias
    # corrections 1 - b^t, whose float32 rounding is amplified by up to 1 / (1 - b2): it scales
    # u_1 and u_8 alike, so it shows only in proportion to their difference.
    explained = -lr * (u8[k] - u1[k])
    bound = (F32_EPS * (np.abs(p1[k]) + np.abs(p8[k]) +
                        UPDATE_ULPS * lr * (np.abs(u1[k]) + np.abs(u8[k]))) +
             F32_EPS / (1 - b2) * lr * np.abs(u8[k] - u1[k]))
    bound = np.maximum(bound, np.finfo(np.float32).tiny)   # 0 where p = u = 0 on both sides.
    found['param_excess'][k] = float(np.max(np.abs(p8[k] - p1[k] - explained) / bound))
  found['max_param_diff'] = max(float(np.max(np.abs(p8[k] - p1[k]))) for k in p0)
  return found


def compare(key: str, experiment: experiment_lib.Experiment, starts: dict) -> dict:
  """1-device vs 8-device steps of an experiment (run_key `key`): the differences and what the
  8-device HLO holds.

  Every step starts both meshes from the same state (the 1-device state of the step before), so
  each comparison measures one step's rounding and differences do not compound. The first state
  is the router's fresh one, kept in `starts` (router -> host state) for the router's other runs:
  parameters and Adam's state are float32 whatever model.dtype, so a bfloat16 run starts where
  the float32 run did, and one init program is compiled per router.
  """
  setup_1 = train_program.build(experiment, sharding.make_mesh(mesh_config.MeshConfig(1, 1),
                                                           jax.devices()[:1]))
  setup_8 = train_program.build(experiment)      # experiment.mesh: data=2 x expert=4.
  rng = np.random.default_rng(0)
  shape = (experiment.batch_size,) + experiment.model.image_shape
  batch = {'image': rng.uniform(-1, 1, shape).astype(np.float32),
           'labels': np.eye(10, dtype=np.float32)[rng.integers(0, 10, experiment.batch_size)]}
  if experiment.router_name not in starts:
    starts[experiment.router_name] = jax.device_get(jax.jit(setup_1.init)(jax.random.PRNGKey(0)))
  state = starts[experiment.router_name]
  step_1, compiled_1 = compile_step(setup_1)
  step_8, compiled_8 = compile_step(setup_8)
  schedule, mesh_8 = setup_1.schedule, setup_8.mesh
  found = {'router': experiment.router_name, 'key': key, 'mesh': dict(mesh_8.shape),
           'loss_1': [], 'loss_8': [], 'steps': []}
  for i in range(STEPS):
    state_1, metrics_1 = step_1(state, batch, jax.random.PRNGKey(i))
    state_8, metrics_8 = step_8(state, batch, jax.random.PRNGKey(i))
    found['loss_1'].append(float(metrics_1['loss']))
    found['loss_8'].append(float(metrics_8['loss']))
    found['steps'].append(step_differences(experiment, float(schedule(i)), state, state_1, state_8))
    found.setdefault('router_state_diff', []).append(max(
        [float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(state_1.router_state),
                                                      jax.tree.leaves(state_8.router_state))],
        default=0.0))
    state = state_1
  wi = state_8.params['block_01']['moe']['experts']['wi']
  wi_sharding = compiled_8.output_shardings[0].params['block_01']['moe']['experts']['wi']
  found.update(expert_shard=list(wi_sharding.shard_shape(wi.shape)),
               expert_spec=str(wi_sharding.spec),
               collectives_1=collectives(compiled_1.as_text()),
               collectives_8=collectives(compiled_8.as_text()))
  return found


# The device path's tail (data.augment_on = 'device') on the 8-device mesh's batch sharding and on
# one device: 64 RGB images of 32 px, 8 a device, through the training pp's random tail.
DEVICE_TAIL_PP = ('decode|flip_lr|randaug(2, 20)|value_range(-1, 1)|'
                  'onehot(10, key="label", key_result="labels")|keep("image", "labels")')


def compare_device_tail() -> dict:
  """The tail's batch on 1 device and sharded over 8 (data=2 x expert=4, as the step's batch):
  the largest pixel and label differences, the sharding of the 8-device output and the
  collectives its program holds."""
  tail = device_split.split(DEVICE_TAIL_PP)
  rng = np.random.default_rng(0)
  batch = {'image': rng.integers(0, 256, (64, 32, 32, 3)).astype(np.uint8),
           'label': rng.integers(0, 10, 64).astype(np.int32),
           device_split.AUGMENT_KEY: np.asarray(jax.vmap(jax.random.PRNGKey)(jnp.arange(64)))}
  # The training step's tail (train_step.tail_per_device: each device's shard, in chunks), on a
  # one-device mesh (8 chunks of 8) and on data=2 x expert=4 (a chunk of 8 on each device).
  tail_of = lambda mesh: jax.jit(sharding.with_mesh(train_lib.tail_per_device(tail), mesh))
  meshes = [sharding.make_mesh(mesh_config.MeshConfig(data=1, expert=1), jax.devices()[:1]),
            sharding.make_mesh(mesh_config.MeshConfig(data=2, expert=4))]
  one = jax.device_get(tail_of(meshes[0])(jax.device_put(batch, jax.devices()[0])))
  batch_8 = sharding.put_batch(batch, sharding.batch_sharding(meshes[1]))
  sharded = tail_of(meshes[1])(batch_8)
  eight = jax.device_get(sharded)
  compiled_8 = tail_of(meshes[1]).lower(batch_8).compile().as_text()
  return {'key': 'device_tail', 'image_diff': float(np.max(np.abs(one['image'] - eight['image']))),
          'labels_diff': float(np.max(np.abs(one['labels'] - eight['labels']))),
          # Images the tail changed beyond value range's own rounding (an ulp of 1).
          'changed': float(np.mean(np.any(
              np.abs(one['image'] - (batch['image'].astype(np.float32) * np.float32(2 / 255) - 1))
              > F32_EPS, axis=(1, 2, 3)))),
          'image_shards': len(sharded['image'].sharding.device_set),
          'collectives_8': collectives(compiled_8)}


def run_key(router: str, dtype: str) -> str:
  """The results' key of a comparison: 'softmax_ec' in float32, 'softmax_ec:bfloat16'."""
  return router if dtype == 'float32' else f'{router}:{dtype}'


def run_compare_subprocesses(tiny_experiment) -> dict:
  """{run_key: compare(...)}, from two subprocesses of half the routers each (one per core): the
  six routers in float32 and BFLOAT16_ROUTERS in bfloat16, a router's runs in one process, where
  they share its initial state (compare); and 'device_tail': compare_device_tail(), in the
  first."""
  env = {**os.environ, 'XLA_FLAGS': XLA_FLAGS, 'JAX_PLATFORMS': 'cpu'}
  dtypes = lambda router: ('float32', 'bfloat16') if router in BFLOAT16_ROUTERS else ('float32',)
  parts = [{run_key(router, dtype): small_experiment(tiny_experiment, router, dtype).to_dict()
            for router in routers for dtype in dtypes(router)}
           for routers in (ROUTERS[::2], ROUTERS[1::2])]
  with tempfile.TemporaryDirectory() as tmp:
    workers = []
    for i, part in enumerate(parts):
      path = os.path.join(tmp, f'runs_{i}.json')
      with open(path, 'w', encoding='utf-8') as f:
        json.dump(part, f)
      workers.append(subprocess.Popen(
          [sys.executable, '-m', 'vmoe.train.multidevice_test', path] +
          (['--device-tail'] if i == 0 else []), cwd=REPO, env=env,
          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [worker.communicate(timeout=900) for worker in workers]
  found = {}
  for worker, (stdout, stderr) in zip(workers, outputs):
    assert worker.returncode == 0, stderr[-3000:]
    found.update((r['key'], r) for r in map(json.loads, stdout.splitlines()))
  return found


@pytest.fixture(scope='module')
def results(once_per_session, tiny_experiment) -> dict:
  """run_compare_subprocesses() once per test session, also under pytest-xdist (conftest.py)."""
  return once_per_session('multidevice_results',
                          lambda: run_compare_subprocesses(tiny_experiment))


@pytest.mark.parametrize('router', ROUTERS)
def test_expert_sharded_step_equals_the_single_device_step(results, router):
  """Each step, run from the same state on 1 and 8 devices, agrees to float32 rounding.

  Comparing parameters with a fixed tolerance cannot work: Adam's first steps move a parameter by
  about lr g / (|g| + eps), so a gradient that is zero up to rounding (|g| ~ 1e-8 ~ eps; the
  attention keys' bias has an exactly zero gradient) moves its parameter anywhere in [-lr, lr]
  depending on the last bits of g, and those depend on the summation order. So the test checks
  the gradients to the summation's rounding, and the parameters against what each side's own
  gradient explains, to the rounding of the elementwise update (step_differences).
  """
  r = results[router]
  assert r['mesh'] == {'data': 2, 'expert': 4}
  assert r['expert_spec'] == "P('expert',)" and r['expert_shard'] == [2, 32, 128]
  np.testing.assert_allclose(r['loss_8'], r['loss_1'], rtol=REDUCTION_RTOL)
  for step in r['steps']:
    check_gradients(step, REDUCTION_RTOL)
    assert max(step['param_excess'].values()) <= 1, step['param_excess']
  # The routers' state moves by counts (lossfree_tc: u times the sign of integer load
  # differences, summed over all groups, whichever device holds them) or not at all (random_tc),
  # so it is equal on both unless a token's top two logits tie to float32 rounding and the two
  # programs choose differently: that moves a bias by at most 2u (-u to +u) in a step.
  bound = 2 * router_config.RouterConfig('lossfree_tc', 1).options['bias_update_rate']
  assert all(diff <= bound for diff in r['router_state_diff']), r['router_state_diff']


def check_gradients(step: dict, rtol: float) -> None:
  """Every leaf's gradient on 8 devices equals the 1-device one to `rtol` of its largest entry;
  the attention keys' bias, whose gradient is exactly zero (softmax ignores a shift shared by all
  keys), to `rtol` of the largest gradient of the model: both sides are rounding."""
  largest = max(step['grad_scale'].values())
  for path, diff in step['grad_diff'].items():
    if "['key']['bias']" in path:
      assert max(step['grad_scale'][path], step['grad_8_scale'][path]) <= rtol * largest, path
    else:
      assert diff <= rtol * step['grad_scale'][path], (path, diff)


@pytest.mark.parametrize('router', BFLOAT16_ROUTERS)
def test_bfloat16_sharded_step_equals_the_single_device_step(results, router):
  """As the float32 test, with the gradient and loss tolerances of bfloat16 compute; Adam's
  update is float32 on both sides, so the parameters are checked as there."""
  r = results[run_key(router, 'bfloat16')]
  assert r['mesh'] == {'data': 2, 'expert': 4}
  np.testing.assert_allclose(r['loss_8'], r['loss_1'], rtol=BF16_LOSS_RTOL)
  for step in r['steps']:
    check_gradients(step, BF16_GRAD_RTOL)
    assert max(step['param_excess'].values()) <= 1, step['param_excess']


def test_the_device_augmentation_gives_the_same_batch_on_1_and_8_devices(results):
  # Per example, the tail reads its own pixels and key only, and computes in integers (uint8
  # pixels, integer tables, truncated blends, rounded warps) up to the value range: the same
  # pixels whatever the sharding. The value range is one multiply and one add in float32, which
  # either program's compiler may fuse into one rounding: at most an ulp of 1 (F32_EPS) apart.
  # The one-hot labels are exact.
  r = results['device_tail']
  assert r['image_shards'] == NUM_DEVICES
  # Each device augments its own examples: nothing moves between devices.
  assert r['collectives_8'] == {}, r['collectives_8']
  assert r['image_diff'] <= F32_EPS and r['labels_diff'] == 0
  assert r['changed'] > 0.9      # RandAugment (2, 20) changes nearly every image.


@pytest.mark.parametrize('router', ROUTERS)
def test_tokens_reach_their_experts_by_all_to_all(results, router):
  r = results[router]
  assert r['collectives_1'] == {}
  found = r['collectives_8']
  # Dispatch and combine, forward and backward: at least four all-to-alls.
  assert len(found.get('all-to-all', [])) >= 4, found
  # Neither the token buffers nor the expert weights are gathered: only the router's top_k is.
  assert all('/moe/router/' in name for name in found.get('all-gather', [])), found
  assert not found.get('reduce-scatter') and not found.get('collective-permute'), found


if __name__ == '__main__':
  with open(sys.argv[1], encoding='utf-8') as runs:
    records = json.load(runs)
  initial_states = {}
  for run, record in records.items():
    print(json.dumps(compare(run, experiment_lib.parse(record), initial_states)), flush=True)
  if '--device-tail' in sys.argv[2:]:
    print(json.dumps(compare_device_tail()), flush=True)
