"""train_and_evaluate: pretrain a config, evaluate it, and record what it cost.

Stages: (1) checks before anything compiles, (2) mesh, model, optimizer, data, (3) state from the
newest checkpoint or fresh, (4) compile the step and account its cost, (5) the loop with periodic
logging, evaluation and checkpoints, (6) summary.json.
"""
import json
import os
import signal
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np

from vmoe import atomic
from vmoe import checkpointing
from vmoe import evaluators
from vmoe import flops
from vmoe import observability
from vmoe import optim
from vmoe import sharding
from vmoe import train_step as train_lib
from vmoe import vit
from configs import common as config_lib
from data import pipeline
from data import sources

CONFIG_FILE = 'config.json'
SUMMARY_FILE = 'summary.json'


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


def guard_workdir(workdir: str, config) -> None:
  """Refuses a workdir that holds a run of a different config; records the config otherwise."""
  path = os.path.join(workdir, CONFIG_FILE)
  current = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      previous = json.load(f)
    if previous != current:
      changed = sorted(k for k in set(previous) | set(current) if previous.get(k) != current.get(k))
      raise ValueError(f'{workdir} holds a run of a different config (differences under: '
                       f'{", ".join(changed)}); use a new --workdir, or delete this one to start over.')
  elif jax.process_index() == 0:
    atomic.write_json(path, current)


def first_non_finite(pending: list):
  """(step, value) of the first non-finite loss among [(step, loss array)], else None."""
  for step, loss in pending:
    value = float(jax.device_get(loss))
    if not np.isfinite(value):
      return step, value
  return None


def build_step(config, model, tx, mesh, state_shardings):
  """The training step of `config` (mixup, MoE constraints on `mesh`), jitted with its shardings:
  (state, batch, rng) -> (state, metrics), the state donated."""
  # Mixup mixes each device's shard on its own (V-MoE's granularity 'device').
  step_fn = sharding.with_mesh(train_lib.with_mixup(
      train_lib.make_train_step(model, tx, config.loss), config.mixup_alpha,
      num_chunks=sharding.batch_shards(mesh)), mesh)
  return jax.jit(step_fn, in_shardings=(state_shardings, sharding.batch_sharding(mesh), None),
                 out_shardings=(state_shardings, None), donate_argnums=(0,))


