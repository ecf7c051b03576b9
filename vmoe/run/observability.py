"""Where a run reports: TensorBoard events, the log, a JSON-lines file, wandb, the console.

Each writer takes scalars (write_scalars(step, {name: value}), then close()); `Writers` hands
every write to each, so the trainer writes once. Only process 0 writes files; the others only
log. TensorBoard events come from tf.summary, imported without Keras (base/no_keras.py).
"""
import hashlib
import json
import os
import time

from absl import logging
import jax
import numpy as np

from base import no_keras  # pylint: disable=unused-import  (before TensorFlow's import)
from vmoe.run import console
from vmoe.run import run_log
from vmoe.run import wandb_config

METRICS_FILE = 'metrics.jsonl'


def _scalar(value):
  value = np.asarray(value)
  return value.item() if value.size == 1 else value.tolist()


class ScalarWriter:
  """A backend that takes scalars; closing it may release a file or a run."""

  def write_scalars(self, step: int, scalars: dict):
    raise NotImplementedError

  def flush(self):
    pass

  def close(self):
    pass


class LogWriter(ScalarWriter):
  """One INFO line per write, '[step] name=value, ...' (floats to 6 significant digits): in
  log.txt (vmoe/run/run_log.py)."""

  def write_scalars(self, step, scalars):
    values = {k: _scalar(v) for k, v in scalars.items()}
    logging.info('[%d] %s', step, ', '.join(
        f'{k}={v:.6g}' if isinstance(v, float) else f'{k}={v}' for k, v in values.items()))


class TensorBoardWriter(ScalarWriter):
  """TensorBoard event files in `logdir`, one scalar summary per value."""

  def __init__(self, logdir: str):
    # Here, not with the module's imports: sorted, those put TensorFlow before base/no_keras.py.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self._tf = tf
    self._writer = tf.summary.create_file_writer(logdir)

  def write_scalars(self, step, scalars):
    with self._writer.as_default():
      for name, value in scalars.items():
        self._tf.summary.scalar(name, _scalar(value), step=int(step))

  def flush(self):
    self._writer.flush()

  def close(self):
    self._writer.close()


class JsonlWriter(ScalarWriter):
  """Appends one JSON object per write to WORKDIR/metrics.jsonl: {"step": s, name: value, ...}.

  A resumed run appends again from its checkpoint step on, so a step can appear more than once;
  readers keep the last record of each step (`read_metrics`).
  """

  def __init__(self, workdir: str):
    self._file = open(os.path.join(workdir, METRICS_FILE), 'a', encoding='utf-8')

  def write_scalars(self, step, scalars):
    record = {'step': int(step), **{k: _scalar(v) for k, v in scalars.items()}}
    self._file.write(json.dumps(record) + '\n')
    self._file.flush()

  def close(self):
    self._file.close()


class WandbWriter(ScalarWriter):
  """Logs scalars to wandb; offline by default (no network), `--config.wandb.mode=online` to sync.

  The run id is derived from the workdir so that a resumed run continues the same wandb run.
  Offline, wandb's banners (start, run history, "wandb sync" hint) only repeat what the run
  prints and where its workdir is: silent unless the console shows INFO logs (--verbose) or
  WANDB_SILENT says otherwise. Online they keep the run's URL.
  """

  def __init__(self, workdir: str, config, hparams: dict):
    import wandb  # pylint: disable=g-import-not-at-top
    run_id = 'run-' + hashlib.sha1(os.path.abspath(workdir).encode()).hexdigest()[:12]
    silent = (config.mode == 'offline' and 'WANDB_SILENT' not in os.environ
              and not run_log.shows_info())
    self._run = wandb.init(mode=config.mode, project=config.project, dir=workdir,
                           id=run_id, resume='allow', config=hparams,
                           settings=wandb.Settings(silent=True) if silent else None)

  def write_scalars(self, step, scalars):
    self._run.log({k: _scalar(v) for k, v in scalars.items()}, step=int(step))

  def close(self):
    self._run.finish()


class Writers(ScalarWriter):
  """Every write, flush and close goes to each of `writers`, in order."""

  def __init__(self, writers: list[ScalarWriter]):
    self.writers = writers

  def write_scalars(self, step, scalars):
    for writer in self.writers:
      writer.write_scalars(step, scalars)

  def flush(self):
    for writer in self.writers:
      writer.flush()

  def close(self):
    for writer in self.writers:
      writer.close()


def make_writer(workdir: str, config: wandb_config.WandbConfig, hparams: dict) -> Writers:
  """The log, TensorBoard, JSON lines and wandb (`config`, the run's wandb_config.WandbConfig;
  recording `hparams`, its resolved config) on process 0; the log only on the others."""
  if jax.process_index() > 0:
    return Writers([LogWriter()])
  writers = [LogWriter(), TensorBoardWriter(workdir), JsonlWriter(workdir)]
  if config.mode != 'disabled':
    writers.append(WandbWriter(workdir, config, hparams))
  return Writers(writers)


def read_metrics(workdir: str) -> dict:
  """{step: record} from metrics.jsonl, the last record winning for steps written twice."""
  records = {}
  path = os.path.join(workdir, METRICS_FILE)
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      for line in f:
        if line.strip():
          record = json.loads(line)
          records.setdefault(record['step'], {}).update(record)
  return records


class Progress:
  """A console line per report: step, loss, steps/s over the last interval, ETA."""

  def __init__(self, first_step: int, num_steps: int):
    self._num_steps = num_steps
    self._last = (first_step, time.monotonic())

  def report(self, step: int, loss: float) -> str:
    now = time.monotonic()
    steps_per_sec = (step - self._last[0]) / max(now - self._last[1], 1e-9)
    self._last = (step, now)
    eta = (self._num_steps - step) / max(steps_per_sec, 1e-9)
    line = (f'step {step}/{self._num_steps} | loss {loss:.4f} | {steps_per_sec:.2f} steps/s | '
            f'ETA {int(eta // 3600)}h{int(eta % 3600 // 60):02d}m{int(eta % 60):02d}s')
    return console.say(line)
