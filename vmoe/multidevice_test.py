"""Expert parallelism on 8 simulated CPU devices: a sharded training step equals the 1-device step.

XLA reads --xla_force_host_platform_device_count only when jax starts and pytest's own process has
one CPU device, so the steps run in a subprocess, `python -m vmoe.multidevice_test ROUTER ...`,
which prints one JSON line per router for the test to check; two such subprocesses take three
routers each, one per core.

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
import fcntl
import json
import os
import re
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

from configs import tiny
from vmoe import atomic
from vmoe import optim
from vmoe import sharding
from vmoe import train_step as train_lib
from vmoe import trainer
from vmoe import vit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTERS = ('softmax_tc', 'sinkhorn_tc', 'softmax_ec', 'sinkhorn_ec', 'sparsity_ec', 'soft_moe')
NUM_DEVICES, EXPERT_AXIS, GROUP_SIZE, STEPS = 8, 4, 2, 2
# 8 CPU devices, on top of the session's fast-compile flags (conftest.py); both sides of every
# comparison run with the same flags.
XLA_FLAGS = (f'{os.environ.get("XLA_FLAGS", "")} '
             f'--xla_force_host_platform_device_count={NUM_DEVICES}')
COLLECTIVES = ('all-to-all', 'all-gather', 'all-reduce', 'reduce-scatter', 'collective-permute')
PEAK_LR = tiny.PEAK_LR   # With no warm-up, the first step's learning rate.


def small_config(router: str):
  """configs/tiny.py with the mu/7 model, 2-image groups, 16 images and no warm-up."""
  config = tiny.get_config(f'router={router}')
  config.model.variant = 'mu/7'
  config.moe.group_size = GROUP_SIZE
  config.batch_size = NUM_DEVICES * GROUP_SIZE
  config.schedule.warmup_steps = 0      # A non-zero learning rate from the first step.
  config.num_train_steps = 10
  config.mesh.expert = EXPERT_AXIS
  return config


def collectives(hlo_text: str) -> dict:
  """{collective: [op_name of each instance]} in a compiled module's text."""
  found = {}
  for line in hlo_text.splitlines():
    match = re.search(r' (' + '|'.join(COLLECTIVES) + r')(-start)?\(', line)
    if match:
      op_name = re.search(r'op_name="([^"]*)"', line)
      found.setdefault(match[1], []).append(op_name[1] if op_name else '')
  return found


def run_steps(config, mesh, state, batch: dict):
  """STEPS of the trainer's compiled step on `mesh` from host `state`: (state, [metrics], HLO)."""
  model = vit.build_model(config)
  tx, _ = optim.make_optimizer(config)
  state_shardings = sharding.tree_shardings(state, mesh)
  batch_sharding = sharding.batch_sharding(mesh)
  compiled = trainer.build_step(config, model, tx, mesh, state_shardings).lower(
      state, batch, jax.random.PRNGKey(0)).compile()
  state = jax.device_put(state, state_shardings)     # Fresh buffers: the step donates them.
  batch = sharding.put_batch(batch, batch_sharding)
  metrics = []
  for i in range(STEPS):
    state, step_metrics = compiled(state, batch, jax.random.PRNGKey(i))
    metrics.append(jax.device_get(step_metrics))
  return state, metrics, compiled.as_text()


def abs_diffs(a, b) -> dict:
  """{leaf path: largest |a - b|} of two trees of the same structure."""
  leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(a))[0]
  return {jax.tree_util.keystr(path): float(np.max(np.abs(x - y), initial=0.0))
          for (path, x), y in zip(leaves, jax.tree.leaves(jax.device_get(b)))}


