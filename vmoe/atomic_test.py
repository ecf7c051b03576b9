"""Tests of atomic writes."""
import json
import os

import pytest

from vmoe import atomic


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


def test_files_get_the_usual_permissions_not_owner_only(tmp_path):
  old = os.umask(0o022)
  try:
    atomic.write_bytes(str(tmp_path / 'figure.png'), b'\x89PNG')
  finally:
    os.umask(old)
  assert (tmp_path / 'figure.png').read_bytes() == b'\x89PNG'
  assert (tmp_path / 'figure.png').stat().st_mode & 0o777 == 0o644     # 0666 less umask 022.
