"""What the training loop does besides its steps, and what a checkpoint records for it.

The trainer (vmoe/train/trainer.py) runs one training step at a time and, after each, Actions'
`after_step`, which does what the experiment's schedule says is due at that step: log (metrics,
progress line), save (a checkpoint of the state and its RunRecord) and evaluate (what
train_evals.Evaluator's schedule says is due, appended to the record).
They share the run's state explicitly: the RunRecord a checkpoint holds, the TrainClock that
counts training time without them, the losses not yet checked for NaN, the last step saved. On a
stop request (vmoe/run/preemption.py) `stop` saves where the run stands and exits.
"""
import contextlib
import dataclasses
import time
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from vmoe.run import checkpointing
from vmoe.run import console
from vmoe.run import observability
from vmoe.run import preemption
from vmoe.train import experiment as experiment_lib
from vmoe.train import train_evals
from vmoe.train import train_program
from vmoe.train import train_step


@dataclasses.dataclass
class RunRecord:
  """What a checkpoint holds beside the state, for a resumed run to go on exactly.

  data: the training iterator's position (data/stream/pipeline.py get_state; None before any save);
  train_seconds: the time spent training so far (TrainClock); eval_history: every evaluation's
  results, [{'step': s, metric: value}] (summary.json's eval_history and results come from it);
  segments: where each process lifetime that trained steps ran them, [{'first_step',
  'last_step', **devices_of(mesh)}] in order, up to the step saved (summary.json's segments: a
  run may resume on another mesh). The RNG keys need no record: each step's key derives from
  the seed and the step. router_health: {logged metric: [sum, count]} over the training steps
  logged so far, of each MoE block's health metrics (HEALTH_METRICS); summary.json's
  router_health holds their means.
  """
  data: dict | None = None
  train_seconds: float = 0.0
  eval_history: list[dict] = dataclasses.field(default_factory=list)
  segments: list[dict] = dataclasses.field(default_factory=list)
  router_health: dict = dataclasses.field(default_factory=dict)

  def add_health(self, metrics: dict) -> None:
    """Adds one logged training step's health metrics ('router/BLOCK/NAME', NAME in
    HEALTH_METRICS or a router state's range) to the running sums."""
    for key, value in metrics.items():
      if is_health_metric(key):
        total = self.router_health.setdefault(key, [0.0, 0])
        total[0] += float(value)
        total[1] += 1

  def health_means(self) -> dict:
    """{block: {metric: mean over the logged training steps, 'logged_steps': n}}."""
    out = {}
    for key, (total, count) in sorted(self.router_health.items()):
      _, block, name = key.split('/', 2)
      out.setdefault(block, {})[name] = total / count
      out[block]['logged_steps'] = count
    return out

  def evaluated(self, step: int) -> bool:
    """Whether the history holds an evaluation after `step`."""
    return any(entry['step'] == step for entry in self.eval_history)

  def trained(self, first_step: int, last_step: int, devices: dict) -> None:
    """Records that this process trained steps first_step..last_step on `devices`
    (devices_of): the segment that starts at first_step is extended, or a new one added. A
    resumed process starts after the last step its checkpoint's record holds, so a segment's
    first step names it."""
    if self.segments and self.segments[-1]['first_step'] == first_step:
      self.segments.pop()
    self.segments.append({'first_step': first_step, 'last_step': last_step, **devices})


# The training-time health of a router that summary.json records per MoE block: the tokens no
# expert processed, the buffer slots no token filled, and (router/BLOCK/state_*_range) the spread
# of a router's state, such as lossfree_tc's bias.
HEALTH_METRICS = ('dropped_tokens', 'unfilled_slots')


def is_health_metric(key: str) -> bool:
  parts = key.split('/')
  return (len(parts) == 3 and parts[0] == 'router'
          and (parts[2] in HEALTH_METRICS
               or (parts[2].startswith('state_') and parts[2].endswith('_range'))))


def devices_of(mesh: jax.sharding.Mesh) -> dict:
  """A segment's devices: the mesh's shape ({'data': 2, 'expert': 4}), size and device kind."""
  return {'mesh': dict(mesh.shape), 'num_devices': int(mesh.size),
          'device_kind': mesh.devices.flat[0].device_kind}


class TrainClock:
  """Seconds spent training, across resumes: logging, checkpoints and evaluations are paused out.
  A pause first waits for the state, so that the device's work counts, not just its dispatch."""

  def __init__(self, seconds: float):
    self.seconds = seconds
    self._since = time.perf_counter()

  @contextlib.contextmanager
  def paused(self, state):
    """The block's time is not training time."""
    jax.block_until_ready(state.params)
    self.seconds += time.perf_counter() - self._since
    try:
      yield
    finally:
      self._since = time.perf_counter()


