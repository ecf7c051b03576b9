import json
import os
import subprocess
import sys

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

