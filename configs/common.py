"""The shared recipe: V-MoE's ImageNet-21k pretraining with the paper's models and routers.

Configs that produced reported numbers are frozen: add new functions or files, never change the
values below for an experiment that has run (V-MoE's configs/vmoe_paper/common.py rule).

The paper pretrained on JFT-300M, which is not public; the public recipe closest to it is V-MoE's
ImageNet-21k pretraining (google-research/vmoe configs/vmoe_paper/pretrain_imagenet21k.py and
common.py, "V-MoE": Riquelme et al. 2021). Each value below names its source. The paper's own
choices (Every-2, E = 32, C = round(c T / E) with c in {1, 2}, ImageNet 10-shot) come from its
"Models" subsection (Sec. 4.1) and Sec. 4.3.

A config argument selects presets, big_vision style: `configs/b32_sinkhorn_ec.py:c=2,runlocal=True`
(`parse_arg`); single values are overridden with `--config.KEY=VALUE`. Each block is built from its
section's dataclass (vmoe/train/experiment.py `config_block`), so a key not set below holds that
class's default, and vmoe/train/experiment.py `parse` turns the whole config into a
vmoe.train.experiment.Experiment.
"""
import math

import ml_collections as mlc

from base import errors
from base import published
from configs import blocks
from data import config as data_config
from evaluation import eval_config
from evaluation import fewshot
from vmoe.model import mesh_config
from vmoe.model import moe_config as moe_config_lib
from vmoe.model import vit_config
from vmoe.routing import declarations
from vmoe.routing import router_config
from vmoe.routing import user_module
from vmoe.run import checkpoint_config
from vmoe.run import wandb_config
from vmoe.train import optim_config

# ImageNet-21k (fall 2011 release): 21,843 classes; V-MoE holds out the first images of its
# single 'full' split for validation and trains on the rest (data/config.py). The data block
# records the training count as data.train_images, and sources.check_available refuses a prepared
# split of another size (the winter21 release: 19,167 synsets, ~13.15M images), since
# num_train_steps counts epochs of these images (data/datasets/imagenet21k.py says why it refuses
# rather than recount).
IMAGENET21K_CLASSES = 21_843
# V-MoE pretrain_imagenet21k.py: 'ViT-B/16, E=8, K=2, Every 2, 300 Epochs' with RandAugment
# (2, 20) and mixup 0.5, its "strong" augmentation; 90 epochs (ViT's i21k schedule) would be
# --config.num_train_steps=309699.
IMAGENET21K_EPOCHS = 300
PAPER_BATCH_SIZE = 4096           # V-MoE pretrain_imagenet21k.py: dataset.train.batch_size.

# Peak learning rate per model size of the paper's architectures (base/published.py ARCHS): V-MoE
# common.get_optimizer_config ('B', 32), ('B', 16): 8e-4; ('L', 16): 4e-4.
PEAK_LR = {'B': 8e-4, 'L': 4e-4}


def parse_arg(arg: str | None, **spec) -> mlc.ConfigDict:
  """Parses 'c=2,runlocal=True' against defaults `spec` (which also give each value's type).

  A bare key means True ('runlocal'); unknown keys and badly typed values fail naming the valid
  keys. The result has every key of spec, plus `canonical`: all values as one 'k=v,...' string,
  recorded in the config as config_arg.
  """
  values = dict(spec)
  for item in filter(None, (part.strip() for part in (arg or '').split(','))):
    key, has_value, text = (s.strip() for s in item.partition('='))
    if key not in spec:
      raise errors.UserError(f'unknown config argument {key!r} in {arg!r}; valid: '
                             f'{", ".join(spec)}.')
    values[key] = _cast(key, text if has_value else 'True', type(spec[key]))
  parsed = mlc.ConfigDict(values)
  # An empty string (router_module='': the built-in routers) is left out, so that a key added
  # with that default leaves the recorded config_arg of earlier runs unchanged.
  parsed.canonical = ','.join(f'{k}={_format(v)}' for k, v in values.items() if v != '')
  return parsed


def _cast(key: str, text: str, kind: type):
  if kind is bool:
    if text.lower() not in ('true', 'false', '1', '0'):
      raise errors.UserError(f'config argument {key}={text!r}: expected True or False.')
    return text.lower() in ('true', '1')
  try:
    value = kind(text)
  except ValueError:
    raise errors.UserError(f'config argument {key}={text!r}: expected a {kind.__name__}.'
                           ) from None
  if kind is float and not math.isfinite(value):
    raise errors.UserError(f'config argument {key}={text!r}: expected a finite float.')
  return value


def _format(value) -> str:
  return f'{value:g}' if isinstance(value, float) else str(value)


