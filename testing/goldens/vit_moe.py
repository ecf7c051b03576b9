"""Golden: V-MoE's VisionTransformerMoe at a small size, random weights, deterministic.

4 blocks of width 32 (MoE in blocks 1 and 3: V-MoE's Every-2), E = 4 experts, 32 px images in
8 px patches (17 tokens with the class token), 5 classes; the paper configs' router and
dispatcher (NoisyTopExpertsPerItemRouter, k = 2, capacity factor 1.05 on k T / E, ceil to a
multiple of 4, batch_priority False, einsum dispatcher) with float32 buffers, and routing groups
of 34 tokens (2 images). Run deterministic: no noise, no dropout. The parameters are the
initialiser's tree with every leaf moved by seeded noise, so that no leaf is zero or one (the
class token, the LayerNorms and the biases start there) and a converter that swaps two of them
shows. Stored: the images, the parameter tree (flattened, '/'-joined keys, under 'params/'), the
logits, and for each MoE block the router's logits and the dispatch weights (G, S, E, C).
"""
import flax
import jax
import numpy as np

REFERENCE = 'vmoe/nn/vit_moe.py VisionTransformerMoe (deterministic)'
IMAGES, IMAGE_SIZE, PATCH, CLASSES = 4, 32, 8, 5
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2 + 1
MOE_LAYERS = (1, 3)
CONFIG = {
    'num_classes': CLASSES, 'patch_size': (PATCH, PATCH), 'hidden_size': 32,
    'classifier': 'token', 'head_bias_init': 0.0, 'deterministic': True,
    'encoder': {
        'num_layers': 4, 'mlp_dim': 64, 'num_heads': 2, 'dropout_rate': 0.0,
        'attention_dropout_rate': 0.0,
        'moe': {
            'layers': MOE_LAYERS, 'num_experts': 4, 'group_size': 2 * TOKENS_PER_IMAGE,
            'router': {
                'num_selected_experts': 2, 'noise_std': 1.0, 'importance_loss_weight': 0.005,
                'load_loss_weight': 0.005,
                'dispatcher': {'name': 'einsum', 'bfloat16': False, 'capacity_factor': 1.05,
                               'batch_priority': False},
            },
        },
    },
}
NOISE_STD = 0.05   # The leaves' move; Xavier kernels of width 32 are about 0.2.


def generate(context) -> dict[str, np.ndarray]:
  vit_moe = context.module('vmoe.nn.vit_moe', 'vmoe')
  context.module('vit_jax.models_vit', 'vision_transformer')
  model = vit_moe.VisionTransformerMoe(**CONFIG)
  rng = np.random.default_rng(61)
  images = rng.uniform(-1, 1, size=(IMAGES, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
  initial = model.init(jax.random.PRNGKey(0), images)['params']
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(initial), sep='/')
  params = {key: (np.asarray(value) + NOISE_STD * rng.normal(size=value.shape)).astype(np.float32)
            for key, value in sorted(flat.items())}
  tree = flax.traverse_util.unflatten_dict(params, sep='/')
  (logits, _), state = model.apply({'params': tree}, images, capture_intermediates=True,
                                    mutable=['intermediates'])
  out = {'images': images, 'logits': np.asarray(logits),
         **{f'params/{key}': value for key, value in params.items()}}
  captured = state['intermediates']['Encoder']
  for block in MOE_LAYERS:
    router = captured[f'encoderblock_{block}']['Moe']['Router']
    out[f'router_logits/{block}'] = np.asarray(router['dense']['__call__'][0])
    dispatcher, _ = router['__call__'][0]
    out[f'dispatch/{block}'] = np.asarray(dispatcher.dispatch_weights)
  return out
