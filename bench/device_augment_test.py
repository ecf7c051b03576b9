"""The device-augmentation benchmark on a shrunk config (no timed assertions)."""
import json

import pytest

from bench import device_augment
from configs import common


def test_rows_on_a_runlocal_config(tmp_path, monkeypatch):
  # The paper configs' runlocal shrink ('mu/32' on 64 x 64 images) stands in for S/32 at 224 px.
  monkeypatch.setattr(device_augment.paper_step, 'paper_config', lambda *args: common.override(
      common.get_paper_config('B/32', 'softmax_tc', 'c=1,runlocal=True'), {'batch_size': 8}))
  out = tmp_path / 'device_augment.json'
  assert device_augment.main(['--rounds', '1', '--steps', '1', '--warmup', '1',
                              '--out', str(out)]) == 0
  record = json.loads(out.read_text())
  step, *augment = record['rows']
  assert step['arch'] == 'mu/32' and step['step_ms'] > 0
  assert [a['augmentation'] for a in augment] == [
      'flip|randaug(2, 10)|value_range|onehot', 'flip|randaug(2, 20)|value_range|onehot']
  for a in augment:
    assert a['images'] == 8
    assert a['share'] == pytest.approx(a['augment_ms'] / step['step_ms'], abs=1e-3)
    assert a['target'] == 0.05 and isinstance(a['meets_target'], bool)
  assert record['machine']['commit']
