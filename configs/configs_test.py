"""Every config file loads, parses into its typed sections and builds its model abstractly; bad
configs fail early naming the key to change; a paper config's CPU mode really trains."""
import ast
import glob
import importlib.util
import json
import math
import os
import re

from absl import flags
import jax
import jax.numpy as jnp
import ml_collections as mlc
from ml_collections import config_flags
import pytest

from configs import common
from data import config as data_config
from results import paper
from testing import runs
from vmoe.model import vit
from vmoe.model import vit_config
from vmoe.routing import declarations
from vmoe.routing import router as router_lib
from vmoe.run import run_outputs
from vmoe.train import experiment as experiment_lib

CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))
PAPER_FILES = [f'{arch}_{router}' for arch in ('b32', 'b16', 'l16')
               for router in router_lib.PAPER_ROUTERS]
DENSE_FILES = [f'{arch}_dense' for arch in ('b32', 'b16', 'l16')]   # The baselines.
LIBRARY_FILES = {'__init__', 'common', 'blocks'}


def load(name: str, arg: str | None = None) -> mlc.ConfigDict:
  """Loads configs/NAME.py and calls get_config as config_flags does for 'NAME.py[:arg]'."""
  spec = importlib.util.spec_from_file_location(name, os.path.join(CONFIG_DIR, f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config() if arg is None else module.get_config(arg)


def parse(config) -> experiment_lib.Experiment:
  """The config's experiment record, checked for one device."""
  return experiment_lib.parse(config, num_devices=1)


def build_abstract(config) -> dict:
  """Parameter shapes of the config's model for one routing group of images (no memory)."""
  parsed = parse(config)
  model = vit.build_model(parsed.model, parsed.moe)
  images = jax.ShapeDtypeStruct((parsed.moe.group_size,) + parsed.model.image_shape, jnp.float32)
  return jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x)['params'], images)


def test_the_config_files_are_the_papers_18_tiny_the_router_lab_and_the_imagenet_rung():
  names = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(CONFIG_DIR, '*.py'))}
  names -= LIBRARY_FILES | {n for n in names if n.endswith('_test')}
  assert names == set(PAPER_FILES) | set(DENSE_FILES) | {'tiny', 'router_lab', 'ilsvrc_s32',
                                                          'ilsvrc_s32_vmoe'}


@pytest.mark.parametrize('arch', ['b32', 'b16', 'l16'])
def test_the_router_lab_config_is_the_paper_cell_with_any_router(arch):
  # configs/router_lab.py: the paper's recipe of that architecture, the router's own presets.
  lab = load('router_lab', f'arch={arch},router=softmax_ec,c=2')
  paper_cell = load(f'{arch}_softmax_ec', 'c=2')
  assert lab.config_arg == f'arch={arch},router=softmax_ec,c=2,runlocal=False'
  lab.config_arg = paper_cell.config_arg
  assert lab.to_dict() == paper_cell.to_dict()
  other = load('router_lab', f'arch={arch},router=lossfree_tc')
  assert other.moe.router.name == 'lossfree_tc' and other.moe.router.noise_std == 0.0
  assert dict(other.moe.router.options) == {'bias_update_rate': 1e-3, 'n_groups': 1,
                                            'topk_groups': 1, 'route_scale': 1.0}
  parse(other)


@pytest.mark.parametrize('name', DENSE_FILES)
def test_dense_baseline_is_the_router_configs_model_without_moe_layers(name):
  config = load(name)
  routed = load(name.replace('dense', 'softmax_tc')).to_dict()
  differences = {k for k in config.to_dict() if config.to_dict()[k] != routed[k]}
  assert differences == {'moe'}     # Same recipe, data, model, evaluation and mesh.
  assert config.moe.num_experts == 0 and config.moe.router is None     # No router block.
  assert parse(config).router_name == declarations.DENSE
  params = build_abstract(config)
  assert not any(isinstance(v, dict) and 'moe' in v for v in params.values())


ARCH_OF_FILE = {'b32': 'B/32', 'b16': 'B/16', 'l16': 'L/16'}
# A docstring's line of the paper's cell at one capacity: c (k for token choice) and its numbers.
CELL_LINE = re.compile(r'^  ([ck])=(\d): (?:JFT prec@1 ([\d.]+)%, ([\d.]+) TPUv3-days; '
                       r'ImageNet 10-shot ([\d.]+)%\.|not reported.*)$', re.MULTILINE)


