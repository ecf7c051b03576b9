"""Shared fixtures of the data tests."""
import pytest

from data import sources
from testing.data import data_config


@pytest.fixture(scope='session')
def digits_dir(tmp_path_factory) -> str:
  """A TFDS data_dir with sklearn_digits prepared (well under a second)."""
  directory = str(tmp_path_factory.mktemp('tfds_digits'))
  sources.check_available(data_config(data_dir=directory))
  return directory
