"""Golden: ten steps of V-MoE's optimizer as its ImageNet-21k config builds it.

vmoe/train/optimizer.py `create_optimizer` with pretrain_imagenet21k.py's `get_optimizer_params`
(Adam with b1 0.9, b2 0.999 and float32 moments, weight decay 0.1 on the parameters matching
'.*/kernel' added after Adam and scaled by the learning rate, global-norm clipping at 1.0), on a
small parameter tree named as V-MoE's model names its parameters. The schedule keeps the
config's form and end value but is shortened (3 warm-up steps of 20, peak 1e-2), so that ten
steps move every parameter by far more than its float32 spacing. The gradients are fixed: some
steps above the clipping norm and some below, and one leaf whose gradients are ~1e-7, where
Adam's epsilon (1e-8) is a tenth of the denominator.
"""
import numpy as np

REFERENCE = ('vmoe/train/optimizer.py create_optimizer (adam) with '
             'vmoe/configs/vmoe_paper/pretrain_imagenet21k.py get_optimizer_params')

DESCRIPTION = 'ViT-B/32, E=8, K=2, Every 2, 300 Epochs'
STEPS = 10
TOTAL_STEPS, WARMUP_STEPS, PEAK = 20, 3, 1e-2
# name (V-MoE's '/'-joined parameter path) -> shape.
SHAPES = {
    'Encoder/encoderblock_0/Mlp/Dense_0/kernel': (4, 6),
    'Encoder/encoderblock_0/Mlp/Dense_0/bias': (6,),
    'Encoder/encoderblock_0/LayerNorm_0/scale': (4,),
    'Encoder/encoderblock_1/Moe/Mlp/Dense_0/kernel': (2, 4, 6),
    'Encoder/encoderblock_1/Moe/Router/dense/kernel': (4, 2),
    'Encoder/posembed_input/pos_embedding': (1, 3, 4),
    'head/kernel': (4, 5),
    'head/bias': (5,),
}
# The leaf whose gradients are tiny (Adam's epsilon matters there).
TINY = 'Encoder/posembed_input/pos_embedding'


def nest(flat: dict) -> dict:
  """{'a/b': x} -> {'a': {'b': x}}, keys in sorted order: the reference's weight decay pairs the
  flattened updates (which JAX's tree functions return sorted) with the flattened parameters by
  position, so the parameters must be sorted too, as JAX's own trees are."""
  tree = {}
  for name, value in sorted(flat.items()):
    *parents, leaf = name.split('/')
    node = tree
    for parent in parents:
      node = node.setdefault(parent, {})
    node[leaf] = value
  return tree


def inputs() -> tuple[dict, list[dict]]:
  """The initial parameters and the STEPS gradients, flat by name, float32."""
  rng = np.random.default_rng(55)
  params = {n: rng.normal(size=s).astype(np.float32) for n, s in SHAPES.items()}
  # Global norms: steps 0-4 about 3 (clipped to 1), steps 5-9 about 0.3 (not clipped).
  grads = []
  for step in range(STEPS):
    scale = 0.6 if step < 5 else 0.06
    grads.append({n: (rng.normal(size=s) * (1e-7 if n == TINY else scale)).astype(np.float32)
                  for n, s in SHAPES.items()})
  return params, grads


def generate(context) -> dict:
  import optax  # pylint: disable=import-outside-toplevel
  optimizer = context.module('vmoe.train.optimizer', 'vmoe')
  i21k = context.module('vmoe.configs.vmoe_paper.pretrain_imagenet21k', 'vmoe')
  config = i21k.get_optimizer_params(DESCRIPTION).to_dict()
  schedule = dict(config.pop('learning_rate'), peak_value=PEAK, warmup_steps=WARMUP_STEPS)
  context.patch(f'pretrain_imagenet21k.py learning_rate: peak_value {PEAK} and warmup_steps '
                f'{WARMUP_STEPS} over total_steps {TOTAL_STEPS} (ten steps of the paper '
                'schedule would move no parameter by more than its float32 spacing)')
  tx = optimizer.create_optimizer(**config, learning_rate=schedule, total_steps=TOTAL_STEPS)
  params, grads = inputs()
  tree = nest(params)
  state = tx.init(tree)
  arrays = {f'params/{n}': v for n, v in params.items()}
  for step, grad in enumerate(grads):
    updates, state = tx.update(nest(grad), state, tree)
    tree = optax.apply_updates(tree, updates)
    for n in SHAPES:
      node = tree
      for part in n.split('/'):
        node = node[part]
      arrays[f'grads{step}/{n}'] = grad[n]
      arrays[f'after{step}/{n}'] = np.asarray(node, np.float32)
  arrays.update(b1=np.float64(config['b1']), b2=np.float64(config['b2']),
                weight_decay=np.float64(config['weight_decay'][0][1]),
                clip_norm=np.float64(config['gradient_clip']['global_norm']),
                peak=np.float64(PEAK), end_value=np.float64(schedule['end_value']),
                warmup_steps=np.int64(WARMUP_STEPS), total_steps=np.int64(TOTAL_STEPS))
  return arrays
