"""Every recipe value of the 18 paper configs, pinned to its source (docs/fidelity.md's rows).

Each value below is the reference recipe's (google-research/vmoe's ImageNet-21k V-MoE config,
vmoe/configs/vmoe_paper/pretrain_imagenet21k.py, and its common_fewshot.py) unless the comment
names another source; the paper states none of them. A changed default fails here and points
at the row of docs/fidelity.md to update.
"""
import importlib

import numpy as np
import pytest

from configs import common
from data.stream import orders

ARCHS = ('b32', 'b16', 'l16')
ROUTERS = ('softmax_tc', 'sinkhorn_tc', 'softmax_ec', 'sinkhorn_ec', 'sparsity_ec', 'soft_moe')

# Keys whose value is the same in all 18 configs.
SHARED_RECIPE = {
    'data.name': 'imagenet21k',
    'data.train_split': 'full[102400:]',       # V-MoE holds out the first 102,400 images...
    'data.eval_split': 'full[:102400]',        # ... and evaluates upstream on them.
    'data.shuffle_buffer': 250_000,
    'data.cache': False, 'data.data_dir': None, 'data.manual_dir': None,   # Infrastructure:
    'data.files': None, 'data.file_format': None,                          # the user's machine.
    'data.augment_on': 'device',               # Project: the pp's tail on the accelerator (D20).
    'batch_size': 4096,
    'loss': 'sigmoid_xent',
    'mixup_alpha': 0.5,
    'optimizer.b1': 0.9, 'optimizer.b2': 0.999,
    'optimizer.weight_decay': 0.1,
    'optimizer.grad_clip_norm': 1.0,
    'schedule.warmup_steps': 10_000, 'schedule.end_lr': 1e-5,
    'model.head_bias_init': -10.0, 'model.representation_size': None,
    'model.pool': 'tok',                       # classifier='token'.
    'model.dropout_rate': 0.0,
    'model.image_size': 224, 'model.channels': 3,
    'model.patch_size': None,                  # From the variant: 32 or 16.
    'data.num_classes': 21_843, 'model.num_classes': 21_843,   # NUM_CLASSES (fidelity D2).
    'moe.every': 2, 'moe.num_experts': 32, 'moe.group_size': 8,
    'moe.expert_init': 'shared',               # split_rngs=False: one init for every expert.
    'moe.last': 0,                             # Every-2 in every block pair, not Last-N.
    'moe.dropout_rate': None,                  # The model's: 0.0 (moe.dropout_rate = 0.0).
    'moe.router.num_selected_experts': None,   # The paper's convention: k is c.
    'moe.router.eval_capacity_factor': None,   # Evaluation at the training capacity.
    'moe.dispatch': 'indices',                 # Same maths as 'einsum' (vmoe/model/moe_test.py).
    'moe.dispatch_dtype': 'bfloat16',          # dispatcher.bfloat16 = True (fidelity D3).
    'model.dtype': 'float32', 'model.remat': False,   # Float32 model (V-MoE's); no remat.
    'moe.router.softmax_combine': True,        # Paper Sec. 3.2-3.5.
    'moe.router.sinkhorn_iters': 20,           # ot_routing's maxiter.
    'moe.router.capacity_rounding': 'round_half_even',   # Paper Sec. 2's round(); V-MoE's round.
    'moe.router.module': '',                   # Project-only: the paper's routers are built in.
    'eval.every_steps': 1000, 'eval.batch_size': 4096,
    'fewshot.datasets': {'imagenet2012': ('train', 'validation')},   # Paper Sec. 4.3: ImageNet-1k.
    'fewshot.shots': (10,),                    # Paper Sec. 4.3: 10-shot.
    'fewshot.seeds': 3,                        # Project: 3 draws of the shots (fidelity D13).
    'fewshot.l2_grid_min_log2': -10, 'fewshot.l2_grid_max_log2': 19,
    'fewshot.every_steps': 25_000, 'fewshot.batch_size': 4096,
    'fewshot.data_dir': None, 'fewshot.manual_dirs': {'imagenet2012': None},   # Infrastructure.
    'seed': 0,
    'log_every_steps': 100,
    # keep: 2, where V-MoE's keep_last is 1: a deliberate deviation, so that a corrupt newest
    # checkpoint leaves one to resume from (vmoe/run/checkpointing.py restore_latest).
    'checkpoint.every_steps': 1000, 'checkpoint.keep': 2, 'checkpoint.asynchronous': True,
    'wandb.mode': 'offline', 'wandb.project': 'vmoe-routers',   # Project-only.
    # num_expert_partitions = num_experts, capped at the devices: gcd(devices, 32) along 'expert'
    # (vmoe/model/sharding.py resolve); --config.mesh.expert=1 is data-parallel only.
    'mesh.data': -1, 'mesh.expert': -1,
}
# V-MoE's ImageNet-21k learning rates: 8e-4 for B, 4e-4 for L.
PEAK_LR = {'b32': 8e-4, 'b16': 8e-4, 'l16': 4e-4}