def override(config: mlc.ConfigDict, changes: dict) -> mlc.ConfigDict:
  """Sets {'dotted.key': value} in config, as --config.dotted.key=value would; returns config."""
  for key, value in changes.items():
    node = config
    *parents, leaf = key.split('.')
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return config


def moe_config(router: str, capacity: float, num_experts: int, group_size: int,
               router_module: str = '') -> mlc.ConfigDict:
  """`config.moe`: MoE every other block, `num_experts` experts, routing groups of images.

  Router presets are the router's own (its declaration's, vmoe/routing/declarations.py; for the
  paper's: router noise 1/E for the softmax and Sinkhorn routers, V-MoE's importance and load
  losses of weight 0.005 each for Softmax Token Choice only, the clean-logit combine of Sinkhorn
  Token Choice), and its options (its declaration's) at their defaults. Everything else is the
  defaults of moe_config.MoeConfig and router_config.RouterConfig: V-MoE's Every-2, dispatch by
  slot index, experts from one shared initialisation, softmax combine (Sec. 3.2 and 4.4: about 1%
  better), C = round(c T / E) with halves to even, and the sparsity solver's steps and start for
  this c (router_config.sparsity_solver_defaults). router='dense' gives a dense ViT:
  num_experts=0 and no router block (moe.router None). docs/fidelity.md traces every value.

  capacity: c (k for token choice), one of the paper's (base/published.py CAPACITIES); the library
  takes any c > 0 and integer k <= E, which --config.moe.router.capacity_factor sets.
  router_module: the module that registers a router of the user's own (docs/routers.md).
  """
  if router != declarations.DENSE and capacity not in published.CAPACITIES:
    raise errors.UserError(f'capacity factor c={capacity:g} is not one of the paper\'s '
                           f'{published.CAPACITIES}; use the config argument c=1 or c=2, or '
                           f'--config.moe.router.capacity_factor={capacity:g} for a capacity '
                           'outside the paper\'s grid.')
  if router == declarations.DENSE:   # The ViT without MoE layers: no router, no router block.
    config = blocks.config_block(moe_config_lib.MoeConfig(num_experts=0, group_size=group_size,
                                                           router=None))
    config.router = None
    return config
  try:
    user_module.import_router_module(router_module)
    declared = declarations.get(router)
  except ValueError as e:
    # A config argument (router=NAME) is the user's: a UserError, as parse_arg's.
    raise errors.UserError(
        f'{e} (Or {declarations.DENSE!r}: the ViT without MoE layers.)') from None
  # Blocks built unchecked: parse builds (and checks) the MoeConfig and its RouterConfig once.
  # Fields that RouterConfig resolves (the solver's steps for this c, the combine's noise) stay
  # placeholders until then.
  router_block = blocks.config_block(
      router_config.RouterConfig, name=router,
      capacity_factor=float(capacity),    # c (k for token choice): C = round(c T / E).
      module=router_module, options=dict(declared.options), **declared.presets)
  return blocks.config_block(
      moe_config_lib.MoeConfig, num_experts=num_experts,
      group_size=group_size,              # Images per routing group (T = group_size x N).
      router=router_block)


def model_config(variant: str, num_classes: int, image_size: int, channels: int,
                 head_bias_init: float) -> mlc.ConfigDict:
  """`config.model`: a ViT variant ('B/32') with V-MoE's head, pooling and (no) dropout (the
  defaults of vit_config.ModelConfig: V-MoE's classifier='token', dropout 0, no pre-logits
  layer)."""
  return blocks.config_block(vit_config.ModelConfig(variant, num_classes, image_size, channels,
                                                     head_bias_init))


def fewshot_config(datasets: dict, pp: str, batch_size: int, every_steps: int) -> mlc.ConfigDict:
  """`config.fewshot`: 10-shot linear transfer (paper Sec. 4.3; V-MoE common_fewshot), with the
  defaults of fewshot.FewShotConfig (3 seeds; l2 grid 2^-10 ... 2^19; TFDS's default data_dir).

  datasets: name -> (split to draw the shots from, split to evaluate on).
  """
  return blocks.config_block(fewshot.FewShotConfig(datasets, pp, batch_size, every_steps))


def data_block(**values) -> mlc.ConfigDict:
  """`config.data`: data.config.DataConfig of `values` (the other keys at its defaults)."""
  return blocks.config_block(data_config.DataConfig(**values))


def labels_pp(num_classes: int) -> str:
  """The end of every training/eval pp string: one-hot 'labels' beside the 'image'."""
  return f'onehot({num_classes}, key="label", key_result="labels")|keep("image", "labels")'


