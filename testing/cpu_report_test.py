"""pytest --cpu-report on a small suite, through a pytest-xdist worker as `make test` runs: CPU
burnt in the test process, in a subprocess, and by a JAX compile each land on their test."""
import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BURN = 0.3      # CPU seconds: process_time() only grows while this process computes.
SUITE = textwrap.dedent(f'''
    import subprocess, sys, time

    BURN = """
    import time
    end = time.process_time() + {BURN}
    while time.process_time() < end:
      pass
    """

    def test_own():
      exec(BURN)

    def test_child():
      subprocess.run([sys.executable, '-c', BURN], check=True)

    def test_jit():
      import jax, jax.numpy as jnp
      jax.jit(lambda x: jnp.sin(x) * 2)(jnp.ones(3)).block_until_ready()
    ''')


def test_each_tests_cpu_lands_on_it(tmp_path):
  (tmp_path / 'burn_test.py').write_text(SUITE)
  env = {**os.environ, 'PYTHONPATH': REPO}
  env.pop('JAX_COMPILATION_CACHE_DIR', None)     # The session's: the jit must compile here.
  subprocess.run([sys.executable, '-m', 'pytest', '-q', '-n', '1', '-p', 'no:cacheprovider',
                  '-p', 'testing.cpu_report', '--cpu-report=report.json',
                  'burn_test.py'], cwd=tmp_path, env=env, check=True, capture_output=True)
  report = json.loads((tmp_path / 'report.json').read_text())
  tests = {t['test'].split('::')[1]: t for t in report['tests']}
  assert set(tests) == {'test_own', 'test_child', 'test_jit'}
  assert tests['test_own']['own'] >= BURN and tests['test_child']['children'] >= BURN
  assert tests['test_jit']['compile'] > 0 and tests['test_jit']['trace'] > 0
  assert all(abs(t['total'] - t['own'] - t['children']) <= 0.0015 for t in report['tests'])
  assert [t['total'] for t in report['tests']] == sorted(
      (t['total'] for t in report['tests']), reverse=True)
  (suite_file,) = report['files']
  assert suite_file['file'] == 'burn_test.py'
  assert suite_file['total'] == report['total'] == round(sum(
      t['total'] for t in report['tests']), 1)
