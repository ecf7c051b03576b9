"""ViT / V-MoE: parameter counts, shapes of every variant, Every-2 placement, determinism."""
import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmoe.model import moe_config
from vmoe.model import vit
from vmoe.model import vit_config
from vmoe.routing import router_config


def make_config(variant='mu/4', router='softmax_ec', num_experts=4, c=1.0, num_classes=10,
                image_size=8, channels=1, pool='tok', representation_size=None, noise_std=0.0,
                loss_weight=0.0, group_size=2):
  """The model's sections of an experiment (loss, model, moe), typed as the trainer gets them."""
  router = router_config.RouterConfig(
      name=router, capacity_factor=c, noise_std=noise_std, importance_loss_weight=loss_weight,
      load_loss_weight=loss_weight, sinkhorn_iters=5, sparsity_steps=5)
  return types.SimpleNamespace(
      loss='softmax_xent',
      model=vit_config.ModelConfig(variant, num_classes, image_size, channels,
                                   head_bias_init=-10.0,
                                   representation_size=representation_size, pool=pool),
      moe=moe_config.MoeConfig(num_experts, group_size, router if num_experts else None))


def build(config) -> vit.VisionTransformer:
  return vit.build_model(config.model, config.moe)


def abstract_params(config, batch=2):
  """Parameter shapes without allocating them (jax.eval_shape)."""
  model = build(config)
  images = jax.ShapeDtypeStruct((batch,) + config.model.image_shape, jnp.float32)
  return jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x)['params'], images)


def count(params) -> int:
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))


