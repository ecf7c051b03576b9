"""train_and_evaluate: pretrain an experiment, evaluate it, and record what it cost; main.py and
the tests enter the trainer through it alone.

The experiment is a config parsed once into typed sections (vmoe/train/experiment.py, at
main.py's start). Stages: (1) the workdir (claimed once, by the caller: main.py claims it before
importing this module, so that a bad one fails before TensorFlow loads), then the data's checks,
before anything compiles, (2) the training program (vmoe/train/train_program.py), data and
metric writer, (3) state from the newest checkpoint or fresh, (4) compile the step and account
its cost, (5) the loop: a step, then what is due after it: log, save a checkpoint, evaluate
(vmoe/train/loop_actions.py), (6) summary.json (run_outputs.RunSummary).

From stage 2 on, Ctrl-C or SIGTERM stops the run at the next safe point, the same one on every
process (vmoe/run/preemption.py: before a step or an evaluation batch): the state there is saved,
one line says so, and the process exits with run_outputs's status for it. A checkpoint holds
the state and a loop_actions.RunRecord. It is saved before its step's evaluation, and a resumed
run evaluates its first step again if the record lacks that evaluation (a stop, or a kill, came
during it): the summary's eval_history has every evaluation once, as an uninterrupted run's.
"""
import os
import time

from absl import logging
from clu import parameter_overview
import jax
from jax.experimental import multihost_utils

from base import atomic
from base import errors
from base import host
from base import revision
from data.datasets import sources
from data.stream import pipeline
from evaluation import fewshot
from vmoe.model import sharding
from vmoe.routing import declarations
from vmoe.run import checkpointing
from vmoe.run import console
from vmoe.run import observability
from vmoe.run import preemption
from vmoe.run import run_outputs
from vmoe.train import experiment as experiment_lib
from vmoe.train import flops
from vmoe.train import loop_actions
from vmoe.train import train_evals
from vmoe.train import train_program
from vmoe.train import workdir as workdir_lib


def restore_or_init(manager, program: train_program.TrainProgram, train_iter, rng):
  """(state, RunRecord) of the newest checkpoint that reads back intact, or fresh ones."""
  restored = checkpointing.restore_latest(
      manager, checkpointing.abstract_with_shardings(program.abstract_state,
                                                     program.state_shardings),
      fresh_state=lambda: program.init_state(rng))
  if restored is None:
    return program.init_state(rng), loop_actions.RunRecord()
  state, record = restored
  pipeline.check_process_count(record['data'], jax.process_count(),
                               f'The checkpoint of step {int(state.step)}')
  train_iter.set_state(record['data'])
  logging.info('Resumed from step %d.', int(state.step))
  return state, loop_actions.RunRecord(**record)


def train_and_evaluate(experiment: experiment_lib.Experiment, workdir: str,
                       config_file: str = '') -> run_outputs.RunSummary:
  """Trains `experiment` (vmoe/train/experiment.py parse) in `workdir`, resuming if it holds
  checkpoints, and returns its summary; config_file is recorded in it. `workdir` is claimed for
  `experiment` already (workdir.claim, whose returned experiment this is). Ctrl-C or SIGTERM
  stops the run at a safe point (the module docstring)."""
  # 1. The workdir, claimed by the caller (main.py, before TensorFlow loads: workdir.claim), then
  # the data's checks (a UserError that says how to get a missing set), before anything compiles;
  # the config was checked when parsed.
  workdir_lib.check_claimed(workdir, experiment)
  sources.check_available(experiment.data)
  train_evals.check_available(experiment.data, experiment.fewshot)
  with preemption.StopAgreement() as stop:
    return _train(experiment, workdir, config_file, stop)


