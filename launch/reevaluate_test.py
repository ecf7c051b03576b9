"""Re-evaluating a saved run: the recorded evaluation, and one with room for every token."""
import json
import re

import flax
import numpy as np
import pytest

from base import errors
from launch import reevaluate
from launch.routing_maps_test import saved_run


def test_room_for_every_token_drops_none(tmp_path, tiny_experiment, capsys):
  # base evaluates greedy top-1 into buffers of c T / E slots; c_eval = E gives every expert room
  # for all T tokens (fairseq's greedy assignment without buffers).
  experiment = tiny_experiment('router=base,c=1,runlocal=True')
  saved_run(tmp_path, experiment, [1])
  num_experts = experiment.moe.num_experts
  assert reevaluate.main([str(tmp_path), '--set',
                          f'moe.router.eval_capacity_factor={num_experts}']) == 0
  line = json.loads(capsys.readouterr().out)
  assert line['step'] == 1 and line['with']['settings'] == {
      'moe.router.eval_capacity_factor': num_experts}
  dropped = [k for k in line['recorded'] if k.endswith('dropped_tokens')]
  assert dropped and 0 <= line['recorded']['upstream/prec@1'] <= 1
  assert all(line['with'][k] == 0 for k in dropped)


def test_settings_are_python_literals_or_text():
  assert reevaluate.parse_setting('moe.router.eval_capacity_factor=8') == (
      'moe.router.eval_capacity_factor', 8)
  assert reevaluate.parse_setting('a.b=None') == ('a.b', None)
  assert reevaluate.parse_setting('a.b=fast') == ('a.b', 'fast')
  with pytest.raises(errors.UserError, match='expected KEY=VALUE'):
    reevaluate.parse_setting('no_equals_sign')


def test_a_workdir_without_a_run_is_one_message_and_exit_2(tmp_path, capsys):
  assert errors.run_tool(lambda: reevaluate.main([str(tmp_path)])) == 2
  assert capsys.readouterr().err.startswith(f'Error: {tmp_path} holds no run')


def vmoe_layout(params: dict) -> dict:
  """This project's flattened parameters under V-MoE's names (vit_moe.py's module tree), the
  inverse of what vmoe/model/vmoe_params.py maps, written out here rule by rule."""
  def rename(path):
    path = re.sub(r'^pos_embedding$', 'Encoder/posembed_input/pos_embedding', path)
    path = re.sub(r'^encoder_norm/', 'Encoder/encoder_norm/', path)
    block = re.match(r'^block_(\d+)/(.*)$', path)
    if not block:
      return path
    rest = block[2]
    for project, vmoe in (('norm1/', 'LayerNorm_0/'), ('norm2/', 'LayerNorm_1/'),
                          ('attention/', 'SelfAttention/'), ('mlp/fc1/', 'Mlp/Dense_0/'),
                          ('mlp/fc2/', 'Mlp/Dense_1/'),
                          ('moe/router/kernel', 'Moe/Router/dense/kernel'),
                          ('moe/experts/wi', 'Moe/Mlp/Dense_0/kernel'),
                          ('moe/experts/bi', 'Moe/Mlp/Dense_0/bias'),
                          ('moe/experts/wo', 'Moe/Mlp/Dense_1/kernel'),
                          ('moe/experts/bo', 'Moe/Mlp/Dense_1/bias')):
      rest = rest.replace(project, vmoe) if rest.startswith(project) else rest
    return f'Encoder/encoderblock_{int(block[1])}/{rest}'
  flat = flax.traverse_util.flatten_dict(params, sep='/')
  return {rename(path): np.asarray(value) for path, value in flat.items()}


def test_vmoe_params_evaluate_as_the_checkpoint_holding_them(tmp_path, tiny_experiment):
  # The run's step-1 parameters, saved under V-MoE's names, evaluate exactly as its checkpoint.
  experiment = tiny_experiment('router=softmax_tc,c=1,runlocal=True')
  _, params = saved_run(tmp_path / 'run', experiment, [1])
  np.savez(tmp_path / 'vmoe.npz', **vmoe_layout(params[1]))
  step, from_checkpoint = reevaluate.upstream(str(tmp_path / 'run'))
  converted = reevaluate.read_vmoe_params(str(tmp_path / 'vmoe.npz'))
  no_step, from_converted = reevaluate.upstream(str(tmp_path / 'run'), params=converted,
                                                fewshot=True)
  assert step == 1 and no_step is None
  fewshot_keys = set(from_converted) - set(from_checkpoint)
  assert fewshot_keys and all(k.startswith('fewshot') for k in fewshot_keys)
  assert {k: from_converted[k] for k in from_checkpoint} == from_checkpoint


def test_vmoe_params_of_another_model_are_one_message(tmp_path, tiny_experiment, capsys):
  experiment = tiny_experiment('router=softmax_tc,c=1,runlocal=True')
  _, params = saved_run(tmp_path / 'run', experiment, [1])
  flat = vmoe_layout(params[1])
  flat['head/kernel'] = flat['head/kernel'][:, :3]
  np.savez(tmp_path / 'vmoe.npz', **flat)
  assert errors.run_tool(lambda: reevaluate.main(
      [str(tmp_path / 'run'), '--vmoe-params', str(tmp_path / 'vmoe.npz')])) == 2
  assert 'do not fit the recorded config\'s model in 1 entries: head/kernel' in (
      capsys.readouterr().err)
