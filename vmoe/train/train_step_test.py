"""Tests of mixup and the train step wrappers."""
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.train import train_step


def test_mix_hand_worked():
  # Batch [0, 1, 2, 3] in 2 chunks of 2, weights (0.7, 0.3) and (0.9, 0.1). Example i of a chunk
  # becomes w0 x_i + w1 x_(i+1 mod 2) (V-MoE rolls by -1 within the device's batch):
  # chunk 0: 0.7 * 0 + 0.3 * 1 = 0.3, 0.7 * 1 + 0.3 * 0 = 0.7;
  # chunk 1: 0.9 * 2 + 0.1 * 3 = 2.1, 0.9 * 3 + 0.1 * 2 = 2.9.
  batch = {'image': jnp.arange(4.0)[:, None], 'labels': jnp.eye(4), 'mask': jnp.ones(4)}
  mixed = train_step.mix(batch, jnp.array([[0.7, 0.3], [0.9, 0.1]]))
  np.testing.assert_allclose(mixed['image'][:, 0], [0.3, 0.7, 2.1, 2.9], rtol=1e-6)
  np.testing.assert_array_equal(mixed['mask'], batch['mask'])        # Other keys pass through.
  # The labels mix with the same weights: one-hot rows become the weights at the same positions.
  np.testing.assert_allclose(mixed['labels'], [[0.7, 0.3, 0, 0], [0.3, 0.7, 0, 0],
                                               [0, 0, 0.9, 0.1], [0, 0, 0.1, 0.9]], rtol=1e-6)


def test_mixup_weights_are_sorted_dirichlet_draws():
  weights = train_step.mixup_weights(jax.random.PRNGKey(0), 0.5, num_chunks=1000, size=2)
  assert weights.shape == (1000, 2)
  np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)    # On the simplex.
  # Sorted descending: the example itself (weight 0) dominates its mix, weight >= 1/2.
  assert (weights[:, 0] >= weights[:, 1]).all() and (weights[:, 0] >= 0.5).all()
  assert len(np.unique(np.asarray(weights[:, 0]))) == 1000           # One draw per chunk.


def test_mixup_labels_use_the_image_weights():
  # Image i is the scalar i and its label one-hot i: a mixed label row holds the weight of each
  # source example, so its dot product with [0, 1, ..., B-1] is the mixed image.
  batch = {'image': jnp.arange(8.0)[:, None], 'labels': jnp.eye(8)}
  mixed = train_step.mixup(batch, jax.random.PRNGKey(3), 0.5, num_chunks=2)
  np.testing.assert_allclose(mixed['labels'] @ jnp.arange(8.0), mixed['image'][:, 0], rtol=1e-5)
  # Within a chunk all examples share the weights: the own label weight is the same per chunk.
  own = np.diag(np.asarray(mixed['labels']))
  np.testing.assert_allclose(own[:4], own[0], rtol=1e-6)
  np.testing.assert_allclose(own[4:], own[4], rtol=1e-6)
  assert own[0] != own[4] and (own >= 0.5).all()


def test_mixup_mixes_each_example_with_exactly_one_other():
  # The default mixup size, V-MoE's mixup_size = 2: with one-hot labels over 8 examples in one
  # chunk, each mixed label row has two nonzero weights, on itself and on the next example (a
  # roll by -1), summing to 1. Size 3 would put a third weight on example i + 2.
  batch = {'image': jnp.zeros((8, 1)), 'labels': jnp.eye(8)}
  mixed = np.asarray(train_step.mixup(batch, jax.random.PRNGKey(4), 0.5, num_chunks=1)['labels'])
  for i, row in enumerate(mixed):
    assert set(np.flatnonzero(row)) == {i, (i + 1) % 8}
  np.testing.assert_allclose(mixed.sum(axis=1), 1, rtol=1e-6)


def test_mixup_chunks_are_independent_devices():
  # Each chunk (device shard) is mixed with its own weights and only from its own examples: the
  # global mix equals mixing each chunk alone with its weight row (V-MoE's per-device mixup), and
  # changing chunk 1's input leaves chunk 0's output unchanged.
  rng = np.random.default_rng(0)
  batch = {'image': jnp.asarray(rng.normal(size=(12, 2, 2, 1)), jnp.float32),
           'labels': jnp.asarray(np.eye(5)[rng.integers(0, 5, 12)], jnp.float32)}
  weights = train_step.mixup_weights(jax.random.PRNGKey(1), 0.5, num_chunks=3, size=2)
  mix = jax.jit(train_step.mix)     # One compilation per shape, not one per operation.
  mixed = mix(batch, weights)
  for k in range(3):
    chunk = {key: v[4 * k:4 * (k + 1)] for key, v in batch.items()}
    alone = mix(chunk, weights[k:k + 1])
    for key in ('image', 'labels'):
      np.testing.assert_allclose(mixed[key][4 * k:4 * (k + 1)], alone[key], rtol=1e-6)
  changed = {**batch, 'image': batch['image'].at[4:8].set(100.0)}
  np.testing.assert_array_equal(mix(changed, weights)['image'][:4], mixed['image'][:4])
  assert not np.allclose(mix(changed, weights)['image'][4:8], mixed['image'][4:8])
  with pytest.raises(ValueError, match='batch of 12 does not split into 5 chunks'):
    mix(batch, jnp.full((5, 2), 0.5))


