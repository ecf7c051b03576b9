"""Every *_test.py that git tracks is collected by a plain `pytest` from the repository root (the
command `make test` and CI run), so no test file can sit unrun."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tracked_test_files() -> set[str]:
  done = subprocess.run(['git', '-C', REPO, 'ls-files', '*_test.py'], capture_output=True,
                        text=True, check=False)
  if done.returncode != 0:
    pytest.skip('not a git checkout: nothing to compare the collection with')
  return set(done.stdout.split())


def _collected_by_plain_pytest(request) -> set[str]:
  """The files a plain `pytest` in the root collects: this session's own items when it is one
  (no paths given, from the root; every pytest-xdist worker collects them all), else a
  collection-only run of one."""
  config = request.config
  if not config.option.file_or_dir and str(config.rootpath) == REPO:
    return {os.path.relpath(str(item.path), REPO) for item in request.session.items}
  done = subprocess.run([sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:xdist'],
                        cwd=REPO, capture_output=True, text=True, check=False,
                        env={**os.environ, 'PYTEST_ADDOPTS': ''})
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return {line.split('::')[0] for line in done.stdout.splitlines() if '::' in line}


def test_every_tracked_test_file_is_collected(request):
  missing = _tracked_test_files() - _collected_by_plain_pytest(request)
  assert not missing, f'tracked test files that a plain pytest does not collect: {missing}'
