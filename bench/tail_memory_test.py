import json
import os
import subprocess
import sys

import jax
import numpy as np

from bench import tail_memory
from testing import tpu_compiler as tpu_compiler_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_rungs_tail_holds_under_4_mb_of_xla_tpu_temporaries_an_image(tmp_path):
  tpu_compiler_check.require()
  # One XLA:TPU compile of the rung's tail (flip, RandAugment (2, 10), value range, one-hot) for 8
  # images on one TensorCore of a TPU v4, in a process that starts jax on the CPU alone, as
  # `python -m bench.tail_memory` does. The compiler's buffer assignment is deterministic: this
  # checks a size, not a time. The bound is issue 56's target; the tail's measured temporaries
  # are in bench/results/tail_memory.json.
  out = tmp_path / 'tail_memory.json'
  subprocess.run([sys.executable, '-m', 'bench.tail_memory', '--tails', 'rung', '--tpu-images',
                  '8', '--cpu-images', '--out', str(out)], cwd=ROOT, check=True,
                 env={**os.environ, 'XLA_FLAGS': ''})
  [row] = json.loads(out.read_text(encoding='utf-8'))['rows']
  assert row['compiler'].startswith('XLA:TPU v4') and row['images'] == 8
  assert row['temp_bytes'] / row['images'] < tail_memory.TARGET_MB * tail_memory.MB, row


def test_the_chunked_tail_equals_the_whole_batch_tail():
  # The tail's outputs are per example (its pixels, its key), so lax.map over chunks of the
  # batch gives the same values; on XLA:CPU, 16 images of the paper's tail in chunks of 8.
  # Integer outputs are exact; float ones within an ulp of 1 (2^-23), since XLA may fuse
  # value_range's multiply and add in one program and not the other (D20).
  split = tail_memory.training_tails()['paper']
  shapes = split.shipped_shapes(tail_memory.IMAGE_SHAPE)
  rng = np.random.default_rng(0)
  batch = {'image': rng.integers(0, 256, (16,) + tuple(shapes['image'][0]), np.uint8)}
  for key, (shape, dtype) in shapes.items():
    if key != 'image':
      batch[key] = rng.integers(0, 10, (16,) + tuple(shape)).astype(dtype)
  whole = jax.jit(tail_memory.tail_fn(split))(batch)
  chunked = jax.jit(tail_memory.tail_fn(split, 8))(batch)
  assert set(whole) == set(chunked)
  for key in whole:
    ulp = 2.0 ** -23 if np.issubdtype(whole[key].dtype, np.floating) else 0
    np.testing.assert_allclose(np.asarray(chunked[key]), np.asarray(whole[key]), rtol=0,
                               atol=ulp)