def _train(experiment: experiment_lib.Experiment, workdir: str, config_file: str,
           stop: preemption.StopAgreement) -> run_outputs.RunSummary:
  """Stages 2 to 6 of train_and_evaluate (the module docstring), stopping where `stop` says."""
  e = experiment
  source = revision.source_revision()   # The code this process trains with, read at its start.
  # 2. Mesh, model, optimizer, state layout and step (vmoe/train/train_program.py), data.
  program = train_program.build(e)
  train_iter = pipeline.make_train_iterator(
      e.data, batch_size=e.batch_size, seed=e.seed,
      process_index=jax.process_index(), process_count=jax.process_count(),
      cut=e.pp_splits[e.data.pp_train])
  writer = observability.make_writer(workdir, e.wandb, e.to_dict())

  # 3. State: the newest complete checkpoint, or a fresh initialisation.
  init_rng, rng = jax.random.split(jax.random.PRNGKey(e.seed))
  manager = checkpointing.make_manager(workdir, e.checkpoint)
  state, record = restore_or_init(manager, program, train_iter, init_rng)
  first_step = int(state.step)

  # 4. Compile the step; its FLOPs (the whole step over all devices) come from XLA's cost analysis
  # of the lowered step, the same on every platform; its compile time is separate.
  lowered_step = program.lower()
  start = time.perf_counter()
  compiled_step = program.compile(lowered=lowered_step)
  cost = {'compile_seconds': time.perf_counter() - start,
          'flops_per_step': flops.lowered_flops(lowered_step), 'num_params': program.num_params()}
  evaluator = train_evals.Evaluator(
      program.model, program.mesh, data=e.data, eval_config=e.eval, fewshot_config=e.fewshot,
      pp_splits=e.pp_splits, loss=e.loss, num_steps=e.num_train_steps, safe_point=stop.check)
  logging.info('%d parameters; %.3g FLOPs per step; step compiled in %.1fs.', cost['num_params'],
               cost['flops_per_step'], cost['compile_seconds'])
  parameter_overview.log_parameter_overview(program.abstract_state.params, include_stats=False)
  for line in console.header(e, config_file=config_file, mesh=program.mesh,
                             num_params=cost['num_params'], workdir=workdir,
                             flops_per_step=cost['flops_per_step'], first_step=first_step):
    console.say(line)

  # 5. The loop: a stop request is honoured before any step or evaluation batch.
  run = loop_actions.Actions(
      e, workdir, program, train_iter, manager, writer, evaluator, record,
      loop_actions.LoopState.resuming(record, first_step, e.num_train_steps))
  evaluation_owed = evaluator.schedule.due(first_step) and not record.evaluated(first_step)
  try:
    if evaluation_owed:
      run.evaluate(first_step, state=state)
    for step in range(first_step + 1, e.num_train_steps + 1):
      stop.check()
      batch = sharding.put_batch(next(train_iter), program.batch_sharding)
      state, metrics = compiled_step(state, batch, jax.random.fold_in(rng, step))
      run.after_step(step, state=state, metrics=metrics)
  except preemption.Stopped:
    run.stop(state, stop)
  checkpointing.wait_until_finished(manager)

  # 6. Summary.
  summary = summarize(e, record, config_file=config_file, train_seconds=run.loop.clock.seconds,
                      source=source, **cost)
  write_summary(workdir, summary)
  writer.close()
  return summary


def summarize(experiment: experiment_lib.Experiment, record: loop_actions.RunRecord, *,
              config_file: str, train_seconds: float, num_params: int, flops_per_step: float,
              compile_seconds: float, source: dict | None = None) -> run_outputs.RunSummary:
  """summary.json's record of a finished run: its identity, its last evaluation's results, every
  evaluation's precision@1, its router's training-time health, its cost on this run's devices,
  and its source (base/revision.py's source_revision; read now if not given)."""
  e, router = experiment, experiment.moe.router
  final = record.eval_history[-1] if record.eval_history else {}
  declared = None if router is None else declarations.get(router.name)
  return run_outputs.RunSummary(
      config=config_file, config_arg=e.config_arg, resolved_config=e.to_dict(),
      arch=e.model.variant, router=e.router_name,
      capacity=None if router is None else router.capacity_factor,
      softmax_combine=True if router is None else router.softmax_combine, seed=e.seed,
      dataset=e.data.name, steps=e.num_train_steps, num_params=num_params,
      upstream_prec1=final.get('upstream/prec@1'),
      eval_sets={name: final[f'{name}/prec@1'] for name in e.eval.sets
                 if f'{name}/prec@1' in final} or None,
      fewshot=fewshot.summary_table(final, 'best_l2'),
      fewshot_cv=fewshot.summary_table(final, 'cv'),
      train_device_seconds=train_seconds * jax.device_count(),
      device_kind=jax.devices()[0].device_kind, num_devices=jax.device_count(),
      flops_per_step=flops_per_step, compile_seconds=compile_seconds,
      router_metrics={k: v for k, v in final.items() if k.startswith('router/')},
      eval_history=[{'step': h['step'], 'upstream_prec1': h.get('upstream/prec@1')}
                    for h in record.eval_history], segments=record.segments,
      router_title=declared and declared.title,
      router_allocation=declared and declared.allocation,
      router_health=record.health_means() or None,
      **(source or revision.source_revision()), **host.this_cpu())


def write_summary(workdir: str, summary: run_outputs.RunSummary) -> None:
  """Writes WORKDIR/summary.json (process 0) and prints the run's last line; every process
  returns only once the file exists (launch/sweep.py checks it to skip a finished run)."""
  path = os.path.join(workdir, run_outputs.SUMMARY_FILE)
  if jax.process_index() == 0:
    with errors.disk_full_is_user_error(workdir, f'writing {path}', lambda: (
        f'The run is finished and its last checkpoint (step {summary.steps}) saved: free some '
        'space there and rerun the same command, which evaluates that checkpoint again and '
        'writes the summary.')):
      atomic.write_json(path, summary.to_dict())
  multihost_utils.sync_global_devices('summary.json written')
  console.say(console.final(summary, path))
