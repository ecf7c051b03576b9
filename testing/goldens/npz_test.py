"""The golden writer: the same arrays give the same bytes, and load reads them back."""
import json
import time

import numpy as np
import pytest

from testing import goldens
from testing.goldens import npz


def _arrays():
  return {'b': np.arange(6, dtype=np.uint8).reshape(2, 3), 'a': np.float32(0.5),
          'c': np.ones((2, 2), np.float64)[:, ::-1]}


def test_the_same_arrays_give_the_same_bytes_at_another_time(monkeypatch):
  first = npz.npz_bytes(_arrays(), {'x': 1}, goldens.META_KEY)
  monkeypatch.setattr(time, 'time', lambda: 2e9)   # Another day: savez would stamp it.
  assert npz.npz_bytes(dict(reversed(_arrays().items())), {'x': 1}, goldens.META_KEY) == first


def test_load_reads_the_arrays_and_the_record(tmp_path):
  meta = {'reference_commits': {'vmoe': 'abc'}, 'patches': ['one']}
  npz.write(goldens.path_of('thing', tmp_path), _arrays(), meta, goldens.META_KEY)
  golden = goldens.load('thing', tmp_path)
  assert golden.meta == meta
  assert set(golden.arrays) == {'a', 'b', 'c'}
  for name, array in _arrays().items():
    np.testing.assert_array_equal(golden[name], array)
    assert golden[name].dtype == array.dtype


def test_the_record_key_and_object_arrays_are_refused():
  with pytest.raises(ValueError, match='reserved'):
    npz.npz_bytes({goldens.META_KEY: np.zeros(1)}, {}, goldens.META_KEY)
  with pytest.raises(ValueError, match='object array'):
    npz.npz_bytes({'x': np.array([json, 1], dtype=object)}, {}, goldens.META_KEY)
