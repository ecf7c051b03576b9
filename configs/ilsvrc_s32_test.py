"""The ImageNet-1k rung: every config validates and builds, its recipe is V-MoE's ImageNet-1k
cell value by value, and it trains (embedded data, and TFDS mock imagenet2012 data)."""
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
import tensorflow_datasets as tfds

from configs import common
from configs import ilsvrc_s32
from configs import ilsvrc_s32_vmoe
from data.datasets import sources
from testing import runs
from vmoe.model import vit
from vmoe.routing import declarations
from vmoe.routing import router as router_lib
from vmoe.run import run_outputs
from vmoe.train import experiment as experiment_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = [(router, c) for router in router_lib.PAPER_ROUTERS for c in (1, 2)]
LAB_ROUTERS = sorted(set(router_lib.ROUTERS) - set(router_lib.PAPER_ROUTERS))


def build_abstract(parsed) -> dict:
  """Parameter shapes of the parsed config's model for one routing group (no memory)."""
  model = vit.build_model(parsed.model, parsed.moe)
  images = jax.ShapeDtypeStruct((parsed.moe.group_size,) + parsed.model.image_shape, jnp.float32)
  return jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x)['params'], images)


def lookup(config, dotted: str):
  for key in dotted.split('.'):
    config = config[key]
  return config


def moe_blocks(params) -> list[str]:
  return [k for k, v in params.items() if isinstance(v, dict) and 'moe' in v]


@pytest.mark.parametrize('router,c', GRID + [(declarations.DENSE, 1)]
                         + [(name, 1) for name in LAB_ROUTERS])
def test_every_rung_config_validates_and_builds(router, c):
  config = ilsvrc_s32.get_config(f'router={router},c={c}')
  parsed = experiment_lib.parse(config, num_devices=1)
  assert (parsed.router_name == router
          and config.config_arg == f'router={router},c={c},runlocal=False')
  params = build_abstract(parsed)
  assert moe_blocks(params) == ([] if router == declarations.DENSE else ['block_05', 'block_07'])
  # The same backbone and schedule for every router: only the moe block differs.
  cell = ilsvrc_s32_vmoe.get_config().to_dict()
  assert {k for k, v in config.to_dict().items() if cell[k] != v} <= {'moe', 'config_arg'}
  local = experiment_lib.parse(ilsvrc_s32.get_config(f'router={router},c={c},runlocal=True'),
                               num_devices=1)
  assert local.model.variant == 'mu/32' and local.num_train_steps == 2
  assert moe_blocks(build_abstract(local)) == ([] if router == declarations.DENSE else
                                               ['block_01'])


def test_the_grid_is_the_papers_convention():
  # T = 8 images x 50 tokens = 400, E = 8: C = round(c x 400 / 8) = 50 or 100, in training and
  # evaluation; k = c for token choice. Soft MoE routes each image alone: round(c x 50 / 8) = 6, 12.
  for router, c in GRID:
    parsed = experiment_lib.parse(ilsvrc_s32.get_config(f'router={router},c={c}'), num_devices=1)
    num_tokens = parsed.moe.images_per_group * parsed.model.tokens_per_image
    expected = {1: 6, 2: 12}[c] if router == 'soft_moe' else 50 * c
    assert (parsed.moe.router.capacity(num_tokens, 8)
            == parsed.moe.router.capacity(num_tokens, 8, train=False) == expected)
    assert parsed.moe.router.num_selected_experts is None