def _imagenet21k_data(image_size: int) -> mlc.ConfigDict:
  """V-MoE pretrain_imagenet21k.py's train/eval data, at `image_size` (224 in the paper); TFDS's
  default data_dir, and the ImageNet-21k archive in data.manual_dir when building it."""
  labels = labels_pp(IMAGENET21K_CLASSES)
  return data_block(
      name='imagenet21k',
      train_split=data_config.IMAGENET21K_SPLITS['train_minus_holdout'],
      eval_split=data_config.IMAGENET21K_SPLITS['holdout'],
      # RandAugment with the reference's arithmetic (data/pp/randaug.py; docs/fidelity.md D12).
      pp_train=(f'decode|inception_crop({image_size})|flip_lr|'
                f"randaug(2, 20, arithmetic='reference')|value_range(-1, 1)|{labels}"),
      # V-MoE dataset.val.process: 'decode|resize_small(256)|central_crop(224)|...', the shorter
      # side to 256 keeping the aspect ratio, then the central square (256/224 of the crop at
      # other image sizes).
      pp_eval=(f'decode|resize_small({image_size * 256 // 224})|central_crop({image_size})|'
               f'value_range(-1, 1)|{labels}'),
      num_classes=IMAGENET21K_CLASSES,
      shuffle_buffer=250_000,             # V-MoE dataset.train.shuffle_buffer.
      cache=False,                        # 14M JPEGs do not fit in memory.
      train_images=data_config.IMAGENET21K_TRAIN_IMAGES,   # What num_train_steps counts; checked.
      # The flip, RandAugment, value range and one-hot run on the accelerator (docs/data.md).
      augment_on='device')


def embedded_stand_in(config: mlc.ConfigDict) -> None:
  """The runlocal data of a paper config (in place): Fashion-MNIST as RGB at the model's image
  size, its labels one-hot over the config's classes, and 10-shot digits, all embedded (prepared
  in seconds; `python -m data.prepare embedded`), so that the CPU mode needs no ImageNet."""
  size, num_classes = config.model.image_size, config.model.num_classes
  pp = f'decode(channels=3)|resize({size})|value_range(-1, 1)'
  augment_on = config.data.augment_on     # The paper data's: the stand-in runs the same path.
  config.data = data_block(augment_on=augment_on,
      name='fashion_mnist', train_split='train[:512]', eval_split='test[:16]',
      pp_train=f'{pp}|{labels_pp(num_classes)}', pp_eval=f'{pp}|{labels_pp(num_classes)}',
      num_classes=num_classes, shuffle_buffer=512)
  config.fewshot = fewshot_config({'digits': ('train', 'test[:100]')},
                                  f'{pp}|keep("image", "label")',
                                  batch_size=config.fewshot.batch_size,
                                  every_steps=config.fewshot.every_steps)


def imagenet_fewshot_pp(image_size: int) -> str:
  """V-MoE common_fewshot.py's preprocessing, at `image_size` (224 in the paper).

  V-MoE's get_fewshot: process = 'decode|resize(256)|central_crop(224)|value_range(-1, 1)|
  keep("image", "label")'. Unlike the upstream evaluation (resize_small), the few-shot images are
  squashed to a 256 x 256 square, ignoring the aspect ratio; kept, since it is the reference's.
  """
  return (f'decode|resize({image_size * 256 // 224})|central_crop({image_size})|'
          'value_range(-1, 1)|keep("image", "label")')


def paper_config_modules() -> tuple[str, ...]:
  """The paper configs' module names under configs/, one a published architecture and router
  and one a dense ViT of each architecture: 'b32_softmax_tc', ..., 'l16_dense'."""
  return tuple(f'{arch.lower().replace("/", "")}_{router}' for arch in published.ARCHS
               for router in published.ROUTERS + (declarations.DENSE,))