@pytest.mark.parametrize('name', PAPER_FILES)
def test_paper_config_docstring_quotes_the_papers_cells(name):
  with open(os.path.join(CONFIG_DIR, f'{name}.py'), encoding='utf-8') as f:
    docstring = ast.get_docstring(ast.parse(f.read()))
  arch, router = ARCH_OF_FILE[name[:3]], name[4:]
  jft_table, fewshot_table = paper.SOURCES[arch]
  assert (f'({jft_table}: JFT-300M prec@1, training TPUv3-days; {fewshot_table}: ImageNet 10-shot)'
          in docstring)
  cells = CELL_LINE.findall(docstring)
  assert [int(c) for _, c, *_ in cells] == list(paper.CAPACITIES)
  for letter, capacity, prec1, days, fewshot in cells:
    assert letter == ('k' if router in paper.TOKEN_CHOICE else 'c')
    cell = paper.lookup(arch, router, int(capacity))
    quoted = tuple(float(v) if v else None for v in (prec1, days, fewshot))
    assert quoted == (cell.jft_prec1, cell.tpuv3_days, cell.imagenet_10shot)


@pytest.mark.parametrize('name', PAPER_FILES)
def test_paper_config_validates_and_builds(name):
  config = load(name)
  parse(config)
  arch, router = name.split('_', 1)
  assert config.model.variant == ARCH_OF_FILE[arch]
  assert config.moe.router.name == router and config.moe.router.capacity_factor == 1
  assert config.config_arg == 'c=1,runlocal=False'
  params = build_abstract(config)
  moe_blocks = [k for k, v in params.items() if isinstance(v, dict) and 'moe' in v]
  assert moe_blocks == [vit_config.block_name(i) for i in range(1, len(moe_blocks) * 2, 2)]
  assert params['block_01']['moe']['experts']['wi'].shape[0] == 32        # E = 32.

  # c=2 changes the capacity, the sparsity solver's start (0 instead of the entropic warm start,
  # with 10 steps instead of 5) and the recorded argument, nothing else; 'c=1' equals no argument.
  assert load(name, 'c=1').to_dict() == config.to_dict()
  config2 = load(name, 'c=2')
  parse(config2)
  assert config2.moe.router.capacity_factor == 2 and config2.config_arg == 'c=2,runlocal=False'
  # The solver's steps and start are the parsed router's (the config leaves them to parse).
  solver = lambda c: (parse(c).moe.router.sparsity_steps, parse(c).moe.router.sparsity_warm_start)
  assert solver(config) == (5, 10) and solver(config2) == (10, 0)
  assert config.moe.router.sparsity_steps is None
  config2.moe.router.capacity_factor, config2.config_arg = 1.0, config.config_arg
  assert config2.to_dict() == config.to_dict()

  local = load(name, 'c=2,runlocal=True')       # The CPU mode: a 'mu' model, 2 steps.
  parse(local)
  assert local.model.variant.startswith('mu/') and local.num_train_steps == 2
  assert build_abstract(local)['block_01']['moe']['experts']['wi'].shape[0] == 32


def test_soft_moe_c2_builds_twice_the_slots():
  # B/32: 7x7 patches + class token = 50 tokens per image (Soft MoE routes each image alone):
  # C = round(50/32) = 2 slots per expert at c=1 and round(100/32) = 3 at c=2.
  for arg, slots in ((None, 2), ('c=2', 3)):
    params = build_abstract(load('b32_soft_moe', arg))
    assert params['block_01']['moe']['router']['phi'].shape == (768, 32, slots)


# (T, C, effective c = C E / T) of every paper config under the default rule (round, halves to
# even): sparse routers route 8 images of 50 (B/32) or 197 (B/16, L/16) tokens; Soft MoE one image.
EFFECTIVE_CAPACITY = {
    ('b32', 'sparse', 1): (400, 12, 0.96),      # 12.5 -> 12.
    ('b32', 'sparse', 2): (400, 25, 2.0),       # 25.
    ('b32', 'soft', 1): (50, 2, 1.28),          # 1.5625 -> 2.
    ('b32', 'soft', 2): (50, 3, 1.92),          # 3.125 -> 3.
    ('16', 'sparse', 1): (1576, 49, 0.99492),   # 49.25 -> 49.
    ('16', 'sparse', 2): (1576, 98, 1.98985),   # 98.5 -> 98.
    ('16', 'soft', 1): (197, 6, 0.97462),       # 6.156 -> 6.
    ('16', 'soft', 2): (197, 12, 1.94924),      # 12.3125 -> 12.
}


