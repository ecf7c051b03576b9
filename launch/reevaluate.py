"""A finished run's upstream evaluation again, from its newest checkpoint, under evaluation-only
settings: what a setting that acts in evaluation alone (a router's evaluation capacity, say) does
to a trained model, without training it again.

  python -m launch.reevaluate WORKDIR... --set moe.router.eval_capacity_factor=8

For each workdir, one JSON line: the checkpoint's step and, for the recorded config and for it
with the --set values, upstream precision@1 and each router's metrics on the run's evaluation set.
Only the recorded config's evaluation changes: the trained state is the run's, read as
launch/routing_maps.py reads it (nothing in the workdir is written or moved).
"""
import argparse
import ast
import json
import os
import sys
from typing import Sequence

from base import errors
from launch import routing_maps
from vmoe.run import checkpointing
from vmoe.run import run_outputs
from vmoe.train import train_evals
from vmoe.train import train_program
from vmoe.train import train_step


def upstream(workdir: str, overrides: dict | None = None) -> tuple[int, dict]:
  """(step, {metric: value}) of the upstream evaluation of WORKDIR's newest checkpoint, under
  the recorded config with `overrides` ({'dotted.key': value}) set."""
  if not os.path.exists(os.path.join(workdir, run_outputs.CONFIG_FILE)):
    raise errors.MissingInput(f'{workdir} holds no run ({run_outputs.CONFIG_FILE} is missing): '
                              'pass the --workdir of a run that main.py trained.')
  e = routing_maps.recorded_experiment(workdir, overrides)
  program = train_program.build(e)
  step, state = checkpointing.read_run_state(workdir, program)
  evaluator = train_evals.Evaluator(
      program.model, program.mesh, data=e.data, eval_config=e.eval, fewshot_config=e.fewshot,
      loss=e.loss, num_steps=e.num_train_steps, safe_point=lambda: None)
  metrics = evaluator.upstream(train_step.model_variables(state))
  return int(step), {name: float(value) for name, value in metrics.items()}


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
  args = parser.parse_args(argv)
  overrides = dict(parse_setting(text) for text in args.settings)
  for workdir in args.workdirs:
    step, recorded = upstream(workdir)
    _, changed = upstream(workdir, overrides)
    print(json.dumps({'workdir': workdir, 'step': step, 'recorded': recorded,
                      'with': {'settings': overrides, **changed}}), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
