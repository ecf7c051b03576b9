"""Shared fixtures of the data tests."""
import pytest

from data.datasets import sources
from testing.data import MULTILABEL_PP
from testing.data import data_config
from testing.data import write_multilabel


@pytest.fixture(scope='session')
def digits_dir(tmp_path_factory) -> str:
  """A TFDS data_dir with sklearn_digits prepared (well under a second)."""
  directory = str(tmp_path_factory.mktemp('tfds_digits'))
  sources.check_available(data_config(data_dir=directory))
  return directory


@pytest.fixture(scope='session')
def multilabel(tmp_path_factory):
  """A data config over 41 multi-label TFRecords (train) and 10 (val) with 8 classes."""
  directory = tmp_path_factory.mktemp('records')
  write_multilabel(directory, 'train', 41, 'tfrecord', num_files=3)
  write_multilabel(directory, 'val', 10, 'tfrecord', num_files=1)
  return data_config(name='multilabel_records', files=str(directory / '{split}-*.tfrecord'),
                     file_format='tfrecord', num_classes=8, train_split='train',
                     eval_split='val', pp_train=MULTILABEL_PP, pp_eval=MULTILABEL_PP,
                     shuffle_buffer=1000)
