"""docs/routers.md's worked example: a router with state, declared and registered from
docs/example_router.py alone, trains configs/tiny.py through a sweep and finds its row in the
sweep's tables."""
import os
import subprocess
import sys

import jax
import numpy as np

from vmoe.routing import router as router_lib
from vmoe.routing import router_config
from vmoe.routing import user_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = 'docs/example_router.py'
# A short tiny run: 4 steps, a 64-image evaluation, few-shot on 64 test images with one seed.
SHORT = ['--config.num_train_steps=4', '--config.schedule.warmup_steps=1',
         '--config.eval.every_steps=4', '--config.eval.batch_size=64',
         '--config.data.eval_split=test[:64]', '--config.fewshot.seeds=1',
         "--config.fewshot.datasets.digits=('train', 'test[:64]')",
         "--config.fewshot.datasets.fashion_mnist=('train', 'test[:64]')",
         '--config.checkpoint.every_steps=4']


def test_the_example_registers_from_its_file_with_its_presets_options_and_state():
  user_module.import_router_module(EXAMPLE)
  config = router_config.RouterConfig('ema_tc', 1, module=EXAMPLE, options={'penalty': 2.0})
  assert dict(config.options) == {'decay': 0.9, 'penalty': 2.0}
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 4))
  module = router_lib.Router(config, num_experts=4)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  _, updated = module.apply(variables, x, train=True, mutable=[router_lib.ROUTER_STATE])
  share = updated[router_lib.ROUTER_STATE]['state']['share']
  # 0.9 x 1/4 + 0.1 x (requests / 16): still a distribution over the 4 experts.
  np.testing.assert_allclose(np.sum(share), 1.0, rtol=1e-6)
  assert not np.allclose(share, 0.25)


def test_the_example_trains_sweeps_and_appears_in_the_tables(tmp_path):
  root, out = str(tmp_path / 'runs'), str(tmp_path / 'tables')
  sweep = subprocess.run(
      [sys.executable, '-m', 'launch.sweep', '--arch', 'tiny', '--workdir-root', root,
       '--routers', 'ema_tc', '--capacities', '1', '--router-module', EXAMPLE,
       '--python', sys.executable, '--config.wandb.mode=disabled', *SHORT],
      cwd=REPO, capture_output=True, text=True, timeout=600)
  assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
  assert os.path.exists(os.path.join(root, 'tiny', 'ema_tc_c1', 'summary.json'))
  tables = subprocess.run(
      [sys.executable, '-m', 'results.tables', '--runs', root, '--out', out, '--no-figures'],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert tables.returncode == 0, tables.stderr[-3000:]
  with open(os.path.join(out, 'xs7_fashion_mnist.md'), encoding='utf-8') as f:
    # Its row is named by the title it registered, and reads k: it allocates by token choice.
    assert '| EMA-balanced Token Choice (k=1) |' in f.read()


def test_the_page_quotes_the_example_as_it_is():
  with open(os.path.join(REPO, 'docs', 'routers.md'), encoding='utf-8') as f:
    page = f.read()
  with open(os.path.join(REPO, EXAMPLE), encoding='utf-8') as f:
    example = f.read()
  quoted = page.split('```python\n', 1)[1].split('```', 1)[0]
  assert quoted and quoted in example


def test_router_module_option_selects_the_shared_checks_of_the_example():
  # The page's command: `pytest --router-module=docs/example_router.py` keeps the per_router
  # checks of moe_test, router_test and configs_test, each for ema_tc alone (collected only).
  done = subprocess.run([sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:xdist',
                         f'--router-module={EXAMPLE}', 'vmoe/model/moe_test.py',
                         'vmoe/routing/router_test.py', 'configs/configs_test.py'],
                        cwd=REPO, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  nodes = sorted(line for line in done.stdout.splitlines() if '::' in line)
  assert nodes == [
      'configs/configs_test.py::test_tiny_config_validates_and_builds[ema_tc]',
      'vmoe/model/moe_test.py::test_layer_output_and_gradients_equal_the_dense_formula[ema_tc-1]',
      'vmoe/model/moe_test.py::test_layer_output_and_gradients_equal_the_dense_formula[ema_tc-2]',
      'vmoe/routing/router_test.py::test_router_parameters_and_outputs[ema_tc]']