def train_and_evaluate(config, workdir: str, config_file: str = '', config_arg: str = '') -> dict:
  """Trains `config` in `workdir` (resuming if it holds checkpoints) and returns the summary."""
  # 1. Checks before anything compiles.
  config_lib.validate(config)
  sources.check_available(config.data)
  evaluators.check_available(config)
  os.makedirs(workdir, exist_ok=True)
  guard_workdir(workdir, config)

  # 2. Mesh, model, optimizer, data.
  mesh = sharding.make_mesh(config.mesh)
  model = vit.build_model(config)
  tx, schedule = optim.make_optimizer(config)
  train_iter = pipeline.make_train_iterator(
      config.data, batch_size=config.batch_size, seed=config.seed,
      process_index=jax.process_index(), process_count=jax.process_count())
  writer = observability.make_writer(workdir, config)

  # 3. State: the newest complete checkpoint, or a fresh initialisation.
  init_rng, rng = jax.random.split(jax.random.PRNGKey(config.seed))
  images = jax.ShapeDtypeStruct((config.batch_size,) + vit.image_shape(config), jnp.float32)
  init = train_lib.init_fn(model, tx, images.shape)
  abstract_state = jax.eval_shape(init, init_rng)
  state_shardings = sharding.tree_shardings(abstract_state, mesh)
  manager = checkpointing.make_manager(workdir, config.checkpoint.keep,
                                       config.checkpoint.asynchronous)
  restored = checkpointing.restore_latest(
      manager, checkpointing.abstract_with_shardings(abstract_state, state_shardings))
  if restored is None:
    state = jax.jit(init, out_shardings=state_shardings)(init_rng)
    record = {'train_seconds': 0.0, 'eval_history': []}
  else:
    state, record = restored
    train_iter.set_state(record['data'])
    logging.info('Resumed from step %d.', int(state.step))
  first_step = int(state.step)

  # 4. Compile the step; its FLOPs come from XLA's cost analysis, its compile time is separate.
  batch_sharding = sharding.batch_sharding(mesh)
  label_shape = (config.batch_size, config.model.num_classes)
  abstract_batch = {'image': images, 'labels': jax.ShapeDtypeStruct(label_shape, jnp.float32)}
  start = time.perf_counter()
  compiled_step = build_step(config, model, tx, mesh, state_shardings).lower(
      abstract_state, abstract_batch, rng).compile()
  compile_seconds = time.perf_counter() - start
  flops_per_step = flops.compiled_flops(compiled_step)
  evaluate = sharding.with_mesh(evaluators.make(config, model, mesh), mesh)
  num_params = int(sum(np.prod(p.shape) for p in jax.tree.leaves(abstract_state.params)))
  logging.info('%d parameters; %.3g FLOPs per step; step compiled in %.1fs.',
               num_params, flops_per_step, compile_seconds)

  # 5. The loop.
  stop = StopRequested()
  progress = observability.Progress(first_step, config.num_train_steps)
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

  while step < config.num_train_steps and not stop.requested:
    batch = sharding.put_batch(next(train_iter), batch_sharding)
    state, metrics = compiled_step(state, batch, jax.random.fold_in(rng, step))
    step += 1
    pending.append((step, metrics['loss']))
    is_last = step == config.num_train_steps
    if step % config.log_every_steps == 0 or is_last:
      pause_clock()
      check_finite()
      metrics = jax.device_get(metrics)
      writer.write_scalars(step, {**metrics, 'learning_rate': schedule(step)})
      progress.report(step, float(metrics['loss']))
      tick = time.perf_counter()
    if step % config.checkpoint.every_steps == 0 or is_last:
      pause_clock()
      save(step)
      tick = time.perf_counter()
    if evaluators.due(config, step, is_last):
      pause_clock()
      results = evaluate(state.params, step, is_last)
      writer.write_scalars(step, results)
      record['eval_history'].append({'step': step, **results})
      tick = time.perf_counter()
  if stop.requested and step < config.num_train_steps:
    if step != last_saved:    # A periodic checkpoint may have just saved this very step.
      save(step)
    manager.wait_until_finished()
    writer.flush()
    print(f'Interrupted at step {step}: checkpoint saved; rerun the same command to resume.')
    raise SystemExit(130)
  manager.wait_until_finished()

  # 6. Summary.
  final = record['eval_history'][-1] if record['eval_history'] else {}
  summary = {
      'config': config_file, 'config_arg': config_arg,
      'arch': config.model.variant, 'router': config.moe.router.name,
      'capacity': config.moe.router.capacity_factor,
      'softmax_combine': config.moe.router.softmax_combine, 'seed': config.seed,
      'dataset': config.data.name, 'steps': step, 'num_params': num_params,
      'upstream_prec1': final.get('upstream/prec@1'),
      'fewshot': evaluators.fewshot_table(final, 'best_l2'),
      'fewshot_cv': evaluators.fewshot_table(final, 'cv'),
      'train_device_seconds': train_seconds * jax.device_count(),
      'device_kind': jax.devices()[0].device_kind, 'num_devices': jax.device_count(),
      'flops_per_step': flops_per_step, 'compile_seconds': compile_seconds,
      'router_metrics': {k: v for k, v in final.items() if k.startswith('router/')},
      'eval_history': [{'step': h['step'], 'upstream_prec1': h.get('upstream/prec@1')}
                       for h in record['eval_history']],
  }
  if jax.process_index() == 0:
    atomic.write_json(os.path.join(workdir, SUMMARY_FILE), summary)
  # Every process returns only once summary.json exists (launch.sweep checks it to skip a run).
  multihost_utils.sync_global_devices('summary.json written')
  writer.close()
  return summary