def routed_capacity(config: mlc.ConfigDict) -> tuple[int, int, float]:
  """(T, C, effective c) of a config's MoE layers: T tokens per routing group, C slots per expert,
  and the capacity factor C E / T the rounding leaves (docs/fidelity.md lists the 18 configs').

  Sparse routers route groups of moe.group_size images; Soft MoE routes each image alone. An
  image has (image_size / patch)^2 patches, plus the class token with pool = 'tok'.
  """
  parsed = parse(config)
  moe = parsed.moe
  num_tokens = moe.images_per_group * parsed.model.tokens_per_image
  capacity = moe.router.capacity(num_tokens, moe.num_experts)
  return num_tokens, capacity, capacity * moe.num_experts / num_tokens


@pytest.mark.parametrize('name', PAPER_FILES)
def test_effective_capacity_of_the_paper_configs(name):
  arch, router = name.split('_', 1)
  for c in (1, 2):
    num_tokens, capacity, effective = routed_capacity(load(name, f'c={c}'))
    key = ('b32' if arch == 'b32' else '16', 'soft' if router == 'soft_moe' else 'sparse', c)
    want_tokens, want_capacity, want_effective = EFFECTIVE_CAPACITY[key]
    assert (num_tokens, capacity) == (want_tokens, want_capacity)
    assert effective == pytest.approx(want_effective, abs=1e-5)


@pytest.mark.parametrize('router,capacity,expected', [
    # configs/tiny.py: T = 16 images x 17 tokens = 272 per routing group (Soft MoE: one image,
    # 17), E = 8. C = round(1.25 x 272 / 8) = round(42.5) = 42 (halves to even); k = 3:
    # round(3 x 272 / 8) = 102; Soft MoE: round(1.25 x 17 / 8) = round(2.66) = 3.
    ('softmax_ec', 1.25, (272, 42)),
    ('softmax_tc', 3.0, (272, 102)),
    ('soft_moe', 1.25, (17, 3)),
])
def test_capacities_outside_the_papers_grid_parse(router, capacity, expected):
  # The paper configs restrict their argument c to the paper's (1, 2); the library takes any c > 0,
  # and any integer k <= E for token choice (vmoe/model/moe_test.py trains the layer at these).
  config = common.override(load('tiny', f'router={router}'),
                           {'moe.router.capacity_factor': capacity})
  assert routed_capacity(config)[:2] == expected
  assert parse(config).moe.router.capacity_factor == capacity


@pytest.mark.parametrize('name', PAPER_FILES + ['tiny'])
def test_router_presets_follow_the_reference(name):
  # Noise 1/E for softmax and Sinkhorn routers (paper eq. softmax-affinity; V-MoE's routers'
  # default noise_std 1.0, relative to 1/E); balance losses for softmax_tc only; experts from one
  # shared initialisation (V-MoE i21k); C = round(c T / E) with halves to even (paper Sec. 4.1);
  # the training combine takes the clean softmax for sinkhorn_tc only (the reference's
  # kl_projection_routing; fidelity D5).
  routers = [name.split('_', 1)[1]] if name != 'tiny' else list(router_lib.PAPER_ROUTERS)
  for router in routers:
    config = load(name) if name != 'tiny' else load('tiny', f'router={router}')
    moe = parse(config).moe     # The router as parsed, its config's presets resolved.
    noisy = ('softmax_tc', 'sinkhorn_tc', 'softmax_ec', 'sinkhorn_ec')
    assert moe.router.noise_std == (1.0 if router in noisy else 0.0)
    losses = 0.005 if router == 'softmax_tc' else 0.0
    assert moe.router.importance_loss_weight == moe.router.load_loss_weight == losses
    assert moe.expert_init == 'shared' and moe.router.capacity_rounding == 'round_half_even'
    assert moe.router.noisy_combine == (router != 'sinkhorn_tc')


