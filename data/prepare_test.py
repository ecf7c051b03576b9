"""Tests of the preparation commands: build a source, convert a TFRecord data set in place."""
import numpy as np
import pytest

from data import embedded
from data import pipeline
from data import prepare
from data import sources
from testing.data import data_config


def test_build_prepares_array_record(tmp_path, capsys):
  prepare.main(['build', 'digits', '--data_dir', str(tmp_path)])
  assert 'Prepared digits' in capsys.readouterr().out
  sources.check_available(data_config(data_dir=str(tmp_path)))
  with pytest.raises(ValueError, match='nothing to build'):
    prepare.build('multilabel_records', None, str(tmp_path))


def test_embedded_prepares_the_embedded_sets(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(prepare, 'EMBEDDED', ('digits',))   # Fashion-MNIST: data/embedded_test.py.
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
