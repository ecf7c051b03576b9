"""V-MoE's parameter tree -> this project's (vmoe/model/vit.py), and the one setting whose unit
differs.

V-MoE's `VisionTransformerMoe` (google-research/vmoe vmoe/nn/vit_moe.py) and this project's
`VisionTransformer` compute the same model (a golden from V-MoE's own code pins it:
vmoe/model/vmoe_params_golden_test.py); their parameters differ only in names, and one setting in
unit: V-MoE's `encoder.moe.group_size` counts the tokens of a routing group, this project's
`moe.group_size` counts images (`group_size_in_images`).

A published V-MoE checkpoint restores as a nested dict of its parameters
(`vmoe.checkpoints.partitioned.restore_checkpoint(prefix, tree=None)`); `convert` maps it, and
docs/checkpoints.md says how to evaluate it here.
"""
import re
from typing import Mapping

import flax
import numpy as np

# V-MoE's parameter path (flattened, '/'-joined) -> this project's; {block} is the encoder block,
# written as vit.block_name writes it. The experts' kernels and biases keep V-MoE's layout,
# (E, ...) stacked over experts.
_BLOCK = r'Encoder/encoderblock_(?P<block>\d+)/'
RENAMES = (
    (r'embedding/(?P<leaf>kernel|bias)', 'embedding/{leaf}'),
    (r'cls', 'cls'),
    (r'Encoder/posembed_input/pos_embedding', 'pos_embedding'),
    (_BLOCK + r'LayerNorm_0/(?P<leaf>scale|bias)', '{block}/norm1/{leaf}'),
    (_BLOCK + r'SelfAttention/(?P<part>query|key|value|out)/(?P<leaf>kernel|bias)',
     '{block}/attention/{part}/{leaf}'),
    (_BLOCK + r'LayerNorm_1/(?P<leaf>scale|bias)', '{block}/norm2/{leaf}'),
    (_BLOCK + r'Mlp/Dense_0/(?P<leaf>kernel|bias)', '{block}/mlp/fc1/{leaf}'),
    (_BLOCK + r'Mlp/Dense_1/(?P<leaf>kernel|bias)', '{block}/mlp/fc2/{leaf}'),
    (_BLOCK + r'Moe/Router/dense/kernel', '{block}/moe/router/kernel'),
    (_BLOCK + r'Moe/Router/mu', '{block}/moe/router/phi'),           # Soft MoE's slots.
    (_BLOCK + r'Moe/Router/scale', '{block}/moe/router/scale'),
    (_BLOCK + r'Moe/Mlp/Dense_0/kernel', '{block}/moe/experts/wi'),
    (_BLOCK + r'Moe/Mlp/Dense_0/bias', '{block}/moe/experts/bi'),
    (_BLOCK + r'Moe/Mlp/Dense_1/kernel', '{block}/moe/experts/wo'),
    (_BLOCK + r'Moe/Mlp/Dense_1/bias', '{block}/moe/experts/bo'),
    (r'Encoder/encoder_norm/(?P<leaf>scale|bias)', 'encoder_norm/{leaf}'),
    (r'pre_logits/(?P<leaf>kernel|bias)', 'pre_logits/{leaf}'),
    (r'head/(?P<leaf>kernel|bias)', 'head/{leaf}'),
)


def project_path(vmoe_path: str) -> str:
  """One V-MoE parameter path ('Encoder/encoderblock_1/Moe/Mlp/Dense_0/kernel') -> this
  project's ('block_01/moe/experts/wi'); a ValueError for a parameter this model has no place for
  (a MAP head, say)."""
  for pattern, template in RENAMES:
    match = re.fullmatch(pattern, vmoe_path)
    if match:
      fields = match.groupdict()
      if 'block' in fields:
        fields['block'] = f'block_{int(fields["block"]):02d}'
      return template.format(**fields)
  raise ValueError(f'V-MoE parameter {vmoe_path!r} has no counterpart in this project\'s '
                   'VisionTransformer (vmoe/model/vmoe_params.py RENAMES lists what converts).')


def convert(vmoe_params: Mapping) -> dict:
  """V-MoE's nested parameter dict (as restore_checkpoint(prefix, tree=None) returns it; a dict
  holding it under 'params' is taken too) -> this project's nested parameter dict, float32
  NumPy leaves."""
  if 'params' in vmoe_params and 'Encoder' not in vmoe_params:
    vmoe_params = vmoe_params['params']
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(vmoe_params), sep='/')
  converted = {project_path(path): np.asarray(value, np.float32) for path, value in flat.items()}
  return flax.traverse_util.unflatten_dict(converted, sep='/')


def group_size_in_images(vmoe_group_size: int, tokens_per_image: int) -> int:
  """V-MoE's `encoder.moe.group_size` (tokens per routing group) -> this project's
  `moe.group_size` (images per routing group): V-MoE reshapes the (B, N, D) tokens into groups of
  that many consecutive tokens, which are whole images only when N divides it."""
  images, rest = divmod(vmoe_group_size, tokens_per_image)
  if rest or images < 1:
    raise ValueError(f'V-MoE\'s group_size={vmoe_group_size} tokens is not a whole number of '
                     f'images of {tokens_per_image} tokens; this project routes groups of whole '
                     'images (moe.group_size counts images).')
  return images
