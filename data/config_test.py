"""The data section and the source it reads: checks, and the source as a cache key."""
import dataclasses

import pytest

from data import config as data_config
from testing.data import data_config as digits_config


def test_the_source_identifies_the_records_not_the_splits_or_pp():
  train = digits_config(data_dir='/data', cache=True)
  other = dataclasses.replace(train, train_split='train[:50%]', pp_eval='decode')
  assert train.source == other.source == data_config.DataSource('digits', '/data', cache=True)
  assert hash(train.source) == hash(other.source)
  assert train.source.source == train.source      # A few-shot set is its own source.


@pytest.mark.parametrize('changes,message', [
    ({'num_classes': 0}, 'data.num_classes must be >= 1'),
    ({'shuffle_buffer': 0}, r'data.shuffle_buffer must be >= 1 \(1 keeps the stored order\)'),
    ({'train_images': 0}, 'data.train_images must be >= 1 or None'),
])
def test_bad_values_name_the_key(changes, message):
  with pytest.raises(ValueError, match=message):
    digits_config(**changes)