# V-MoE's ImageNet-1k cell, value by value: vmoe_s32_last2_ilsvrc2012_randaug_light1.py (FILE)
# and configs/vmoe_paper/common.py (COMMON), description 'ViT-S/32, E=8, K=2, Last 2, 300 Epochs'.
PUBLISHED_CELL = {
    'model.variant': 'VMoE-S/32',          # COMMON get_vmoe_config: S = 512, 8, 2048, 8; /32.
    'model.image_size': 224,               # FILE get_vmoe_params(image_size=224).
    'model.num_classes': 1000,             # FILE NUM_CLASSES.
    'model.pool': 'tok',                   # COMMON classifier = 'token'.
    'model.representation_size': 512,      # COMMON representation_size = hidden_size.
    'model.dropout_rate': 0.0,             # COMMON encoder.dropout_rate (attention's too).
    'moe.num_experts': 8,                  # E=8.
    'moe.every': 2, 'moe.last': 2,         # Last 2: range(1, 8, 2)[-2:] = (5, 7).
    'moe.group_size': 8,                   # COMMON group_size = 8 images x 50 patches.
    'moe.dropout_rate': 0.2,               # FILE get_vmoe_params: moe.dropout_rate.
    'moe.expert_init': 'shared',           # COMMON split_rngs = False.
    'moe.dispatch_dtype': 'bfloat16',      # COMMON dispatcher.bfloat16 = True.
    'moe.router.name': 'softmax_tc',       # NoisyTopExpertsPerItemRouter.
    'moe.router.num_selected_experts': 2,  # K=2.
    'moe.router.capacity_factor': 1.05,    # COMMON dispatcher.capacity_factor.
    'moe.router.capacity_rounding': 'ceil_multiple_of_4',   # vmoe/moe.py compute_capacity.
    'moe.router.eval_capacity_factor': 4.0,                 # FILE evaluate.model_overrides.
    'moe.router.noise_std': 1.0,           # COMMON noise_std = 1.0 ("1.0 / num_experts").
    'moe.router.importance_loss_weight': 0.005, 'moe.router.load_loss_weight': 0.005,   # COMMON.
    'loss': 'sigmoid_xent',                # FILE loss.name.
    'batch_size': 8192,                    # FILE BATCH_SIZE.
    'mixup_alpha': 0.2,                    # COMMON get_mixup_concentration('light1').
    'data.name': 'imagenet2012',
    'data.train_split': 'train[:99%]', 'data.eval_split': 'train[99%:]',   # FILE dataset.*.
    'data.shuffle_buffer': 50_000,         # FILE get_data_params_train.
    'data.train_images': 1_268_355,        # round(0.99 x 1,281,167), TFDS's boundary.
    'optimizer.b1': 0.9, 'optimizer.b2': 0.999,              # COMMON adam.
    'optimizer.weight_decay': 0.1,         # FILE weight_decay = [('.*/kernel', 0.1)].
    'optimizer.grad_clip_norm': 1.0,       # FILE gradient_clip.global_norm.
    'schedule.peak_lr': 3e-3,              # FILE learning_rate.peak_value.
    'schedule.warmup_steps': 10_000, 'schedule.end_lr': 1e-5,   # COMMON warmup_linear_decay.
    'eval.every_steps': 1000,              # COMMON evaluate.every_steps.
    'eval.batch_size': 8192,               # FILE get_data_params_eval(batch_size=BATCH_SIZE).
    'checkpoint.every_steps': 1000,        # COMMON save_checkpoint.every_steps.
    'log_every_steps': 100,                # COMMON report_progress.every_steps.
    'seed': 0,                             # COMMON seed; FILE get_hyper sweeps 0, 1, 2.
}


def test_the_published_cell_is_vmoes_file_value_by_value():
  config = ilsvrc_s32_vmoe.get_config()
  assert {key: lookup(config, key) for key in PUBLISHED_CELL} == PUBLISHED_CELL
  # COMMON get_vmoe_config: head_bias_init = -math.log(num_classes).
  assert config.model.head_bias_init == -math.log(1000)
  # 300 epochs (the description): V-MoE's ceil(300 x 1,268,355 / 8192) = ceil(46,448.5) steps.
  assert config.num_train_steps == 46_449
  # FILE: 'decode_jpeg_and_inception_crop(224)|flip_lr|randaug(2, 10)|value_range(-1,1)|onehot',
  # with RandAugment's arithmetic as the reference's code computes it (data/pp/randaug.py).
  assert config.data.pp_train.startswith(
      "decode|inception_crop(224)|flip_lr|randaug(2, 10, arithmetic='reference')|"
      'value_range(-1, 1)|onehot(1000,')
  # FILE get_data_params_eval: 'decode|resize_small(256)|central_crop(224)|value_range(-1,1)|...'.
  evaluation = 'decode|resize_small(256)|central_crop(224)|value_range(-1, 1)|'
  assert config.data.pp_eval.startswith(evaluation)
  # FILE dataset.test (ILSVRC2012 validation), imagenet_v2 test, imagenet_real (real_label).
  sets = {name: tuple(entry) for name, entry in config.eval.sets.items()}
  assert {name: entry[:2] for name, entry in sets.items()} == {
      'test': ('imagenet2012', 'validation'), 'imagenet_v2': ('imagenet_v2', 'test'),
      'imagenet_real': ('imagenet2012_real', 'validation')}
  assert sets['test'][2] == sets['imagenet_v2'][2] == config.data.pp_eval
  assert sets['imagenet_real'][2] == evaluation + (
      'multi_hot(1000, key="real_label", key_result="labels")|keep("image", "labels")')
  assert dict(config.fewshot.datasets) == {}       # No few-shot in V-MoE's ImageNet-1k cell.


