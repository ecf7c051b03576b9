"""The input benchmark runs end to end on a few small images (no timing assertions)."""
import json

import pytest

from bench import input_pipeline


def test_tiny_run_writes_its_result(tmp_path, capsys):
  out = tmp_path / 'result.json'
  input_pipeline.main(['--images', '12', '--min-side', '40', '--max-side', '60', '--size', '32',
                       '--batch-size', '4', '--warmup', '1', '--windows', '2',
                       '--window-batches', '1', '--out', str(out)])
  line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert line['benchmark'] == 'input_pipeline' and line['randaug'] > 0 and line['no_randaug'] > 0
  saved = json.loads(out.read_text())
  assert saved['images']['num_images'] == 12
  rows = saved['rows']
  assert "randaug(2, 20, arithmetic='reference')" in rows['randaug']['pp']
  assert "randaug(2, 10, arithmetic='reference')" in rows['rung']['pp']
  assert 'randaug' not in rows['no_randaug']['pp']
  assert set(rows) == {'randaug', 'randaug_device', 'rung', 'rung_device', 'no_randaug',
                       'full_decode', 'floor'}
  for name in ('randaug', 'rung'):
    assert rows[f'{name}_device']['pp'] == rows[name]['pp']
    assert (rows[name]['augment_on'], rows[f'{name}_device']['augment_on']) == ('host', 'device')
  assert 'inception_crop(32)' in rows['rung']['pp']
  assert saved['targets']['per_vcpu_target'] == 450 and saved['targets']['of_floor_target'] == 1.25
  assert isinstance(saved['targets']['meets_targets'], bool)
  assert all(rate > 0 for rate in saved['images_per_second_per_vcpu'].values())
  assert 'jpegs' not in saved['images']
  assert {'cpu_model', 'cpu_flags', 'tensorflow'} <= set(saved['machine'])


@pytest.mark.parametrize('flag', ['--windows=0', '--warmup=-1', '--min-side=600'])
def test_bad_flags_exit_2(flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    input_pipeline.main([flag])
  assert exit_info.value.code == 2 and '--warmup >= 0' in capsys.readouterr().err