def compare(router: str) -> dict:
  """1-device vs 8-device steps of `router`: the differences and what the 8-device HLO holds."""
  config = small_config(router)
  model = vit.build_model(config)
  tx, _ = optim.make_optimizer(config)
  rng = np.random.default_rng(0)
  shape = (config.batch_size,) + vit.image_shape(config)
  batch = {'image': rng.uniform(-1, 1, shape).astype(np.float32),
           'labels': np.eye(10, dtype=np.float32)[rng.integers(0, 10, config.batch_size)]}
  state = jax.device_get(jax.jit(train_lib.init_fn(model, tx, shape))(jax.random.PRNGKey(0)))
  mesh_1 = sharding.make_mesh(ml_collections.ConfigDict({'data': 1, 'expert': 1}),
                              jax.devices()[:1])
  mesh_8 = sharding.make_mesh(config.mesh)
  state_1, metrics_1, hlo_1 = run_steps(config, mesh_1, state, batch)
  state_8, metrics_8, hlo_8 = run_steps(config, mesh_8, state, batch)
  wi = state_8.params['block_01']['moe']['experts']['wi']
  mu_1, mu_8 = state_1.opt_state[1][0].mu, state_8.opt_state[1][0].mu   # Adam's first moment.
  return {
      'router': router,
      'mesh': dict(mesh_8.shape),
      'loss_1': [float(m['loss']) for m in metrics_1],
      'loss_8': [float(m['loss']) for m in metrics_8],
      'params': abs_diffs(state_1.params, state_8.params),
      'grad_moment': abs_diffs(mu_1, mu_8),
      'expert_shard': list(wi.addressable_shards[0].data.shape),
      'expert_spec': str(wi.sharding.spec),
      'collectives_1': collectives(hlo_1),
      'collectives_8': collectives(hlo_8),
  }


def run_compare_subprocesses() -> dict:
  """{router: compare(router)}, from two subprocesses of three routers each (one per core)."""
  env = {**os.environ, 'XLA_FLAGS': XLA_FLAGS, 'JAX_PLATFORMS': 'cpu'}
  workers = [subprocess.Popen([sys.executable, '-m', 'vmoe.multidevice_test', *routers], cwd=REPO,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for routers in (ROUTERS[::2], ROUTERS[1::2])]
  found = {}
  for worker in workers:
    stdout, stderr = worker.communicate(timeout=600)
    assert worker.returncode == 0, stderr[-3000:]
    found.update((r['router'], r) for r in map(json.loads, stdout.splitlines()))
  return found


@pytest.fixture(scope='module')
def results(tmp_path_factory) -> dict:
  """run_compare_subprocesses() once per test session. Under pytest-xdist every worker that gets
  one of these tests sets the fixture up: the first to take the lock runs the subprocesses and
  leaves their results in the session's shared temporary directory; the others read them."""
  session_dir = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    session_dir = session_dir.parent          # .../pytest-N, above each worker's popen-gwK.
  path = session_dir / 'multidevice_results.json'
  with open(session_dir / 'multidevice_results.lock', 'w', encoding='utf-8') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not path.exists():
      atomic.write_json(str(path), run_compare_subprocesses())
  return json.loads(path.read_text())


@pytest.mark.parametrize('router', ROUTERS)
def test_expert_sharded_step_equals_the_single_device_step(results, router):
  r = results[router]
  assert r['mesh'] == {'data': 2, 'expert': 4}
  assert r['expert_spec'] == "P('expert',)" and r['expert_shard'] == [2, 32, 128]
  np.testing.assert_allclose(r['loss_8'], r['loss_1'], rtol=1e-6)
  # Gradients (Adam's first moment) agree to float32 rounding.
  assert max(r['grad_moment'].values()) < 1e-7, r['grad_moment']
  # Parameters: Adam's first steps are about lr * sign(gradient), so a gradient that is zero up to
  # rounding on both sides moves its parameter by up to lr either way. The attention keys' bias
  # has an exactly zero gradient (softmax ignores a shift shared by all keys): it only stays
  # within STEPS steps. Every other parameter agrees to within 1% of one step (seen: < 0.6%).
  for path, diff in r['params'].items():
    bound = 2 * STEPS * PEAK_LR if "['key']['bias']" in path else 0.01 * PEAK_LR
    assert diff < bound, (path, diff)


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
  for name in sys.argv[1:]:
    print(json.dumps(compare(name)), flush=True)
