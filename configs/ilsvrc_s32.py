"""The ImageNet-1k rung: V-MoE's S/32 recipe on ILSVRC2012, with any router, c = 1 or 2.

The backbone, data and schedule are V-MoE's ImageNet-1k cell (google-research/vmoe
configs/vmoe_paper/vmoe_s32_last2_ilsvrc2012_randaug_light1.py and its common.py; docs/fidelity.md,
"The ImageNet-1k rung", traces every value): V-MoE's own 'S' (width 512, 8 blocks; vit.py
'VMoE-S'), E = 8 experts in the last two of the every-other blocks (blocks 5 and 7), pre-logits of
512 and a head bias of -ln(1000), expert dropout 0.2, 300 epochs of train[:99%] at batch 8192,
RandAugment (2, 10) and mixup 0.2 ("light1"), sigmoid cross-entropy, Adam at 3e-3 after 10k warm-up
steps down to 1e-5. Evaluation: train[99%:] (V-MoE's "validation") every 1000 steps, and with it
ILSVRC2012 validation (its "test"), ImageNet-V2 and ReaL where prepared (docs/data.md).

The router is the one argument: the paper's six at c = 1 or 2 in the paper's convention (k = c for
token choice, C = round(c T / E); configs/common.py moe_config gives each its presets), 'dense'
for the same ViT without MoE layers, or any registered router (router_module= for your own). The
published cell, V-MoE's own router (k = 2 at c = 1.05, evaluated at c = 4), is
configs/ilsvrc_s32_vmoe.py. `make sweep ARCH=ilsvrc_s32` runs the grid.

  python main.py --config=configs/ilsvrc_s32.py:router=sinkhorn_ec,c=2 \
      --workdir=runs/ilsvrc_s32/sinkhorn_ec_c2
CPU mode (a 'mu' model on embedded data, 2 steps): add runlocal=True.
Cost: V-MoE's cell pre-trains in 5 h 50 min on a TPUv3-32; docs/accelerators.md estimates 8 H100s.
"""
import math

import ml_collections as mlc

from configs import blocks
from configs import common
from evaluation import eval_config
from vmoe.model import mesh_config
from vmoe.run import checkpoint_config
from vmoe.run import wandb_config
from vmoe.train import optim_config

NUM_CLASSES = 1_000
# ILSVRC2012 'train' has 1,281,167 images; TFDS rounds a percent boundary to the closest record:
# train[:99%] ends at round(12,683,553.3 / 10) = 1,268,355, leaving 12,812 in train[99%:].
TRAIN_IMAGES = 1_268_355
TRAIN_SPLIT, VALIDATION_SPLIT, TEST_SPLIT = 'train[:99%]', 'train[99%:]', 'validation'
EPOCHS = 300
BATCH_SIZE = 8192
IMAGE_SIZE = 224
NUM_EXPERTS = 8
GROUP_SIZE = 8        # Images per routing group: V-MoE's 8 images x 50 tokens = 400.
VARIANT = 'VMoE-S/32'


def eval_pp(labels: str) -> str:
  """V-MoE's evaluation preprocessing: shorter side to 256, central 224 crop, in [-1, 1]."""
  return f'decode|resize_small(256)|central_crop({IMAGE_SIZE})|value_range(-1, 1)|{labels}'