def first_non_finite(pending: list):
  """(step, value) of the first non-finite loss among [(step, loss array)], else None."""
  for step, loss in pending:
    value = float(jax.device_get(loss))
    if not np.isfinite(value):
      return step, value
  return None


@dataclasses.dataclass
class LoopState:
  """The loop's own state between steps: the training clock, the console's progress line, the
  losses not yet checked for NaN (read only at log and checkpoint steps, since reading one waits
  for its step), the last step saved and the first step this process trains."""
  clock: TrainClock
  progress: observability.Progress
  last_saved: int
  first_trained: int
  pending: list = dataclasses.field(default_factory=list)

  @classmethod
  def resuming(cls, record: RunRecord, first_step: int, num_steps: int) -> 'LoopState':
    """The state of a process that starts after `first_step` (0: a fresh run), its training
    clock going on from the record's."""
    return cls(TrainClock(record.train_seconds), observability.Progress(first_step, num_steps),
               last_saved=first_step, first_trained=first_step + 1)

  def stepped(self, step: int, loss) -> None:
    """Keeps a step's loss (an unread device array) until the next check."""
    self.pending.append((step, loss))

  def take_first_non_finite(self):
    """(step, value) of the first non-finite pending loss, or None; forgets them all."""
    bad = first_non_finite(self.pending)
    self.pending.clear()
    return bad


@dataclasses.dataclass
class Actions:
  """What the loop does besides training steps, each pausing the clock: log, save and evaluate,
  run by `after_step` when due; `stop` ends the run on a stop request. `loop` is its LoopState."""
  experiment: experiment_lib.Experiment
  workdir: str
  program: train_program.TrainProgram
  train_iter: Any                   # data/stream/pipeline.py's: next(), get_state(), set_state().
  manager: ocp.CheckpointManager
  writer: observability.ScalarWriter
  evaluator: train_evals.Evaluator
  record: RunRecord
  loop: LoopState

  def check_losses(self):
    """Stops the run (FloatingPointError) if a pending loss is NaN or infinite, naming the last
    good checkpoint, once the saves under way are complete."""
    bad = self.loop.take_first_non_finite()
    if bad is not None:
      checkpointing.wait_until_finished(self.manager)
      raise FloatingPointError(
          f'loss is {bad[1]} at step {bad[0]}; stopped. The last good checkpoint (step '
          f'{self.loop.last_saved}) is kept in {self.workdir}/checkpoints; lower '
          'schedule.peak_lr or optimizer.grad_clip_norm and resume from it.')

  def after_step(self, step: int, *, state, metrics):
    """Logs every log_every_steps, saves every checkpoint.every_steps, evaluates where the
    evaluator's schedule says; the last step is logged and saved too. In that order: a checkpoint
    is saved before its step's evaluation. The step's loss waits for the next check."""
    e = self.experiment
    self.loop.stepped(step, metrics['loss'])
    last = step == e.num_train_steps
    if last or step % e.log_every_steps == 0:
      self.log(step, state=state, metrics=metrics)
    if last or step % e.checkpoint.every_steps == 0:
      self.save(step, state=state)
    if self.evaluator.schedule.due(step):
      self.evaluate(step, state=state)

  def log(self, step: int, *, state, metrics):
    """Writes the step's metrics and learning rate, and the console's progress line."""
    with self.loop.clock.paused(state):
      self.check_losses()
      metrics = jax.device_get(metrics)
      self.record.add_health(metrics)
      self.writer.write_scalars(step, {**metrics, 'learning_rate': self.program.schedule(step)})
      self.loop.progress.report(step, float(metrics['loss']))

  def save(self, step: int, *, state):
    """Starts saving `state` and the record (data position, training time, this process's
    segment) in the background."""
    with self.loop.clock.paused(state):
      self.check_losses()
      self.record.data = self.train_iter.get_state()
      self.record.train_seconds = self.loop.clock.seconds
      self.record.trained(self.loop.first_trained, step, devices_of(self.program.mesh))
      checkpointing.save(self.manager, step, state, dataclasses.asdict(self.record))
      self.loop.last_saved = step

  def evaluate(self, step: int, *, state):
    """Evaluates `state` (train_evals), writes and prints the results, adds them to the record."""
    with self.loop.clock.paused(state):
      results = self.evaluator.evaluate(train_step.model_variables(state), step)
      self.writer.write_scalars(step, results)
      console.say(console.evaluation(step, results))
      self.record.eval_history.append({'step': step, **results})

  def stop(self, state, stop: preemption.StopAgreement):
    """Saves `state` unless saved already, says so in one line and exits with stop's status."""
    step = int(state.step)
    if step != self.loop.last_saved:
      self.save(step, state=state)
    checkpointing.wait_until_finished(self.manager)
    self.writer.flush()
    saved = 'checkpoint saved' if step else 'nothing trained yet'
    console.say(f'{stop.reason()} at step {step}: {saved}; rerun the same command to resume.')
    raise SystemExit(stop.exit_status())
