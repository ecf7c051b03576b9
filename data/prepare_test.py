"""Tests of the preparation commands: build a source, convert a TFRecord data set in place, check
a split's records."""
import shlex

import numpy as np
import pytest

from data.datasets import embedded
from data.datasets import sources
from data import prepare
from data.stream import pipeline
from testing.data import data_config
from testing.data import write_multilabel


def test_build_prepares_array_record(tmp_path, capsys):
  prepare.main(['build', 'digits', '--data_dir', str(tmp_path)])
  assert 'Prepared digits' in capsys.readouterr().out
  sources.check_available(data_config(data_dir=str(tmp_path)))
  with pytest.raises(ValueError, match='nothing to build'):
    prepare.build('multilabel_records', None, str(tmp_path))


def test_embedded_prepares_the_embedded_sets(tmp_path, capsys, monkeypatch):
  # Fashion-MNIST: data/datasets/embedded_test.py.
  monkeypatch.setattr(prepare, 'EMBEDDED', ('digits',))
  prepare.main(['embedded', '--data_dir', str(tmp_path)])
  assert 'Prepared digits.' in capsys.readouterr().out
  assert (tmp_path / 'sklearn_digits' / '1.0.0' / 'dataset_info.json').exists()


def test_convert_makes_a_tfrecord_data_set_readable(tmp_path):
  builder = embedded.SklearnDigits(data_dir=str(tmp_path), file_format='tfrecord')
  builder.download_and_prepare()
  config = data_config(data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match='data.prepare convert'):
    sources.check_available(config)
  assert prepare.convert(builder.data_dir) == 2            # One shard per split.
  assert prepare.convert(builder.data_dir) == 0            # Done: nothing rewritten.
  sources.check_available(config)
  # Same records as TFDS's TFRecord reader gives.
  labels = pipeline.split_labels(config, 'test')
  expected = [int(x['label']) for x in builder.as_dataset('test').as_numpy_iterator()]
  np.testing.assert_array_equal(labels, expected)


def check_args(command: str) -> list[str]:
  """The arguments of prepare.main in a `cd REPO && .venv/bin/python -m data.prepare ...` line."""
  return shlex.split(command.partition(' -m data.prepare ')[2])


def test_check_lists_the_records_that_fail_to_decode(tmp_path, capsys):
  pattern = write_multilabel(tmp_path, 'all', 12, 'tfrecord', num_files=2, corrupt={3, 8})
  config = data_config(name='multilabel_records', files=pattern, file_format='tfrecord')
  assert prepare.main(check_args(sources.check_command(config, 'all'))) == 1
  lines = capsys.readouterr().out.splitlines()
  # Records 3 and 8: the 4th of the first file and the 3rd of the second (6 records per file).
  assert lines[0].startswith(f"multilabel_records '{pattern}' split 'all' record 3 "
                             f"({tmp_path}/all-00000.tfrecord record 3, key 'img3') failed")
  assert lines[1].startswith(f"multilabel_records '{pattern}' split 'all' record 8 "
                             f"({tmp_path}/all-00001.tfrecord record 2, key 'img8') failed")
  assert lines[2:] == ["2 of 12 records of multilabel_records split 'all' fail to decode."]
  # A slice is checked by its own record indices: all[4:] holds records 4..11, 8 is its 4th.
  assert prepare.check(config, 'all[4:]')[0] == 8
  assert [r.split(' (')[0] for r in prepare.check(config, 'all[4:]')[1]] == [
      f"multilabel_records '{pattern}' split 'all[4:]' record 4"]


def test_check_passes_a_clean_split(digits_dir, capsys):
  config = data_config(data_dir=digits_dir)
  assert prepare.main(check_args(sources.check_command(config, 'test'))) == 0
  assert capsys.readouterr().out == "0 of 797 records of digits split 'test' fail to decode.\n"