def rung_config(router: str, c: float, runlocal: bool = False,
                router_module: str = '') -> mlc.ConfigDict:
  """The rung's recipe with `router` at capacity c (module docstring)."""
  config = mlc.ConfigDict()
  config.seed = 0
  config.batch_size = BATCH_SIZE
  # V-MoE trainer.get_train_steps_and_epochs: ceil(300 x 1,268,355 / 8192) = ceil(46,448.5).
  config.num_train_steps = math.ceil(EPOCHS * TRAIN_IMAGES / BATCH_SIZE)        # 46,449.
  config.loss = 'sigmoid_xent'          # V-MoE: loss.name.
  config.mixup_alpha = 0.2              # V-MoE common.get_mixup_concentration('light1').
  config.log_every_steps = 100          # V-MoE: report_progress.every_steps.
  config.model = common.model_config(VARIANT, NUM_CLASSES, IMAGE_SIZE, channels=3,
                                     head_bias_init=-math.log(NUM_CLASSES))
  config.model.representation_size = 512   # V-MoE: representation_size = hidden_size.
  config.moe = common.moe_config(router, c, NUM_EXPERTS, GROUP_SIZE, router_module)
  config.moe.last = 2                   # 'Last 2': blocks 5 and 7 (vit_config.moe_layer_indices).
  config.moe.dropout_rate = 0.2         # V-MoE: encoder.moe.dropout_rate (the experts' only).
  config.moe.dispatch_dtype = 'bfloat16'   # V-MoE: dispatcher.bfloat16 = True.
  labels = common.labels_pp(NUM_CLASSES)
  config.data = common.data_block(
      name='imagenet2012', train_split=TRAIN_SPLIT, eval_split=VALIDATION_SPLIT,
      pp_train=(f'decode|inception_crop({IMAGE_SIZE})|flip_lr|'
                f"randaug(2, 10, arithmetic='reference')|"   # V-MoE: get_randaug('light1'),
                f'value_range(-1, 1)|{labels}'),              # its arithmetic (D12).
      pp_eval=eval_pp(labels), num_classes=NUM_CLASSES,
      shuffle_buffer=50_000,            # V-MoE: dataset.train.shuffle_buffer.
      cache=False, train_images=TRAIN_IMAGES,
      augment_on='device')              # The pp's tail on the accelerator (docs/data.md).
  config.optimizer = blocks.config_block(optim_config.OptimizerConfig(weight_decay=0.1))
  config.schedule = blocks.config_block(optim_config.ScheduleConfig(peak_lr=3e-3,
                                                                     warmup_steps=10_000))
  real_labels = 'multi_hot(1000, key="real_label", key_result="labels")|keep("image", "labels")'
  config.eval = blocks.config_block(eval_config.EvalConfig(
      every_steps=1_000, batch_size=BATCH_SIZE, sets={
          'test': ('imagenet2012', TEST_SPLIT, eval_pp(labels)),
          'imagenet_v2': ('imagenet_v2', 'test', eval_pp(labels)),
          'imagenet_real': ('imagenet2012_real', 'validation', eval_pp(real_labels))}))
  # V-MoE's ImageNet-1k cell evaluates no few-shot transfer.
  config.fewshot = common.fewshot_config({}, common.imagenet_fewshot_pp(IMAGE_SIZE),
                                         batch_size=BATCH_SIZE, every_steps=1_000)
  config.checkpoint = blocks.config_block(
      checkpoint_config.CheckpointConfig(every_steps=1_000, keep=2))
  config.wandb = blocks.config_block(wandb_config.WandbConfig(project='vmoe-routers'))
  config.mesh = blocks.config_block(mesh_config.MeshConfig(expert=mesh_config.AUTO))
  if runlocal:
    # A 'mu/32' model (2 blocks: Last-1 keeps block 1) on embedded 64 px images; the test set is
    # other Fashion-MNIST test images, so that eval.sets runs too.
    config.model.variant, config.model.image_size = 'mu/32', 64
    config.model.representation_size = 16
    config.moe.last = 1
    common.embedded_stand_in(config)
    config.eval.sets = {'test': ('fashion_mnist', 'test[16:32]', config.data.pp_eval)}
    common.runlocal(config)
  return config


def get_config(arg=None):
  """arg: router=NAME (default softmax_tc; 'dense' for no MoE layers), c=1|2, runlocal=True,
  router_module=PATH."""
  arg = common.parse_arg(arg, router='softmax_tc', c=1.0, runlocal=False, router_module='')
  config = rung_config(arg.router, arg.c, arg.runlocal, arg.router_module)
  config.config_arg = arg.canonical
  return config