def get_paper_config(variant: str, router: str, arg: str | None = None) -> mlc.ConfigDict:
  """One cell of the paper's tables: `variant` (B/32, B/16, L/16) x `router`, c from `arg`.

  arg: 'c=1' (default) or 'c=2' (k for token choice routers); 'runlocal=True' shrinks everything
  for a 2-step CPU run on embedded data (see `runlocal`; no ImageNet needed).
  """
  if variant not in published.ARCHS:
    raise errors.UserError(f'the paper has no {variant!r} model; valid: '
                           f'{", ".join(published.ARCHS)}.')
  size, patch = variant.split('/')                     # 'B/32': ViT-B, 32x32 patches.
  arg = parse_arg(arg, c=1.0, runlocal=False, router_module='')
  image_size = 224                                     # V-MoE: inception_crop(224).
  config = mlc.ConfigDict()
  config.config_arg = arg.canonical
  config.seed = 0
  config.batch_size = PAPER_BATCH_SIZE
  config.num_train_steps = math.ceil(
      IMAGENET21K_EPOCHS * data_config.IMAGENET21K_TRAIN_IMAGES / PAPER_BATCH_SIZE)   # 1,032,329.
  config.loss = 'sigmoid_xent'          # V-MoE: loss.name = 'sigmoid_xent'.
  config.mixup_alpha = 0.5              # V-MoE: mixup.concentration = 0.5.
  config.log_every_steps = 100          # V-MoE: report_progress.every_steps.

  config.model = model_config(variant, IMAGENET21K_CLASSES, image_size, channels=3,
                              head_bias_init=-10.0)   # V-MoE pretrain_imagenet21k.py.
  # Paper "Models": E = 32 experts, Every-2; V-MoE: groups of 8 images (min batch per device).
  config.moe = moe_config(router, arg.c, num_experts=32, group_size=8,
                          router_module=arg.router_module)
  # V-MoE i21k: dispatcher.bfloat16 = True (its Bfloat16Dispatcher; the Soft MoE router always
  # wraps it): tokens enter the dispatch in bfloat16 and the combine weights and sums stay
  # float32 (Soft MoE's float32 dispatch weights make its buffers float32; vmoe/model/moe.py). Full
  # bfloat16 compute is --config.model.dtype=bfloat16 (vit_config.ModelConfig).
  config.moe.dispatch_dtype = 'bfloat16'
  config.data = _imagenet21k_data(image_size)
  # V-MoE: Adam (0.9, 0.999), weight_decay = [('.*/kernel', 0.1)] decoupled, gradient_clip 1.0
  # (optim_config.OptimizerConfig's defaults but the decay).
  config.optimizer = blocks.config_block(optim_config.OptimizerConfig(weight_decay=0.1))
  # V-MoE: linear warmup 10k steps, then linear decay to 1e-5 (ScheduleConfig's end_lr).
  config.schedule = blocks.config_block(
      optim_config.ScheduleConfig(peak_lr=PEAK_LR[size], warmup_steps=10_000))
  config.eval = blocks.config_block(eval_config.EvalConfig(every_steps=1_000,
                                                                batch_size=4096))
  # ImageNet-1k 10-shot, the paper's downstream task; V-MoE draws ImageNet's shots from
  # imagenet2012_subset/10pct (a 10% subset of train) and evaluates every 25k steps.
  config.fewshot = fewshot_config({'imagenet2012': ('train', 'validation')},
                                  imagenet_fewshot_pp(image_size), batch_size=4096,
                                  every_steps=25_000)
  # V-MoE save_checkpoint: every 1000 steps, keep 1, in the background. keep = 2 here, so that a
  # corrupt newest checkpoint leaves one to resume from (vmoe/run/checkpointing.py; fidelity doc).
  config.checkpoint = blocks.config_block(
      checkpoint_config.CheckpointConfig(every_steps=1_000, keep=2))
  config.wandb = blocks.config_block(wandb_config.WandbConfig(project='vmoe-routers'))
  # V-MoE: num_expert_partitions = num_experts, capped at the devices (get_auto_logical_mesh):
  # mesh.expert = -1 is gcd(devices, E) devices along 'expert' (mesh_config.MeshConfig); 1 x 1 on
  # one device. --config.mesh.expert=1 is data-parallel only.
  config.mesh = blocks.config_block(mesh_config.MeshConfig(expert=mesh_config.AUTO))
  if arg.runlocal:
    paper_runlocal(config, int(patch))
  return config


def paper_runlocal(config: mlc.ConfigDict, patch: int) -> mlc.ConfigDict:
  """A paper config's CPU mode (in place): a 'mu' model of the same patch size on 2x2 patches,
  one MoE layer (block 1) of its experts, on embedded images in place of ImageNet."""
  config.model.variant = f'mu/{patch}'
  config.model.image_size = 2 * patch
  embedded_stand_in(config)
  return runlocal(config)


def runlocal(config: mlc.ConfigDict) -> mlc.ConfigDict:
  """Shrinks steps, batches and evaluation so one run finishes in seconds on a CPU (in place).

  Batches of 8 images are one routing group of the paper configs (V-MoE's 8 images; configs with
  larger groups raise their batches after this); two steps with one warm-up step exercise the
  schedule, evaluation, few-shot and checkpoints once each.
  """
  config.batch_size = 8
  config.num_train_steps = 2
  config.schedule.warmup_steps = 1
  config.log_every_steps = 1
  config.eval.every_steps = 2
  config.eval.batch_size = 8
  config.fewshot.every_steps = 2
  config.fewshot.batch_size = 8
  config.fewshot.seeds = 1
  config.checkpoint.every_steps = 2
  config.wandb.mode = 'disabled'
  return config
