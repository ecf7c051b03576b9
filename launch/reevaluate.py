"""A finished run's upstream evaluation again, from its newest checkpoint, under evaluation-only
settings: what a setting that acts in evaluation alone (a router's evaluation capacity, say) does
to a trained model, without training it again.

  python -m launch.reevaluate WORKDIR... --set moe.router.eval_capacity_factor=8
  python -m launch.reevaluate WORKDIR --vmoe-params VMOE_PARAMS.npz [--fewshot]

For each workdir, one JSON line: the checkpoint's step and, for the recorded config and for it
with the --set values, upstream precision@1 and each router's metrics on the run's evaluation set
(with --fewshot, the few-shot accuracies too).
Only the recorded config's evaluation changes: the trained state is the run's, read as
launch/routing_maps.py reads it (nothing in the workdir is written or moved).
--vmoe-params evaluates a V-MoE checkpoint instead (docs/checkpoints.md): V-MoE's parameter tree,
flattened with '/'-joined keys into an .npz, converted by vmoe/model/vmoe_params.py; the workdir
then only lends its recorded config, which must describe the same model, and its step is null.
"""
import argparse
import ast
import json
import os
import sys
from typing import Sequence

from base import errors
import flax
import jax
import numpy as np

from launch import routing_maps
from vmoe.model import vmoe_params
from vmoe.run import checkpointing
from vmoe.run import run_outputs
from vmoe.train import train_evals
from vmoe.train import train_program
from vmoe.train import train_step


def read_vmoe_params(path: str) -> dict:
  """This project's parameter tree from an .npz of V-MoE's flattened ('/'-joined) parameters."""
  if not os.path.exists(path):
    raise errors.MissingInput(f'--vmoe-params {path} does not exist: save V-MoE\'s restored '
                              'parameters there first (docs/checkpoints.md).')
  with np.load(path, allow_pickle=False) as f:
    flat = {name: f[name] for name in f.files}
  try:
    return vmoe_params.convert(flax.traverse_util.unflatten_dict(flat, sep='/'))
  except ValueError as e:
    raise errors.UserError(f'--vmoe-params {path}: {e}') from e


def converted_state(program, params: dict):
  """A fresh state of `program` holding `params`, after checking they fit its model."""
  state = program.init_state(jax.random.PRNGKey(0))
  shapes = lambda tree: {k: np.shape(v) for k, v in
                         flax.traverse_util.flatten_dict(tree, sep='/').items()}
  want, got = shapes(state.params), shapes(params)
  differ = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
  if differ:
    shown = ', '.join(f'{k} (model {want.get(k)}, given {got.get(k)})' for k in differ[:4])
    raise errors.UserError(f'the converted V-MoE parameters do not fit the recorded config\'s '
                           f'model in {len(differ)} entries: {shown}; record a config of the '
                           'same variant, image size, classes, experts and MoE blocks.')
  return state.replace(params=params)


def upstream(workdir: str, overrides: dict | None = None, params: dict | None = None,
             fewshot: bool = False) -> tuple[int | None, dict]:
  """(step, {metric: value}) of the upstream evaluation (and the few-shot one, if `fewshot`) of
  WORKDIR's newest checkpoint, under the recorded config with `overrides` ({'dotted.key':
  value}) set; of `params` (this project's tree) instead where given, with step None."""
  if not os.path.exists(os.path.join(workdir, run_outputs.CONFIG_FILE)):
    raise errors.MissingInput(f'{workdir} holds no run ({run_outputs.CONFIG_FILE} is missing): '
                              'pass the --workdir of a run that main.py trained.')
  e = routing_maps.recorded_experiment(workdir, overrides)
  program = train_program.build(e)
  if params is None:
    step, state = checkpointing.read_run_state(workdir, program)
  else:
    step, state = None, converted_state(program, params)
  evaluator = train_evals.Evaluator(
      program.model, program.mesh, data=e.data, eval_config=e.eval, fewshot_config=e.fewshot,
      pp_splits=e.pp_splits, loss=e.loss, num_steps=e.num_train_steps, safe_point=lambda: None)
  variables = train_step.model_variables(state)
  metrics = dict(evaluator.upstream(variables))
  if fewshot:
    metrics.update(evaluator.fewshot(variables))
  return None if step is None else int(step), {name: float(v) for name, v in metrics.items()}


def parse_setting(text: str) -> tuple[str, object]:
  """'dotted.key=VALUE' -> (key, value), VALUE read as a Python literal (8, 4.0, None, 'x')."""
  key, sep, value = text.partition('=')
  if not sep or not key:
    raise errors.UserError(f'--set {text!r}: expected KEY=VALUE, e.g. '
                           'moe.router.eval_capacity_factor=8.')
  try:
    return key, ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('workdirs', nargs='+')
  parser.add_argument('--set', action='append', default=[], dest='settings',
                      help='dotted.key=VALUE, set on the recorded config (repeatable)')
  parser.add_argument('--vmoe-params', help='an .npz of V-MoE\'s flattened parameters to '
                      'evaluate in place of the checkpoint (docs/checkpoints.md)')
  parser.add_argument('--fewshot', action='store_true', help='run the few-shot evaluation too')
  args = parser.parse_args(argv)
  overrides = dict(parse_setting(text) for text in args.settings)
  params = None if args.vmoe_params is None else read_vmoe_params(args.vmoe_params)
  for workdir in args.workdirs:
    step, recorded = upstream(workdir, params=params, fewshot=args.fewshot)
    _, changed = upstream(workdir, overrides, params=params, fewshot=args.fewshot)
    print(json.dumps({'workdir': workdir, 'step': step, 'recorded': recorded,
                      'with': {'settings': overrides, **changed}}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