@pytest.mark.per_router('router')
@pytest.mark.parametrize('router', sorted(router_lib.ROUTERS) + [declarations.DENSE])
def test_tiny_config_validates_and_builds(router):
  for c in (1, 2):
    config = load('tiny', f'router={router},c={c}')
    parse(config)
    assert config.config_arg == f'router={router},c={c},runlocal=False'
    params = build_abstract(config)
    assert ('moe' in params['block_01']) == (router != declarations.DENSE)
    assert 'mlp' in params['block_00'] and 'mlp' in params['block_02']
  local = load('tiny', f'router={router},runlocal=True')
  parse(local)
  assert local.num_train_steps == 2 and local.batch_size % local.moe.group_size == 0


def test_paper_recipe_values():
  config = load('l16_softmax_tc')
  # 300 epochs of ImageNet-21k's 14,197,122 - 102,400 = 14,094,722 training images at batch 4096:
  # ceil(300 * 14,094,722 / 4096) = ceil(1,032,328.27) = 1,032,329 steps.
  assert config.num_train_steps == 1_032_329
  assert config.schedule.peak_lr == 4e-4 and load('b16_softmax_tc').schedule.peak_lr == 8e-4
  assert (config.batch_size, config.loss, config.mixup_alpha) == (4096, 'sigmoid_xent', 0.5)
  assert config.moe.router.noise_std == 1.0
  assert config.moe.router.importance_loss_weight == config.moe.router.load_loss_weight == 0.005
  assert config.moe.every == 2 and config.moe.group_size == 8
  ec = load('l16_sinkhorn_ec').moe.router
  assert ec.importance_loss_weight == ec.load_loss_weight == 0.0
  assert ("inception_crop(224)|flip_lr|randaug(2, 20, arithmetic='reference')"
          in config.data.pp_train)
  assert config.fewshot.shots == (10,) and 'imagenet2012' in config.fewshot.datasets


def test_paper_eval_preprocessing_is_vmoe_s():
  # V-MoE pretrain_imagenet21k.py, dataset.val.process:
  #   f'decode|resize_small(256)|central_crop(224)|{pp_common}', pp_common =
  #   'value_range(-1,1)|onehot(21843)|keep("image", "labels")' (our label ops: labels_pp).
  # V-MoE common_fewshot.get_fewshot(resize_resolution=256, target_resolution=224), process:
  #   'decode|resize(256)|central_crop(224)|value_range(-1, 1)|keep("image", "label")'.
  upstream = ('decode|resize_small(256)|central_crop(224)|value_range(-1, 1)|'
              + common.labels_pp(21_843))
  fewshot = 'decode|resize(256)|central_crop(224)|value_range(-1, 1)|keep("image", "label")'
  for name in PAPER_FILES:
    config = load(name)
    assert (config.data.pp_eval, config.fewshot.pp) == (upstream, fewshot), name


def test_paper_configs_count_fall11_images():
  # num_train_steps is 300 epochs of fall11's 14,197,122 images less V-MoE's 102,400 held out =
  # 14,094,722 (data.train_images, which check_available compares with the prepared split).
  config = load('b32_sinkhorn_ec')
  assert (config.data.train_images == data_config.IMAGENET21K_TRAIN_IMAGES == 14_094_722
          == data_config.FALL11_IMAGES - data_config.IMAGENET21K_HOLDOUT)
  assert config.num_train_steps == math.ceil(300 * config.data.train_images / 4096)
  # The CPU mode and tiny count no epochs: no size is required.
  assert load('b32_sinkhorn_ec', 'runlocal=True').data.train_images is None
  assert load('tiny').data.train_images is None
  # The override the refusal names parses from the command line (winter21: ~13,051,100 images).
  for name in ('b32_sinkhorn_ec', 'tiny'):
    flags_config = _parse_main_flags(f'--config={CONFIG_DIR}/{name}.py',
                                     '--config.data.train_images=13051100')
    assert flags_config.data.train_images == 13_051_100


def _parse_main_flags(*argv) -> mlc.ConfigDict:
  """The config main.py would get from `python main.py ARGV` (config_flags, locked)."""
  values = flags.FlagValues()
  argv = ['main.py', *argv]
  config_flags.DEFINE_config_file('config', None, flag_values=values, lock_config=True,
                                  sys_argv=argv)
  values(argv)
  return values.config


def test_config_flags_argument_and_overrides():
  config = _parse_main_flags(f'--config={CONFIG_DIR}/b32_sinkhorn_ec.py:c=2',
                             '--config.moe.router.softmax_combine=False',
                             '--config.num_train_steps=100', '--config.schedule.warmup_steps=10',
                             '--config.model.patch_size=16')
  assert config.moe.router.capacity_factor == 2 and config.config_arg == 'c=2,runlocal=False'
  assert not config.moe.router.softmax_combine and config.num_train_steps == 100
  assert parse(config).model.patch == 16               # The placeholder takes an int.


