"""Tests of the lines a run prints: header, evaluation, final summary."""
import jax

from vmoe.model import mesh_config
from vmoe.model import sharding
from vmoe.run import console
from vmoe.run import run_outputs


def test_header_names_the_run_its_size_and_whether_it_resumed(tiny_experiment):
  e = tiny_experiment('router=soft_moe,c=2')
  mesh = sharding.make_mesh(mesh_config.MeshConfig(), jax.devices()[:1])
  fresh, resumed = (console.header(e, config_file='configs/tiny.py', mesh=mesh, num_params=372106,
                                   flops_per_step=9.82e8, workdir='/w', first_step=step)
                    for step in (0, 500))
  assert fresh[0] == ('configs/tiny.py:router=soft_moe,c=2,runlocal=False | XS/7 | router '
                      'soft_moe c=2 | 1 cpu device(s), mesh data=1 x expert=1')
  assert fresh[1] == ('372,106 parameters | 9.82e+08 FLOPs per step | fresh start | workdir /w '
                      '(library logs: log.txt)')
  assert 'resumed from step 500' in resumed[1]


def test_evaluation_line_groups_few_shot_by_shots():
  results = {'upstream/prec@1': 0.5152, 'upstream/loss': 1.39853, 'router/x': 1.0,
             'fewshot/digits/10shot': 0.518, 'fewshot/digits/10shot_cv': 0.5,
             'fewshot/fashion_mnist/10shot': 0.561, 'fewshot/digits/5shot': 0.4}
  assert console.evaluation(40, results) == (
      'eval at step 40 | loss 1.3985 | prec@1 0.5152 | 5-shot: digits 0.4000 | '
      '10-shot: digits 0.5180, fashion_mnist 0.5610')
  assert console.evaluation(20, {'upstream/prec@1': 0.25, 'upstream/loss': 2.0}) == (
      'eval at step 20 | loss 2.0000 | prec@1 0.2500')


def test_final_line_says_accuracy_cost_and_where_the_summary_is(capsys):
  summary = run_outputs.RunSummary(
      arch='XS/7', dataset='fashion_mnist', router='softmax_ec', capacity=1.0, steps=40,
      upstream_prec1=0.5, fewshot={'digits': {'10': 0.25}}, train_device_seconds=36.0,
      num_devices=2, device_kind='cpu')
  line = console.say(console.final(summary, '/w/summary.json'))
  assert line == ('done: 40 steps | prec@1 0.5000 | 10-shot: digits 0.2500 | 0.01 device-hours '
                  '(2 x cpu) | summary: /w/summary.json')
  assert capsys.readouterr().out == line + '\n'
