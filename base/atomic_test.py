"""Tests of atomic writes."""
import json
import os

import pytest

from base import atomic
from base import errors
from testing import full_disk


def test_write_json_round_trips_and_leaves_no_temporary_files(tmp_path):
  path = tmp_path / 'sub' / 'summary.json'
  atomic.write_json(str(path), {'b': 1, 'a': [1.5]})
  atomic.write_json(str(path), {'b': 2})
  assert json.loads(path.read_text()) == {'b': 2}
  assert os.listdir(path.parent) == ['summary.json']


def test_a_failed_write_keeps_the_old_file(tmp_path):
  path = tmp_path / 'summary.json'
  atomic.write_json(str(path), {'ok': True})
  with pytest.raises(TypeError):
    atomic.write_json(str(path), {'bad': object()})
  assert json.loads(path.read_text()) == {'ok': True}
  assert os.listdir(tmp_path) == ['summary.json']


@pytest.mark.parametrize('umask,mode', [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_get_the_umask_derived_mode_not_owner_only(tmp_path, umask, mode):
  # 0666 less the umask, as open() gives: 0666 & ~022 = 0644, & ~002 = 0664, & ~077 = 0600.
  old = os.umask(umask)
  try:
    atomic.write_bytes(str(tmp_path / 'figure.png'), b'\x89PNG')
  finally:
    os.umask(old)
  assert (tmp_path / 'figure.png').read_bytes() == b'\x89PNG'
  assert (tmp_path / 'figure.png').stat().st_mode & 0o777 == mode


def test_writing_a_stream_that_fails_midway_keeps_the_old_file(tmp_path):
  path = tmp_path / 'labels.npy'
  with atomic.writing(str(path)) as f:
    f.write(b'old')
  with pytest.raises(RuntimeError):
    with atomic.writing(str(path)) as f:
      f.write(b'half of the new')
      raise RuntimeError('killed')
  assert path.read_bytes() == b'old' and os.listdir(tmp_path) == ['labels.npy']


def test_a_full_disk_keeps_the_old_file_and_leaves_no_temporary_files(tmp_path, monkeypatch):
  # The writer of summary.json, config.json and the data caches beside a data set.
  disk = tmp_path / 'disk'
  with full_disk.small_disk(disk, 256 * 1024) as kind:
    path = disk / 'summary.json'
    atomic.write_json(str(path), {'ok': True})
    if kind == full_disk.TMPFS:
      full_disk.fill(disk)
    else:       # Where the disk fills up on some file systems: when the data is flushed.
      monkeypatch.setattr(atomic.os, 'fsync', lambda fd: (_ for _ in ()).throw(full_disk.enospc()))
    with pytest.raises(OSError) as error:
      atomic.write_json(str(path), {'ok': False, 'padding': 'x' * 100_000})
    assert errors.is_disk_full(error.value)
    assert json.loads(path.read_text()) == {'ok': True}
    filler = ['filler'] if kind == full_disk.TMPFS else []
    assert sorted(os.listdir(disk)) == sorted(['summary.json'] + filler)