@pytest.mark.parametrize('arg,message', [
    ('c=2,speed=3', "unknown config argument 'speed'.*valid: c, runlocal"),
    ('c=two', "c='two': expected a float"),
    ('runlocal=maybe', "runlocal='maybe': expected True or False"),
    ('c=3', r"c=3 is not one of the paper's \(1, 2\); use the config argument c=1 or c=2, or "
            '--config.moe.router.capacity_factor=3'),
])
def test_bad_config_argument_fails(arg, message):
  with pytest.raises(ValueError, match=message):
    load('b32_softmax_ec', arg)


def test_bare_key_means_true():
  assert common.parse_arg('runlocal', c=1.0, runlocal=False).canonical == 'c=1,runlocal=True'


def _tiny(**changes):
  """configs/tiny.py (XS/7, E=8, groups of 16 images, batch 64) with `changes` applied."""
  return common.override(load('tiny', 'router=softmax_tc'), changes)


@pytest.mark.parametrize('changes,num_devices,message', [
    ({'moe.router.name': 'top2'}, 1,
     "moe.router: unknown router 'top2'; valid routers: .*sinkhorn_ec"),
    ({'model.variant': 'XXL/7'}, 1, "model: unknown ViT variant 'XXL/7'"),
    ({'model.variant': 'XS'}, 1, 'names no patch size'),
    ({'moe.router.capacity_factor': 0.0}, 1, 'capacity factor must be > 0, got 0.0'),
    ({'moe.router.capacity_factor': 1.5}, 1, 'must be an integer; got 1.5'),
    ({'moe.router.capacity_factor': 9.0}, 1,
     'selects k=9 experts per token but only E=8 experts exist'),
    # Expert choice at c = 9 > E: C = round(9 x 272 / 8) = 306 slots but T = 16 x 17 = 272 tokens.
    ({'moe.router.name': 'softmax_ec', 'moe.router.load_loss_weight': 0.0,
      'moe.router.capacity_factor': 9.0}, 1, 'expert choice needs capacity <= T=272 tokens per '
                                             'group, got C=306'),
    ({'model.patch_size': 5}, 1, 'patch size 5 does not divide model.image_size=28'),
    ({'moe.group_size': 24}, 1, 'batch_size=64 gives 64 images per device, not a multiple of '
                                'moe.group_size=24'),
    ({}, 8, r'8 images per device, not a multiple of moe.group_size=16.*multiple of 128'),
    ({}, 3, 'batch_size=64 does not split over 3 devices'),
    ({'eval.batch_size': 40}, 1, 'eval.batch_size=40 gives 40 images per device'),
    ({'moe.num_experts': 1, 'moe.router.capacity_factor': 2.0}, 1,
     'selects k=2 experts per token but only E=1 experts exist'),
    ({'moe.every': 5}, 1, 'moe.every=5 places no MoE layer in a 4-block model'),
    ({'moe.last': 3}, 1, 'moe.last=3 but Every-2 places 2 MoE layers in a 4-block model'),
    ({'moe.dropout_rate': 1.0}, 1, r'moe.dropout_rate must be in \[0, 1\) or None'),
    ({'moe.dispatch': 'sorted'}, 1, "unknown moe.dispatch 'sorted'"),
    ({'loss': 'hinge'}, 1, "unknown loss 'hinge'"),
    ({'model.pool': 'max'}, 1, "unknown model.pool 'max'"),
    ({'model.num_classes': 11}, 1, 'model.num_classes=11 but the data has 10 classes'),
    ({'mixup_alpha': -1.0}, 1, 'mixup_alpha must be >= 0'),
    ({'moe.router.noise_std': -1.0}, 1, 'noise_std and loss weights must be finite and >= 0'),
    ({'moe.router.sparsity_memory': 0}, 1, 'sparsity_memory must be >= 1'),
    ({'data.shuffle_buffer': 0}, 1, 'data.shuffle_buffer must be >= 1'),
    ({'fewshot.seeds': 0}, 1, 'fewshot.seeds=0'),
    ({'mesh.expert': 0}, 1, 'mesh.expert=0'),
    ({'wandb.mode': 'cloud'}, 1, "unknown wandb.mode 'cloud'"),
    ({'checkpoint.keep': 0}, 1, 'checkpoint.keep=0 must be >= 1'),
])
def test_parse_names_what_to_change(changes, num_devices, message):
  with pytest.raises(ValueError, match=message):
    experiment_lib.parse(_tiny(**changes), num_devices=num_devices)


