"""Tests of the metric writers (JSON lines, TensorBoard), the reader and the progress line."""
import sys

import numpy as np

from vmoe.run import observability
from vmoe.run import wandb_config


def test_jsonl_round_trip_keeps_the_last_record_per_step(tmp_path):
  writer = observability.JsonlWriter(str(tmp_path))
  writer.write_scalars(1, {'loss': np.float32(2.5)})
  writer.write_scalars(2, {'loss': 2.0})
  writer.write_scalars(2, {'loss': 1.5, 'lr': 0.1})   # A resumed run rewrites step 2.
  writer.close()
  assert observability.read_metrics(str(tmp_path)) == {
      1: {'step': 1, 'loss': 2.5}, 2: {'step': 2, 'loss': 1.5, 'lr': 0.1}}


def test_writer_with_wandb_disabled_writes_tensorboard_and_jsonl(tmp_path):
  config = wandb_config.WandbConfig(mode='disabled', project='p')
  writer = observability.make_writer(str(tmp_path), config, {})
  writer.write_scalars(3, {'loss': np.float32(0.5)})
  writer.write_scalars(4, {'loss': 0.25, 'learning_rate': 1e-3})
  writer.close()
  assert observability.read_metrics(str(tmp_path))[3]['loss'] == 0.5
  events = [p for p in tmp_path.iterdir() if p.name.startswith('events.out.tfevents')]
  assert len(events) == 1
  assert tensorboard_scalars(events[0]) == {
      (3, 'loss'): 0.5, (4, 'loss'): 0.25, (4, 'learning_rate'): np.float32(1e-3)}


def tensorboard_scalars(path) -> dict:
  """{(step, tag): value} of an event file's scalar summaries, read back as TensorBoard does."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  scalars = {}
  for record in tf.data.TFRecordDataset(str(path)):
    event = tf.compat.v1.Event.FromString(record.numpy())
    for value in event.summary.value:
      scalars[event.step, value.tag] = tf.make_ndarray(value.tensor).item()
  return scalars


def test_the_trainer_imports_tensorflow_without_keras():
  # base/no_keras.py: TensorFlow skips its eager Keras import (Keras 3, scikit-learn's and
  # matplotlib's imports). Nothing of ours, TFDS included, reaches for Keras afterwards.
  from vmoe.train import trainer  # pylint: disable=g-import-not-at-top,unused-import
  import tensorflow_datasets  # pylint: disable=g-import-not-at-top,unused-import
  assert 'tensorflow' in sys.modules
  assert not [m for m in sys.modules if m == 'keras' or m.startswith('keras.')]


def test_progress_line():
  line = observability.Progress(0, 100).report(10, 0.25)
  assert line.startswith('step 10/100 | loss 0.2500 | ') and 'steps/s | ETA ' in line


def test_log_writer_writes_one_line_per_write(caplog):
  with caplog.at_level('INFO'):
    observability.LogWriter().write_scalars(3, {'loss': np.float32(2.0104658), 'count': 3})
  assert [r.getMessage() for r in caplog.records] == ['[3] loss=2.01047, count=3']
