"""The embedded-data study: a small V-MoE on Fashion-MNIST with each of the paper's routers.

  python main.py --config=configs/tiny.py:router=sinkhorn_ec,c=2 --workdir=runs/tiny/sinkhorn_ec_c2
  python main.py --config=configs/tiny.py:router=dense --workdir=runs/tiny/dense   # baseline
  python main.py --config=configs/tiny.py:router=softmax_ec,runlocal=True --workdir=/tmp/t  # CI

Arguments: router = one of the paper's six (softmax_tc, sinkhorn_tc, softmax_ec, sinkhorn_ec,
sparsity_ec, soft_moe) or 'dense' (no MoE layer: the same ViT with dense MLPs); c = 1 or 2 (k for
token choice), the paper's; runlocal=True for a 2-step CI run. Other capacities are an override:
--config.moe.router.capacity_factor=1.25 (any c > 0; for token choice an integer k <= 8).

Model: 'XS/7' ViT (width 64, 4 blocks, MLP 128, 4 heads) on 28x28x1 images: 16 patches of 7x7 and
a class token, so 17 tokens per image. Blocks 1 and 3 are MoE layers (Every-2) with E = 8 experts.
Routing matters at this size: a routing group is 16 images = 272 tokens, so at c=1 each expert has
C = round(272/8) = 34 slots and must choose (expert choice) or be chosen by (token choice) 34 of 272
tokens, and Soft MoE mixes each image's 17 tokens into 8 x 2 slots (c=1) or 8 x 4 slots (c=2).

Recipe: softmax cross-entropy (single-label data), Adam (0.9, 0.999) with decoupled weight decay
1e-4 on kernels, 100 warm-up steps to 3e-3 then linear decay to 1e-5 over 3000 steps (3.2 epochs),
clipping at 1.0, batch 64, no augmentation, no mixup; evaluation every 1000 steps, few-shot at the
end. Router presets (noise, balance losses, softmax combine) are the paper configs'
(configs/common.py: moe_config).

Length and augmentation are the pilot's choice (results/tiny/pilot.md, regime long3000, by the rule
of launch/pilot.py): the longest run that fits `make demo` (7 runs, two at a time, in at most 20
minutes) with the smallest seed spread; the pilot's report has the numbers that chose it. Step
times per router: bench/results/train_step.json; what the study reached: results/tiny/.
Few-shot: 10-shot linear transfer to scikit-learn digits and to Fashion-MNIST (test split).
"""
import ml_collections as mlc

from configs import blocks
from configs import common
from evaluation import eval_config
from vmoe.model import mesh_config
from vmoe.run import checkpoint_config
from vmoe.run import wandb_config
from vmoe.train import optim_config

NUM_TRAIN_STEPS = 3000      # The pilot's regime long3000 (results/tiny/pilot.md).
EVAL_EVERY_STEPS = 1000
BATCH_SIZE = 64
PEAK_LR = 3e-3
NUM_EXPERTS = 8
GROUP_SIZE = 16          # Images per routing group: 16 x 17 = 272 tokens.
PATCH_SIZE = 7
IMAGE_SIZE = 28
EVAL_BATCH_SIZE = 400    # Divides the 10,000 test images and is a multiple of GROUP_SIZE.


def get_config(arg=None):
  """arg: router=NAME (default sinkhorn_ec; 'dense' for no MoE), c=1|2, runlocal=True, and
  router_module=PATH for a router of your own (docs/routers.md)."""
  arg = common.parse_arg(arg, router='sinkhorn_ec', c=1.0, runlocal=False, router_module='')
  config = mlc.ConfigDict()
  config.config_arg = arg.canonical
  config.seed = 0
  config.batch_size = BATCH_SIZE
  config.num_train_steps = NUM_TRAIN_STEPS
  config.loss = 'softmax_xent'          # Fashion-MNIST has one label per image.
  config.mixup_alpha = 0.0
  config.log_every_steps = 100

  # Softmax cross-entropy needs no sigmoid prior over many classes: head bias 0.
  config.model = common.model_config(f'XS/{PATCH_SIZE}', 10, IMAGE_SIZE, channels=1,
                                     head_bias_init=0.0)
  config.moe = common.moe_config(arg.router, arg.c, NUM_EXPERTS, GROUP_SIZE, arg.router_module)
  pp = f'decode(channels=1)|value_range(-1, 1)|{common.labels_pp(10)}'
  # manual_dir None: the IDX files of dataset-fashion-mnist; train_images None: NUM_TRAIN_STEPS
  # counts no epochs.
  config.data = common.data_block(
      name='fashion_mnist', train_split='train', eval_split='test', pp_train=pp, pp_eval=pp,
      num_classes=10,
      shuffle_buffer=60_000,            # The whole training set: a full shuffle.
      cache=True)                       # 47 MB of uint8 images.
  config.optimizer = blocks.config_block(optim_config.OptimizerConfig(weight_decay=1e-4))
  config.schedule = blocks.config_block(optim_config.ScheduleConfig(peak_lr=PEAK_LR,
                                                                     warmup_steps=100))
  config.eval = blocks.config_block(eval_config.EvalConfig(every_steps=EVAL_EVERY_STEPS,
                                                                batch_size=EVAL_BATCH_SIZE))
  # Digits are 8x8: resize to the model's 28x28 (a no-op for Fashion-MNIST). At the end only.
  config.fewshot = common.fewshot_config(
      {'digits': ('train', 'test'), 'fashion_mnist': ('train', 'test')},
      f'decode(channels=1)|resize({IMAGE_SIZE})|value_range(-1, 1)|keep("image", "label")',
      batch_size=EVAL_BATCH_SIZE, every_steps=NUM_TRAIN_STEPS)
  # keep = 2: a corrupt newest checkpoint leaves one to resume from (vmoe/run/checkpointing.py).
  config.checkpoint = blocks.config_block(
      checkpoint_config.CheckpointConfig(every_steps=500, keep=2))
  config.wandb = blocks.config_block(
      wandb_config.WandbConfig(project='vmoe-routers-tiny'))
  config.mesh = blocks.config_block(mesh_config.MeshConfig())
  if arg.runlocal:
    common.runlocal(config)
    config.batch_size = config.eval.batch_size = config.fewshot.batch_size = GROUP_SIZE
  return config
