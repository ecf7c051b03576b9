"""train_and_evaluate: pretrain an experiment, evaluate it, and record what it cost.

The experiment is a config parsed once into typed sections (vmoe/experiment.py, at main.py's
start). Stages: (1) data checks before anything compiles, (2) model, optimizer, state layout and
step (vmoe/train_program.py), data, (3) state from the newest checkpoint or fresh, (4) compile the
step and account its cost, (5) the loop with periodic logging, evaluation and checkpoints, (6)
summary.json (run_protocol.RunSummary).
"""
import dataclasses
import json
import os
import signal
import tempfile
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from base import atomic
from base import errors
from data import pipeline
from data import sources
from vmoe import checkpointing
from vmoe import console
from vmoe import train_evals
from vmoe import experiment as experiment_lib
from vmoe import flops
from vmoe import observability
from vmoe import run_protocol
from vmoe import sharding
from vmoe import train_program



class StopRequested:
  """Turns Ctrl-C / SIGTERM (preemption) into a flag the loop checks between steps."""

  def __init__(self):
    self.requested = False
    for sig in (signal.SIGINT, signal.SIGTERM):
      signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self.requested:      # A second Ctrl-C exits at once.
      signal.signal(signum, signal.SIG_DFL)
      raise KeyboardInterrupt
    logging.warning('Signal %d: saving a checkpoint before exiting.', signum)
    self.requested = True


def make_workdir(workdir: str) -> None:
  """Creates `workdir` and writes a probe file in it, so that a path the user cannot write fails
  now, as a UserError naming it, not at the first checkpoint."""
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise errors.UserError(f'cannot write in --workdir={workdir} ({e.strerror or e}); give a '
                           'directory you can create and write.') from e


def guard_workdir(workdir: str, experiment: experiment_lib.Experiment) -> None:
  """Refuses a workdir that holds a run of a different config; records the resolved config (in
  the config's layout: vmoe/experiment.py parses it back) otherwise."""
  path = os.path.join(workdir, run_protocol.CONFIG_FILE)
  current = experiment.to_dict()
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      previous = json.load(f)
    if any(size < 0 for size in previous.get('mesh', {}).values()):
      raise errors.UserError(
          f'{path} records its mesh with automatic (-1) sizes: it was written by an older trainer, '
          'whose runs this one does not resume. Use a new --workdir (or delete this one to start '
          'over).')
    if previous != current:
      changed = sorted(k for k in set(previous) | set(current) if previous.get(k) != current.get(k))
      raise errors.UserError(f'{workdir} holds a run of a different config (differences '
                             f'under: {", ".join(changed)}); use a new --workdir, or delete this '
                             'one to start over.')
  elif jax.process_index() == 0:
    atomic.write_json(path, current)


def first_non_finite(pending: list):
  """(step, value) of the first non-finite loss among [(step, loss array)], else None."""
  for step, loss in pending:
    value = float(jax.device_get(loss))
    if not np.isfinite(value):
      return step, value
  return None


