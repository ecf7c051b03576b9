"""Tests of the JSON-lines metrics, their reader and the console progress line."""
import numpy as np

from vmoe import experiment as experiment_lib
from vmoe import observability


def test_jsonl_round_trip_keeps_the_last_record_per_step(tmp_path):
  writer = observability.JsonlWriter(str(tmp_path))
  writer.write_scalars(1, {'loss': np.float32(2.5)})
  writer.write_scalars(2, {'loss': 2.0})
  writer.write_scalars(2, {'loss': 1.5, 'lr': 0.1})   # A resumed run rewrites step 2.
  writer.close()
  assert observability.read_metrics(str(tmp_path)) == {
      1: {'step': 1, 'loss': 2.5}, 2: {'step': 2, 'loss': 1.5, 'lr': 0.1}}


def test_writer_with_wandb_disabled_writes_tensorboard_and_jsonl(tmp_path):
  config = experiment_lib.WandbConfig(mode='disabled', project='p')
  writer = observability.make_writer(str(tmp_path), config, {})
  writer.write_scalars(3, {'loss': 0.5})
  writer.close()
  assert observability.read_metrics(str(tmp_path))[3]['loss'] == 0.5
  assert any(name.startswith('events.out.tfevents') for name in
             [p.name for p in tmp_path.iterdir()])


def test_progress_line():
  line = observability.Progress(0, 100).report(10, 0.25)
  assert line.startswith('step 10/100 | loss 0.2500 | ') and 'steps/s | ETA ' in line