def lookup(config, dotted: str):
  value = config
  for key in dotted.split('.'):
    value = value[key]
  return value


@pytest.mark.parametrize('arch', ARCHS)
@pytest.mark.parametrize('router', ROUTERS)
def test_every_paper_config_has_the_reference_recipe(arch, router):
  config = importlib.import_module(f'configs.{arch}_{router}').get_config()
  found = {key: lookup(config, key) for key in SHARED_RECIPE}
  found['fewshot.datasets'] = {k: tuple(v) for k, v in found['fewshot.datasets'].items()}
  found['fewshot.shots'] = tuple(found['fewshot.shots'])
  found['fewshot.manual_dirs'] = dict(found['fewshot.manual_dirs'])
  assert found == SHARED_RECIPE
  assert config.schedule.peak_lr == PEAK_LR[arch]
  assert config.moe.router.name == router
  # 300 epochs of fall11's training images at batch 4096 (configs/common.py derives it).
  assert config.num_train_steps == -(-300 * config.data.train_images // 4096) == 1_032_329


def test_the_shared_recipe_is_the_one_common_builds():
  # The dict above is not a copy that can drift from configs/common.py silently: a key common.py
  # sets in every paper config but this test does not pin would be unpinned, so list them all.
  config = common.get_paper_config('B/32', 'softmax_tc')
  leaves = set()

  def walk(node, prefix):
    for key, value in node.items():
      name = f'{prefix}{key}'
      if hasattr(value, 'items') and key not in ('datasets', 'manual_dirs'):
        walk(value, name + '.')
      else:
        leaves.add(name)
  walk(config, '')
  # Keys pinned elsewhere (configs/configs_test.py: presets, capacities, pp, steps), set per
  # config, or infrastructure paths.
  elsewhere = {'config_arg', 'num_train_steps', 'schedule.peak_lr',
               'data.pp_train', 'data.pp_eval', 'data.train_images', 'fewshot.pp',
               'model.variant', 'moe.router.name', 'moe.router.capacity_factor',
               'moe.router.noise_std', 'moe.router.importance_loss_weight',
               'moe.router.load_loss_weight', 'moe.router.sparsity_steps',
               'moe.router.sparsity_warm_start', 'moe.router.sparsity_memory',
               'moe.router.noisy_combine'}
  assert leaves - elsewhere - set(SHARED_RECIPE) == set()


def test_the_shuffle_buffer_shuffles_within_its_250_000_wide_window():
  # data.shuffle_buffer = W as the pipeline uses it (data/stream/orders.py EpochOrder): record i
  # sorts by i + W u, u ~ U(0, 1). Away from the shard's ends (W <= i < N - W) its new position is
  # about #{j: j + W u_j < i + W u_i} = i + W u_i - W / 2, so it moves W (u_i - 1/2), uniform on
  # [-W/2, W/2]: mean |move| = W / 4 = 62,500. Over 500,000 such records that mean has a standard
  # error of W sqrt(1/48) / sqrt(500,000) ~ 51 (and each position a counting noise of ~sqrt(W / 6)
  # ~ 200 records), so 1% (625) holds it; a window of 245,000 or 255,000 (means 61,250, 63,750)
  # falls outside.
  window = common.get_paper_config('B/32', 'softmax_tc', None).data.shuffle_buffer
  size = 1_000_000
  order = orders.EpochOrder(0, size, seed=0, process_index=0, shuffle_buffer=window).epoch(0)
  moved = (np.argsort(order) - np.arange(size))[250_000:size - 250_000]
  assert abs(np.abs(moved).mean() - 62_500) < 625