def test_the_published_cell_routes_108_slots_and_evaluates_with_400():
  # T = 400 tokens, E = 8, k = 2: ceil(1.05 x 800 / 8) = 105 -> 108; evaluation ceil(4 x 800 / 8).
  parsed = experiment_lib.parse(ilsvrc_s32_vmoe.get_config(), num_devices=1)
  router = parsed.moe.router
  assert parsed.moe.images_per_group * parsed.model.tokens_per_image == 400
  assert (router.capacity(400, 8), router.capacity(400, 8, train=False)) == (108, 400)
  assert router.experts_per_token == 2


def test_the_published_cells_cpu_mode_trains_on_embedded_data(tmp_path):
  # A 'mu/32' model (Last-1 of its 2 blocks), two steps, upstream, the eval.sets 'test' stand-in
  # and 10-shot digits: no ImageNet needed.
  parsed = experiment_lib.parse(ilsvrc_s32_vmoe.get_config('runlocal=True'), num_devices=1)
  summary = runs.train(parsed, str(tmp_path), 'configs/ilsvrc_s32_vmoe.py')
  assert summary.steps == 2 and summary.router == 'softmax_tc' and summary.capacity == 1.05
  assert summary.upstream_prec1 is not None and set(summary.eval_sets) == {'test'}
  assert (tmp_path / run_outputs.SUMMARY_FILE).exists()


def test_a_run_on_mock_imagenet2012_reaches_its_summary(tmp_path, monkeypatch):
  # The rung's data path on TFDS mock data: train[:99%] / train[99%:] and ILSVRC2012 validation
  # of imagenet2012 at 64 px. ImageNet-V2 and ReaL are not prepared here: each is skipped.
  config = ilsvrc_s32_vmoe.get_config('runlocal=True')
  labels = common.labels_pp(1000)
  config.data = common.data_block(
      name='imagenet2012', data_dir=str(tmp_path / 'tfds'), train_split='train[:99%]',
      eval_split='train[99%:]', num_classes=1000, shuffle_buffer=64,
      pp_train=(f"decode|inception_crop(64)|flip_lr|randaug(2, 10, arithmetic='reference')|"
                f'value_range(-1, 1)|{labels}'),
      pp_eval=ilsvrc_s32.eval_pp(labels).replace('256', '73').replace('224', '64'),
      augment_on='device')   # The rung's: the flip, RandAugment and labels on the accelerator.
  real = config.data.pp_eval.replace(labels, 'multi_hot(1000, key="real_label", '
                                             'key_result="labels")|keep("image", "labels")')
  config.eval.sets = {'test': ('imagenet2012', 'validation', config.data.pp_eval),
                      'imagenet_real': ('imagenet2012_real', 'validation', real)}
  config.fewshot.datasets = {}
  parsed = experiment_lib.parse(config, num_devices=1)
  checked = []
  # mock_data fakes the reads, not the prepared files that check_available looks for.
  monkeypatch.setattr(sources, 'check_available', checked.append)
  real_check = sources.TfdsSource.check

  def check(self, data_config, release, splits):
    if data_config.name == 'imagenet2012':
      return 1000, [100] * len(splits)
    return real_check(self, data_config, release, splits)
  monkeypatch.setattr(sources.TfdsSource, 'check', check)
  with tfds.testing.mock_data(num_examples=100):
    summary = runs.train(parsed, str(tmp_path / 'run'), 'configs/ilsvrc_s32_vmoe.py')
  assert checked == [parsed.data] and summary.dataset == 'imagenet2012' and summary.steps == 2
  assert set(summary.eval_sets) == {'test'}        # imagenet2012_real skipped: not prepared.
  assert (tmp_path / 'run' / run_outputs.SUMMARY_FILE).exists()


def test_without_imagenet_main_stops_with_the_steps_to_prepare_it(tmp_path):
  result = subprocess.run(
      [sys.executable, 'main.py', '--config=configs/ilsvrc_s32_vmoe.py',
       f'--workdir={tmp_path / "run"}', f'--config.data.data_dir={tmp_path / "no_data"}'],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 2 and 'Traceback' not in result.stderr
  assert 'Error: ImageNet-1k (imagenet2012) is not prepared in' in result.stderr
  assert 'python -m data.prepare build imagenet2012' in result.stderr
