"""Tests of the split cache: label index and decoded arrays saved beside the data, and reused;
a full disk loses none of them."""
import os

import numpy as np

from base import atomic
from testing import full_disk
from data.stream import split_cache
from testing.data import data_config

DECODE = ('decode(channels=1)',)


def test_decoded_split_is_saved_and_reused(tmp_path):
  source = data_config(data_dir=str(tmp_path), cache=True).source
  first = split_cache.decoded(source, 'test[:40]', DECODE)
  stored, = (tmp_path / 'sklearn_digits' / '1.0.0').glob('decoded-test__40_-decode*.npz')
  with np.load(stored) as arrays:
    assert arrays['image'].shape[0] == 40 and arrays['label'].shape == (40,)
    edited = {k: v for k, v in arrays.items()}
  # A later process loads the file instead of decoding: clear the memo and edit the file.
  split_cache.decoded.cache_clear()
  edited['image'] = np.zeros_like(edited['image'])
  np.savez(stored, **edited)
  again = split_cache.decoded(source, 'test[:40]', DECODE)
  np.testing.assert_array_equal(again['label'], first['label'])
  assert (again['image'] == 0).all() and not (first['image'] == 0).all()
  # A file that does not match the split (another version of it) is decoded again.
  split_cache.decoded.cache_clear()
  np.savez(stored, image=edited['image'][:3], label=edited['label'][:3])
  redone = split_cache.decoded(source, 'test[:40]', DECODE)
  assert sorted(redone) == sorted(first)
  for key in first:
    np.testing.assert_array_equal(redone[key], first[key])


def test_label_index_is_saved_and_reused(tmp_path):
  source = data_config(data_dir=str(tmp_path)).source
  labels = split_cache.labels(source, 'test[:100]')
  index = tmp_path / 'sklearn_digits' / '1.0.0' / 'labels-test__100_.npy'   # [ and : replaced
  np.testing.assert_array_equal(np.load(index), labels)
  # A later process reads the file: stand in for it by clearing the memo and editing the file.
  split_cache.labels.cache_clear()
  np.save(index, np.full(100, 7))
  assert set(split_cache.labels(source, 'test[:100]')) == {7}


def test_saved_label_index_and_decoded_split_are_readable_by_other_users(tmp_path):
  """A shared data_dir: what one user saves, another loads. Files get 0666 less the umask (0644
  under 022), not a temporary file's owner-only 0600."""
  source = data_config(data_dir=str(tmp_path), cache=True).source
  old = os.umask(0o022)
  try:
    split_cache.labels(source, 'test[:30]')
    split_cache.decoded(source, 'test[:30]', DECODE)
  finally:
    os.umask(old)
  version_dir = tmp_path / 'sklearn_digits' / '1.0.0'
  saved = sorted(version_dir.glob('labels-test__30_*')) + sorted(version_dir.glob('decoded-*'))
  assert len(saved) == 2
  assert [p.stat().st_mode & 0o777 for p in saved] == [0o644, 0o644]
  assert not list(version_dir.glob('*.tmp'))


def test_a_full_disk_keeps_the_decoded_split_in_memory_and_loses_nothing_written(
    tmp_path, monkeypatch):
  # The data_dir on an 8 MiB file system, full once the set and its label index are written
  # (where it cannot be mounted, the writer's flush fails as on a full disk).
  disk = tmp_path / 'disk'
  with full_disk.small_disk(disk, 8 * 2**20) as kind:
    source = data_config(data_dir=str(disk), cache=True).source
    split_cache.labels(source, 'test[:41]')
    version_dir = disk / 'sklearn_digits' / '1.0.0'
    written = {p.name: p.read_bytes() for p in version_dir.iterdir() if p.is_file()}
    if kind == full_disk.TMPFS:
      full_disk.fill(disk)
    else:
      monkeypatch.setattr(atomic.os, 'fsync', lambda fd: (_ for _ in ()).throw(full_disk.enospc()))
    arrays = split_cache.decoded(source, 'test[:41]', DECODE)
    assert arrays['image'].shape[0] == 41           # In memory: the run goes on.
    assert not list(version_dir.glob('decoded-*')) and not list(version_dir.glob('*.tmp'))
    assert {p.name: p.read_bytes() for p in version_dir.iterdir() if p.is_file()} == written