def train_and_evaluate(experiment: experiment_lib.Experiment, workdir: str,
                       config_file: str = '') -> run_protocol.RunSummary:
  """Trains `experiment` (vmoe/experiment.py parse) in `workdir`, resuming if it holds
  checkpoints, and returns its summary; config_file is recorded in it."""
  e = experiment
  # 1. Checks of the data before anything compiles (the config was checked when parsed).
  sources.check_available(e.data)
  train_evals.check_available(e.data, e.fewshot)
  make_workdir(workdir)
  guard_workdir(workdir, e)

  # 2. Mesh, model, optimizer, state layout and step (vmoe/train_program.py), data.
  program = train_program.build(e)
  train_iter = pipeline.make_train_iterator(
      e.data, batch_size=e.batch_size, seed=e.seed,
      process_index=jax.process_index(), process_count=jax.process_count())
  writer = observability.make_writer(workdir, e.wandb, e.to_dict())

  # 3. State: the newest complete checkpoint, or a fresh initialisation.
  init_rng, rng = jax.random.split(jax.random.PRNGKey(e.seed))
  manager = checkpointing.make_manager(workdir, e.checkpoint)
  restored = checkpointing.restore_latest(
      manager, checkpointing.abstract_with_shardings(program.abstract_state,
                                                     program.state_shardings))
  if restored is None:
    state = program.init_state(init_rng)
    record = {'train_seconds': 0.0, 'eval_history': []}
  else:
    state, record = restored
    train_iter.set_state(record['data'])
    logging.info('Resumed from step %d.', int(state.step))
  first_step = int(state.step)

  # 4. Compile the step; its FLOPs come from XLA's cost analysis, its compile time is separate.
  start = time.perf_counter()
  compiled_step = program.compile()
  compile_seconds = time.perf_counter() - start
  flops_per_step = flops.compiled_flops(compiled_step)
  evaluate = sharding.with_mesh(train_evals.make_evaluator(
      program.model, program.mesh, data=e.data, eval_config=e.eval, fewshot_config=e.fewshot,
      loss=e.loss), program.mesh)
  num_params = program.num_params()
  logging.info('%d parameters; %.3g FLOPs per step; step compiled in %.1fs.',
               num_params, flops_per_step, compile_seconds)
  for line in console.header(e, config_file=config_file, mesh=program.mesh, num_params=num_params,
                             flops_per_step=flops_per_step, workdir=workdir,
                             first_step=first_step):
    console.say(line)

  # 5. The loop.
  stop = StopRequested()
  progress = observability.Progress(first_step, e.num_train_steps)
  pending, last_saved = [], first_step
  train_seconds = record['train_seconds']

  def check_finite():  # At log and checkpoint steps only, so steps are not synchronised.
    nonlocal pending
    bad = first_non_finite(pending)
    if bad is not None:
      manager.wait_until_finished()
      raise FloatingPointError(
          f'loss is {bad[1]} at step {bad[0]}; stopped. The last good checkpoint (step '
          f'{last_saved}) is kept in {workdir}/checkpoints; lower schedule.peak_lr or '
          'optimizer.grad_clip_norm and resume from it.')
    pending = []

  def save(step):
    nonlocal last_saved
    check_finite()
    last_saved = step
    record.update(data=train_iter.get_state(), train_seconds=train_seconds)
    checkpointing.save(manager, step, state, record)

  step = first_step
  tick = time.perf_counter()

  def pause_clock():  # Training time excludes logging, checkpoints and evaluation.
    nonlocal train_seconds
    jax.block_until_ready(state.params)
    train_seconds += time.perf_counter() - tick

  while step < e.num_train_steps and not stop.requested:
    batch = sharding.put_batch(next(train_iter), program.batch_sharding)
    state, metrics = compiled_step(state, batch, jax.random.fold_in(rng, step))
    step += 1
    pending.append((step, metrics['loss']))
    is_last = step == e.num_train_steps
    if step % e.log_every_steps == 0 or is_last:
      pause_clock()
      check_finite()
      metrics = jax.device_get(metrics)
      writer.write_scalars(step, {**metrics, 'learning_rate': program.schedule(step)})
      progress.report(step, float(metrics['loss']))
      tick = time.perf_counter()
    if step % e.checkpoint.every_steps == 0 or is_last:
      pause_clock()
      save(step)
      tick = time.perf_counter()
    if train_evals.due(e.eval, e.fewshot, step, is_last):
      pause_clock()
      results = evaluate(state.params, step, is_last)
      writer.write_scalars(step, results)
      console.say(console.evaluation(step, results))
      record['eval_history'].append({'step': step, **results})
      tick = time.perf_counter()
  if stop.requested and step < e.num_train_steps:
    if step != last_saved:    # A periodic checkpoint may have just saved this very step.
      save(step)
    manager.wait_until_finished()
    writer.flush()
    print(f'Interrupted at step {step}: checkpoint saved; rerun the same command to resume.')
    raise SystemExit(run_protocol.INTERRUPTED)
  manager.wait_until_finished()

  # 6. Summary.
  final = record['eval_history'][-1] if record['eval_history'] else {}
  router = e.moe.router
  summary = run_protocol.RunSummary(
      config=config_file, config_arg=e.config_arg, resolved_config=e.to_dict(),
      arch=e.model.variant, router=e.router_name,
      capacity=None if router is None else router.capacity_factor,
      softmax_combine=True if router is None else router.softmax_combine, seed=e.seed,
      dataset=e.data.name, steps=step, num_params=num_params,
      upstream_prec1=final.get('upstream/prec@1'),
      fewshot=train_evals.fewshot_table(final, 'best_l2'),
      fewshot_cv=train_evals.fewshot_table(final, 'cv'),
      train_device_seconds=train_seconds * jax.device_count(),
      device_kind=jax.devices()[0].device_kind, num_devices=jax.device_count(),
      flops_per_step=flops_per_step, compile_seconds=compile_seconds,
      router_metrics={k: v for k, v in final.items() if k.startswith('router/')},
      eval_history=[{'step': h['step'], 'upstream_prec1': h.get('upstream/prec@1')}
                    for h in record['eval_history']])
  summary_path = os.path.join(workdir, run_protocol.SUMMARY_FILE)
  if jax.process_index() == 0:
    atomic.write_json(summary_path, summary.to_dict())
  # Every process returns only once summary.json exists (launch.sweep checks it to skip a run).
  multihost_utils.sync_global_devices('summary.json written')
  writer.close()
  console.say(console.final(summary, summary_path))
  return summary