def test_unknown_and_missing_keys_fail_listing_the_valid_ones():
  config = _tiny()
  config.model.depth = 3
  with pytest.raises(ValueError,
                     match=r'unknown config key\(s\) model.depth; valid: model.variant'):
    parse(config)
  del config.model['depth']
  del config.model['variant']
  with pytest.raises(ValueError, match='the config lacks model.variant'):
    parse(config)


def test_dense_model_skips_router_checks():
  # A dense model has no routing groups: any router name, capacity and group size are ignored.
  parsed = parse(_tiny(**{'moe.num_experts': 0, 'moe.router.name': 'dense',
                          'moe.group_size': 24}))
  assert parsed.moe.router is None and parsed.router_name == 'dense'


@pytest.mark.parametrize('overrides,mesh', [
    ({}, (1, 8)),                               # mesh.expert = -1: gcd(8 devices, 32 experts).
    ({'mesh.expert': 1}, (8, 1)),               # Data-parallel only.
    ({'moe.num_experts': 0, 'moe.router.name': 'dense'}, (8, 1)),   # No experts to split.
])
def test_parse_resolves_the_paper_configs_mesh_for_the_devices(overrides, mesh):
  # Every consumer of experiment.mesh (setup.build's mesh, the console header, the record in
  # WORKDIR/config.json) sees the numbers, not -1.
  parsed = experiment_lib.parse(common.override(load('b32_sinkhorn_ec'), overrides), num_devices=8)
  assert (parsed.mesh.data, parsed.mesh.expert) == mesh
  assert parsed.to_dict()['mesh'] == dict(zip(('data', 'expert'), mesh))
  with pytest.raises(ValueError, match='mesh.expert=3 must be >= 1 and divide the 8 devices'):
    experiment_lib.parse(common.override(load('b32_sinkhorn_ec'), {'mesh.expert': 3}),
                         num_devices=8)


@pytest.mark.parametrize('name', ['b32_sinkhorn_ec', 'tiny'])
def test_the_resolved_config_parses_back_to_the_same_record(name):
  # The trainer records Experiment.to_dict() in WORKDIR/config.json; tools parse it back.
  parsed = parse(load(name))
  assert parse(mlc.ConfigDict(parsed.to_dict())) == parsed
  dense = parse(load('tiny', 'router=dense'))
  assert parse(mlc.ConfigDict(dense.to_dict())) == dense
  # A JSON round trip (WORKDIR/config.json, read by vmoe/train/multidevice_test.py's subprocesses)
  # parses back to the same record.
  for record in (parsed, dense):
    assert parse(json.loads(json.dumps(record.to_dict()))) == record


def test_section_defaults_are_the_configs():
  # The configs build their sections from the dataclasses: a section's defaults are the values
  # every config uses unless it says otherwise.
  config = load('tiny', 'router=sparsity_ec')
  router = parse(config).moe.router    # The solver's steps and start resolved for c = 1.
  assert (router.sparsity_steps, router.sparsity_warm_start, router.sparsity_memory) == (5, 10, 3)
  assert tuple(config.fewshot.shots) == (10,) and config.fewshot.seeds == 3


def test_paper_config_runlocal_trains_on_embedded_data(tmp_path):
  # README: `configs/b32_softmax_tc.py:runlocal=True` is a CPU smoke run. It needs no ImageNet:
  # a 'mu/32' model on Fashion-MNIST as 64x64 RGB, two steps, evaluation, 10-shot digits.
  parsed = parse(load('b32_softmax_tc', 'runlocal=True'))
  assert parsed.data.name == 'fashion_mnist' and set(parsed.fewshot.datasets) == {'digits'}
  summary = runs.train(parsed, str(tmp_path), 'configs/b32_softmax_tc.py')
  assert summary.steps == 2 and summary.arch == 'mu/32' and summary.router == 'softmax_tc'
  assert summary.upstream_prec1 is not None and set(summary.fewshot) == {'digits'}
  assert (tmp_path / run_outputs.SUMMARY_FILE).exists()
  assert summary.resolved_config == parsed.to_dict()
