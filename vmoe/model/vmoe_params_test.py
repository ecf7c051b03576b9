"""vmoe_params: V-MoE's names to this project's, and its group size in images."""
import numpy as np
import pytest

from vmoe.model import vmoe_params


@pytest.mark.parametrize('vmoe_path, project_path', [
    ('Encoder/posembed_input/pos_embedding', 'pos_embedding'),
    ('Encoder/encoderblock_0/LayerNorm_0/scale', 'block_00/norm1/scale'),
    ('Encoder/encoderblock_11/LayerNorm_1/bias', 'block_11/norm2/bias'),
    ('Encoder/encoderblock_2/SelfAttention/out/kernel', 'block_02/attention/out/kernel'),
    ('Encoder/encoderblock_2/Mlp/Dense_1/bias', 'block_02/mlp/fc2/bias'),
    ('Encoder/encoderblock_3/Moe/Router/dense/kernel', 'block_03/moe/router/kernel'),
    ('Encoder/encoderblock_3/Moe/Router/mu', 'block_03/moe/router/phi'),
    ('Encoder/encoderblock_3/Moe/Mlp/Dense_0/kernel', 'block_03/moe/experts/wi'),
    ('Encoder/encoderblock_3/Moe/Mlp/Dense_1/bias', 'block_03/moe/experts/bo'),
    ('Encoder/encoder_norm/scale', 'encoder_norm/scale'),
    ('head/kernel', 'head/kernel'),
])
def test_paths(vmoe_path, project_path):
  assert vmoe_params.project_path(vmoe_path) == project_path


def test_a_parameter_without_a_counterpart_is_named():
  with pytest.raises(ValueError, match="'MapHead/probe' has no counterpart"):
    vmoe_params.project_path('MapHead/probe')


def test_convert_takes_the_tree_or_a_dict_holding_it_under_params():
  tree = {'cls': np.zeros((1, 1, 2)), 'Encoder': {'encoder_norm': {'scale': np.ones(2)}}}
  want = {'cls': np.zeros((1, 1, 2), np.float32),
          'encoder_norm': {'scale': np.ones(2, np.float32)}}
  for given in (tree, {'params': tree}):
    got = vmoe_params.convert(given)
    assert got.keys() == want.keys() and got['encoder_norm'].keys() == {'scale'}
    assert got['cls'].dtype == np.float32


def test_group_size_counts_images():
  # V-MoE's ImageNet-21k B/32 config: 8 images of 7 * 7 + 1 = 50 tokens per group.
  assert vmoe_params.group_size_in_images(400, 50) == 8
  with pytest.raises(ValueError, match='not a whole number of images of 50 tokens'):
    vmoe_params.group_size_in_images(256, 50)
