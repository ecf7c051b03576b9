"""Re-evaluating a saved run: the recorded evaluation, and one with room for every token."""
import json

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