def test_largest_dirichlet_weight_has_the_exact_moments():
  # Dirichlet(0.5, 0.5) has X ~ Beta(1/2, 1/2) (arcsine law: X = sin^2(t), t ~ U(0, pi/2)), so
  # the sorted largest weight is M = max(X, 1 - X) = 1/2 + c/2 with c = |cos u|, u = 2t ~ U(0, pi).
  # With E c = 2/pi, E c^2 = 1/2, E c^3 = 4/(3 pi), E c^4 = 3/8:
  #   mean E M = 1/2 + 1/pi = 0.81831, variance s2 = 1/8 - 1/pi^2 = 0.023679,
  #   4th central moment m4 = E (c/2 - 1/pi)^4 = 3/128 + 1/(12 pi^2) - 3/pi^4 = 0.0010836.
  # Over n draws the sample mean has std sqrt(s2 / n) and the sample variance about
  # sqrt((m4 - s2^2) / n); at n = 100,000 these are 0.00049 and 0.000072. Bounds of 4 std fail a
  # correct sampler with probability 6e-5 each. (Unsorted, the own weight would have mean 1/2.)
  n = 100_000
  largest = np.asarray(train_step.mixup_weights(jax.random.PRNGKey(2), 0.5, n, 2)[:, 0], np.float64)
  mean, s2 = 0.5 + 1 / math.pi, 1 / 8 - 1 / math.pi ** 2
  m4 = 3 / 128 + 1 / (12 * math.pi ** 2) - 3 / math.pi ** 4
  assert abs(largest.mean() - mean) < 4 * math.sqrt(s2 / n), largest.mean()
  assert abs(largest.var() - s2) < 4 * math.sqrt((m4 - s2 ** 2) / n), largest.var()


# Run on 4 simulated CPU devices (XLA reads the device count only at start: a subprocess). Prints
# the collectives in the compiled sharded mixup and whether it equals the unsharded one.
SHARDED_MIXUP = """
import jax, jax.numpy as jnp, numpy as np
from vmoe.model import mesh_config
from vmoe.model import sharding
from vmoe.train import train_step
for data, expert in ((4, 1), (2, 2)):
  mesh = sharding.make_mesh(mesh_config.MeshConfig(data, expert))
  shards, batch_sharding = sharding.batch_shards(mesh), sharding.batch_sharding(mesh)
  fn = sharding.with_mesh(lambda b, r: train_step.mixup(b, r, 0.5, shards), mesh)
  jitted = jax.jit(fn, in_shardings=(batch_sharding, None), out_shardings=batch_sharding)
  batch = {'image': jnp.arange(16.0).reshape(16, 1), 'labels': jnp.eye(16)}
  rng = jax.random.PRNGKey(0)
  hlo = jitted.lower(batch, rng).compile().as_text()
  found = [c for c in ('all-reduce', 'all-gather', 'all-to-all', 'collective-permute',
                       'reduce-scatter') if c in hlo]
  expected = train_step.mixup(batch, rng, 0.5, shards)['labels']
  same = np.allclose(jitted(batch, rng)['labels'], expected)
  print(shards, found, same)
"""


def test_sharded_mixup_needs_no_communication():
  # The batch is cut into batch_shards(mesh) = 4 consecutive chunks, one per device, so each
  # device mixes its own shard: the compiled program has no collective, and equals the 1-device
  # result, on a 4 x 1 and a 2 x 2 mesh.
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu',
         'XLA_FLAGS': f'{os.environ.get("XLA_FLAGS", "")} --xla_force_host_platform_device_count=4'}
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  result = subprocess.run([sys.executable, '-c', SHARDED_MIXUP], cwd=repo, env=env,
                          capture_output=True, text=True, check=True)
  assert result.stdout.split('\n')[:2] == ['4 [] True', '4 [] True'], result.stdout + result.stderr


def test_with_mixup_keeps_the_signature_and_is_a_no_op_at_zero():
  seen = []
  def step(state, batch, rng):
    seen.append(batch)
    return state + 1, {'rng': rng}
  assert train_step.with_mixup(step, 0.0, num_chunks=2) is step
  wrapped = train_step.with_mixup(step, 0.5, num_chunks=2)
  batch = {'image': jnp.arange(4.0)[:, None], 'labels': jnp.eye(4)}
  state, metrics = wrapped(0, batch, jax.random.PRNGKey(1))
  assert state == 1 and 'rng' in metrics
  # Per chunk of 2, each example mixes with the other one of its chunk only.
  labels = np.asarray(seen[0]['labels'])
  assert not np.allclose(labels, np.eye(4))
  np.testing.assert_array_equal(labels[:2, 2:], 0)
  np.testing.assert_array_equal(labels[2:, :2], 0)


def test_router_summary_reports_the_solver_where_it_runs():
  base = {'dropped_tokens': 0.1, 'experts_per_token_mean': 1.0, 'experts_per_token_min': 0.0,
          'experts_per_token_max': 2.0, 'expert_load': jnp.array([0.5, 1.0, 1.5])}
  solver = {'solver_row_error': 0.05, 'solver_fallbacks': 2.0}
  out = train_step.router_summary({'block_01': base, 'block_03': {**base, **solver}})
  assert float(out['router/block_01/load_max_over_mean']) == pytest.approx(1.5)   # 1.5 / 1.0.
  assert 'router/block_01/solver_fallbacks' not in out
  assert out['router/block_03/solver_fallbacks'] == 2.0
  assert out['router/block_03/solver_row_error'] == 0.05