def formula_params(config) -> int:
  """Parameters of a ViT / V-MoE written out term by term (biases included)."""
  arch = vit_config.decode_variant(config.model.variant)
  d, f, p, depth = arch['width'], arch['mlp_dim'], arch['patch_size'], arch['depth']
  tokens = (config.model.image_size // p) ** 2 + (config.model.pool == 'tok')
  num_experts = config.moe.num_experts
  embedding = p * p * config.model.channels * d + d
  cls = d if config.model.pool == 'tok' else 0
  posemb = tokens * d
  attention = 4 * (d * d + d)                        # query, key, value and output projections.
  layer_norms = 2 * 2 * d                            # Two LayerNorms (scale and bias) per block.
  mlp = d * f + f + f * d + d
  if num_experts == 0:
    moe = mlp
  elif config.moe.router.name == 'soft_moe':           # Phi (D, E, C) with C slots per image.
    slots = max(1, round(config.moe.router.capacity_factor * tokens / num_experts))
    moe = num_experts * mlp + d * num_experts * slots + 1
  else:                                              # Router kernel W (D, E), no bias.
    moe = num_experts * mlp + d * num_experts
  placed = vit_config.moe_layer_indices(depth, config.moe.every, config.moe.last)
  num_moe = len(placed) if num_experts else 0
  blocks = depth * (attention + layer_norms) + (depth - num_moe) * mlp + num_moe * moe
  rep = config.model.representation_size
  pre_logits = d * rep + rep if rep else 0
  head = (rep or d) * config.model.num_classes + config.model.num_classes
  return embedding + cls + posemb + blocks + 2 * d + pre_logits + head


def test_decode_variant():
  assert vit_config.decode_variant('B/32') == {'width': 768, 'depth': 12, 'mlp_dim': 3072,
                                        'num_heads': 12, 'patch_size': 32}
  assert vit_config.decode_variant('L/16')['depth'] == 24
  assert vit_config.decode_variant('S')['patch_size'] is None
  for bad in ('Q/16', 'B-16', '', 'B/x'):
    with pytest.raises(ValueError, match='unknown ViT variant.*mu, XS, Ti, S, B, L'):
      vit_config.decode_variant(bad)


def test_every2_indices():
  assert vit_config.moe_layer_indices(12, 2) == (1, 3, 5, 7, 9, 11)
  assert vit_config.moe_layer_indices(24, 2) == tuple(range(1, 24, 2))
  assert vit_config.moe_layer_indices(4, 1) == (0, 1, 2, 3)


def test_vit_b16_matches_published_count():
  # ViT-B/16, 1000 classes: embedding 16*16*3*768 + 768 = 590,592; cls 768; posemb 197*768 =
  # 151,296; per block 2*1,536 (LN) + 2,362,368 (attention) + 4,722,432 (MLP) = 7,087,872, times
  # 12 = 85,054,464; final LN 1,536; head 768*1000 + 1000 = 769,000. Sum: 86,567,656.
  config = make_config('B/16', num_experts=0, num_classes=1000, image_size=224, channels=3)
  assert count(abstract_params(config)) == 86_567_656 == formula_params(config)


@pytest.mark.parametrize('variant,router,c,rep', [
    ('B/32', 'softmax_tc', 1.0, None),     # The paper's B/32 with E=32 (see the report).
    ('mu/4', 'sinkhorn_ec', 2.0, 16),
    ('mu/4', 'soft_moe', 2.0, None),
    ('XS/4', 'sparsity_ec', 1.0, None),
])
def test_param_count_matches_formula(variant, router, c, rep):
  size = 224 if variant == 'B/32' else 8
  config = make_config(variant, router, num_experts=32 if variant == 'B/32' else 4, c=c,
                       image_size=size, channels=3, representation_size=rep)
  assert count(abstract_params(config)) == formula_params(config)


def test_b32_moe_count():
  # B/32 dense with 21,843 classes is 88,224 params (posemb 50*768 vs 197*768 and the 32-patch
  # embedding) away from B/16; each of the 6 MoE layers adds 31 expert MLPs and a 768x32 router.
  config = make_config('B/32', 'softmax_tc', num_experts=32, num_classes=21_843, image_size=224,
                       channels=3)
  mlp = 768 * 3072 + 3072 + 3072 * 768 + 768                 # 4,722,432
  dense = make_config('B/32', num_experts=0, num_classes=21_843, image_size=224, channels=3)
  assert count(abstract_params(config)) - count(abstract_params(dense)) == 6 * (31 * mlp + 768 * 32)


@pytest.mark.parametrize('variant', ['mu/32', 'XS/32', 'Ti/16', 'S/32', 'B/32', 'B/16', 'L/16'])
def test_every_variant_shapes_at_224(variant):
  config = make_config(variant, 'sinkhorn_ec', num_experts=32, num_classes=1000, image_size=224,
                       channels=3, group_size=2)
  model = build(config)
  images = jax.ShapeDtypeStruct((2, 224, 224, 3), jnp.float32)
  arch = vit_config.decode_variant(variant)

  def forward(x):
    variables = model.init(jax.random.PRNGKey(0), x)
    return model.apply(variables, x, train=False)

  logits, aux = jax.eval_shape(forward, images)
  tokens = (224 // arch['patch_size']) ** 2 + 1
  assert logits.shape == (2, 1000)
  assert aux['pre_logits'].shape == (2, arch['width'])
  assert aux['encoded'].shape == (2, tokens, arch['width'])
  assert aux['aux_loss'].shape == ()
  assert list(aux['router']) == [vit_config.block_name(i) for i in range(1, arch['depth'], 2)]
  assert all(m['expert_load'].shape == (32,) for m in aux['router'].values())


def test_every2_placement_in_parameter_tree():
  params = abstract_params(make_config('XS/4', 'softmax_ec'))
  blocks = sorted(k for k in params if k.startswith('block_'))
  assert blocks == ['block_00', 'block_01', 'block_02', 'block_03']
  for i, name in enumerate(blocks):
    assert ('moe' in params[name]) == (i % 2 == 1) and ('mlp' in params[name]) == (i % 2 == 0)
  assert params['block_01']['moe']['experts']['wi'].shape == (4, 64, 128)
  assert params['block_01']['moe']['router']['kernel'].shape == (64, 4)


# The MoE block's parameters as checkpoints store them, path -> shape, for 'mu/4' (D = 32, MLP
# 128) with E = 4 on 8 px images (5 tokens): restores and the sharding rules key on these paths.
# Soft MoE's C = round(1 x 5 / 4) = 1 slot per expert.
EXPERT_PATHS = {'experts/bi': (4, 128), 'experts/bo': (4, 32), 'experts/wi': (4, 32, 128),
                'experts/wo': (4, 128, 32)}
MOE_PATHS = {'softmax_ec': {**EXPERT_PATHS, 'router/kernel': (32, 4)},
             'soft_moe': {**EXPERT_PATHS, 'router/phi': (32, 4, 1), 'router/scale': ()}}


@pytest.mark.parametrize('router', sorted(MOE_PATHS))
def test_moe_parameter_paths_are_the_checkpoints(router):
  config = make_config('mu/4', router)
  images = jax.ShapeDtypeStruct((2,) + config.model.image_shape, jnp.float32)
  paths = {}
  for remat in (False, True):
    model = build(config).clone(remat=remat)
    params = jax.eval_shape(lambda x, m=model: m.init(jax.random.PRNGKey(0), x)['params'], images)
    paths[remat] = {jax.tree_util.keystr(path, simple=True, separator='/'): leaf.shape
                    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
  assert paths[True] == paths[False]
  moe_block = {k[len('block_01/moe/'):]: v for k, v in paths[False].items()
               if k.startswith('block_01/moe/')}
  assert moe_block == MOE_PATHS[router]


def _init(config, batch=4):
  """(jitted model.apply, variables, images): real arrays at tiny shapes."""
  model = build(config)
  images = jax.random.normal(jax.random.PRNGKey(1), (batch,) + config.model.image_shape)
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), images)
  return jax.jit(model.apply, static_argnames='train'), variables, images


def test_eval_is_deterministic_noise_uses_gating_rng_and_aux_loss_sums_blocks():
  config = make_config('XS/4', 'softmax_tc', noise_std=1.0, loss_weight=0.005)
  apply, variables, images = _init(config)
  rngs = lambda seed: {'gating': jax.random.PRNGKey(seed), 'dropout': jax.random.PRNGKey(seed)}
  run = lambda seed, train: apply(variables, images, train=train, rngs=rngs(seed))[1]
  # Compare the representation: the head starts with a zero kernel, so logits are all -10.
  np.testing.assert_array_equal(run(1, False)['pre_logits'], run(2, False)['pre_logits'])
  aux = run(1, True)
  assert not np.allclose(aux['pre_logits'], run(2, True)['pre_logits'])
  assert not np.allclose(aux['pre_logits'], run(1, False)['pre_logits'])

  assert set(aux['router']) == {'block_01', 'block_03'}                # Every-2 of 4 blocks.
  per_block = [metrics['aux_loss'] for metrics in aux['router'].values()]
  assert float(aux['aux_loss']) > 0
  np.testing.assert_allclose(aux['aux_loss'], sum(per_block), rtol=1e-6)
  for metrics in aux['router'].values():
    assert set(metrics) >= {'dropped_tokens', 'experts_per_token_mean', 'experts_per_token_min',
                            'experts_per_token_max', 'expert_load', 'aux_loss'}
    assert metrics['expert_load'].shape == (4,)


def test_dense_gap_model_head_and_representation():
  config = make_config('mu/4', num_experts=0, pool='gap', representation_size=12)
  apply, variables, images = _init(config, batch=3)                # Any batch without groups.
  logits, aux = apply(variables, images, train=False)
  np.testing.assert_array_equal(logits, np.full((3, 10), -10.0))   # Zero kernel, bias -10.
  assert aux['router'] == {} and float(aux['aux_loss']) == 0.0
  assert aux['encoded'].shape == (3, 4, 32)                  # (8/4)^2 patches, no class token.
  assert 'cls' not in variables['params']
  dense = variables['params']['pre_logits']                  # pre_logits = tanh(W mean(x) + b).
  expected = np.tanh(aux['encoded'].mean(axis=1) @ dense['kernel'] + dense['bias'])
  np.testing.assert_allclose(aux['pre_logits'], expected, rtol=1e-5, atol=1e-6)
  assert aux['pre_logits'].shape == (3, 12)


def test_bad_model_sections_fail_naming_the_key():
  with pytest.raises(ValueError, match='patch size 3 does not divide model.image_size=8'):
    make_config('mu/3', num_experts=0)
  with pytest.raises(ValueError, match='names no patch size'):
    make_config('mu', num_experts=0)
  model = vit_config.ModelConfig('mu', 10, 8, 1, head_bias_init=0.0, patch_size=4)   # The override.
  assert vit.build_model(model, make_config(num_experts=0).moe).patch_size == 4
  with pytest.raises(ValueError, match="unknown model.pool 'max'"):
    make_config(pool='max')


# V-MoE's ImageNet-1k cell ('ViT-S/32, E=8, K=2, Last 2'): its S, Last-2 placement, expert dropout,
# pre-logits of width 512 and head bias -ln(1000). Each key's default is today's model.


def vmoe_s32_config(**moe_changes):
  """V-MoE's S/32 at 224 px, 1000 classes, E = 8 softmax_tc at k = 2, c = 1.05 (its router)."""
  router = router_config.RouterConfig('softmax_tc', 1.05, num_selected_experts=2,
                                   capacity_rounding='ceil_multiple_of_4')
  return types.SimpleNamespace(
      model=vit_config.ModelConfig('VMoE-S/32', 1000, 224, 3, head_bias_init=-np.log(1000),
                            representation_size=512),
      moe=moe_config.MoeConfig(8, 8, router, **{'last': 2, **moe_changes}))


def test_vmoe_s_is_a_size_of_its_own_and_vit_s_is_unchanged():
  # V-MoE common.get_vmoe_config, variant 'S' (index 0): hidden 512, 8 layers, MLP 2048, 8 heads.
  assert vit_config.decode_variant('VMoE-S/32') == {'width': 512, 'depth': 8, 'mlp_dim': 2048,
                                             'num_heads': 8, 'patch_size': 32}
  assert vit_config.decode_variant('S/32') == {'width': 384, 'depth': 12, 'mlp_dim': 1536,
                                        'num_heads': 6, 'patch_size': 32}


def test_last_n_places_the_last_of_the_every_k_blocks():
  # V-MoE: range(1, num_layers, 2)[-where_num:] -> (1, 3, 5, 7)[-2:] = (5, 7) for 'Last 2' of 8.
  assert vit_config.moe_layer_indices(8, 2, last=2) == (5, 7)
  assert vit_config.moe_layer_indices(12, 2, last=3) == (7, 9, 11)
  # last = 0 (the default) is Every-k, as before the key existed.
  for depth, every in ((8, 2), (12, 2), (4, 1)):
    assert vit_config.moe_layer_indices(depth, every, 0) == tuple(range(every - 1, depth, every))
  assert moe_config.MoeConfig(4, 2, make_config().moe.router).last == 0


def test_vmoe_s32_parameters_are_counted_term_by_term():
  # Width 512, MLP 2048, 50 tokens: embedding 32*32*3*512 + 512 = 1,573,376; cls 512; posemb
  # 50*512 = 25,600; per block attention 4*(512*512 + 512) = 1,050,624 and LNs 2,048 (x 8 =
  # 8,421,376); dense MLP 2,099,712 in 6 blocks = 12,598,272; MoE 8*2,099,712 + 512*8 = 16,801,792
  # in blocks 5 and 7 = 33,603,584; final LN 1,024; pre-logits 512*512 + 512 = 262,656; head
  # 512*1000 + 1000 = 513,000. Sum: 56,999,400.
  config = vmoe_s32_config()
  params = abstract_params(config, batch=8)
  assert count(params) == 56_999_400 == formula_params(config)
  assert [k for k, v in params.items() if isinstance(v, dict) and 'moe' in v] == ['block_05',
                                                                                'block_07']
  assert params['pre_logits']['kernel'].shape == (512, 512)


def test_head_bias_minus_log_1000_starts_every_sigmoid_at_one_in_1001():
  # The head kernel starts at zero, so every logit is the bias -ln(1000): sigmoid = 1 / (1 + 1000),
  # V-MoE's prior of one positive class in 1000; the pre-logits are tanh of a Dense of width 512.
  config = types.SimpleNamespace(model=vit_config.ModelConfig('mu/4', 1000, 8, 1, -np.log(1000),
                                                       representation_size=512),
                                 moe=make_config().moe)
  apply, variables, images = _init(config)
  logits, aux = apply(variables, images, train=False)
  np.testing.assert_allclose(jax.nn.sigmoid(logits), 1 / 1001, rtol=1e-6)
  assert aux['pre_logits'].shape == (4, 512) and float(jnp.max(jnp.abs(aux['pre_logits']))) < 1


def test_moe_dropout_defaults_to_the_models_and_drops_only_in_the_experts():
  base = make_config('XS/4', 'softmax_ec')
  with_moe = lambda rate, model_rate=0.0: types.SimpleNamespace(
      model=dataclasses.replace(base.model, dropout_rate=model_rate),
      moe=dataclasses.replace(base.moe, dropout_rate=rate))
  apply, variables, images = _init(base)
  rngs = {'dropout': jax.random.PRNGKey(3)}
  run = lambda config, train=True: build(config).apply(variables, images, train=train,
                                                        rngs=rngs)[1]['pre_logits']
  # None (the default) is the model's rate, the experts' only rate before the key existed.
  assert base.moe.dropout_rate is None and base.moe.expert_dropout(0.1) == 0.1
  np.testing.assert_array_equal(run(with_moe(None, 0.1)), run(with_moe(0.1, 0.1)))
  np.testing.assert_array_equal(run(with_moe(None)), run(with_moe(0.0)))
  # 0.2 in the experts changes training, never evaluation.
  assert not np.allclose(run(with_moe(0.2)), run(with_moe(0.0)))
  np.testing.assert_array_equal(run(with_moe(0.2), train=False), run(with_moe(0.0), train=False))
