"""Where a run reports: TensorBoard events and logs (clu), a JSON-lines file, wandb, the console.

Every writer is a clu MetricWriter, combined into one MultiWriter, so the trainer writes scalars
once. Only process 0 writes files; the others only log.
"""
import hashlib
import json
import os
import time

from clu import metric_writers
import jax
import numpy as np

from vmoe import console
from vmoe import run_log

METRICS_FILE = 'metrics.jsonl'


def _scalar(value):
  value = np.asarray(value)
  return value.item() if value.size == 1 else value.tolist()


class ScalarWriter(metric_writers.MetricWriter):
  """A MetricWriter for backends that only take scalars: everything else is ignored."""

  def write_scalars(self, step, scalars):
    raise NotImplementedError

  def write_summaries(self, step, values, metadata=None):
    self.write_scalars(step, {k: v for k, v in values.items() if np.asarray(v).size == 1})

  def write_hparams(self, hparams):
    pass

  def write_images(self, step, images):
    pass

  def write_videos(self, step, videos):
    pass

  def write_audios(self, step, audios, *, sample_rate):
    pass

  def write_texts(self, step, texts):
    pass

  def write_histograms(self, step, arrays, num_buckets=None):
    pass

  def flush(self):
    pass

  def close(self):
    pass


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


def make_writer(workdir: str, config, hparams: dict) -> metric_writers.MetricWriter:
  """TensorBoard + logging (clu's default writer), JSON lines and wandb (`config`, the run's
  experiment.WandbConfig; recording `hparams`, its resolved config), on process 0."""
  if jax.process_index() > 0:
    return metric_writers.create_default_writer(just_logging=True)
  writers = [metric_writers.create_default_writer(workdir, asynchronous=False), JsonlWriter(workdir)]
  if config.mode != 'disabled':
    writers.append(WandbWriter(workdir, config, hparams))
  return metric_writers.MultiWriter(writers)


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
