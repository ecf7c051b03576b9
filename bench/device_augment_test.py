"""The device-augmentation benchmark on a shrunk config (no timed assertions)."""
import json

import pytest

from bench import device_augment
from configs import common

STAND_IN_PP = ("decode(channels=3)|resize(64)|flip_lr|randaug(2, 10, arithmetic='reference')|"
               f'value_range(-1, 1)|{common.labels_pp(21_843)}')


def test_the_magnitude_is_set_and_the_other_arguments_kept():
  with_magnitude = device_augment._with_magnitude   # pylint: disable=protected-access
  assert with_magnitude(STAND_IN_PP, 20).split('|')[3] == "randaug(2, 20, arithmetic='reference')"
  assert with_magnitude('flip_lr|randaug(2, 10)', 20) == 'flip_lr|randaug(2, 20)'


def test_rows_on_a_runlocal_config(tmp_path, monkeypatch):
  # The paper configs' runlocal shrink ('mu/32' on 64 x 64 images) stands in for S/32 at 224 px,
  # with RandAugment in its training pp as the rung has it.
  def paper_config(*args, augment_on='host', overrides=None):
    del args
    return common.override(common.get_paper_config('B/32', 'softmax_tc', 'c=1,runlocal=True'), {
        'batch_size': 8, 'data.augment_on': augment_on, 'data.pp_train': STAND_IN_PP,
        **(overrides or {})})
  monkeypatch.setattr(device_augment.paper_step, 'paper_config', paper_config)
  out = tmp_path / 'device_augment.json'
  assert device_augment.main(['--rounds', '1', '--steps', '1', '--warmup', '1',
                              '--out', str(out)]) == 0
  record = json.loads(out.read_text())
  step, *augment = record['rows']
  assert step['arch'] == 'mu/32' and step['step_ms'] > 0 and step['augment_on'] == 'host'
  assert [a['tail'].split('|')[:2] for a in augment] == [
      ['flip_lr', "randaug(2, 10, arithmetic='reference')"],
      ['flip_lr', "randaug(2, 20, arithmetic='reference')"]]
  for a in augment:
    assert a['images'] == 8 and a['augment_on'] == 'device' and a['step_ms'] > 0
    assert a['share'] == pytest.approx(a['augment_ms'] / step['step_ms'], abs=1e-3)
    assert a['step_share'] == pytest.approx(a['step_ms'] / step['step_ms'] - 1, abs=1e-3)
    assert a['target'] == 0.05 and isinstance(a['meets_target'], bool)
    assert len(a['round_ms']) == len(a['augment_round_ms']) == len(step['round_ms']) == 1
  assert record['machine']['commit']
