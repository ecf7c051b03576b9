"""Tests of base/revision.py on a throwaway git repository."""
import os
import subprocess

from base import revision


def _git(repo, *args):
  subprocess.run(['git', '-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@t', *args],
                 check=True, capture_output=True)


def test_commit_and_uncommitted_code(tmp_path):
  repo = str(tmp_path)
  _git(repo, 'init', '-q')
  with open(os.path.join(repo, 'a.py'), 'w', encoding='utf-8') as f:
    f.write('x = 1\n')
  _git(repo, 'add', 'a.py')
  _git(repo, 'commit', '-q', '-m', 'one')
  head = subprocess.run(['git', '-C', repo, 'rev-parse', 'HEAD'], capture_output=True, text=True,
                        check=True).stdout.strip()
  assert revision.source_revision(repo) == {'commit': head, 'uncommitted_changes': False}
  # A result file written by a run is data, not code: the tree still counts as committed.
  os.makedirs(os.path.join(repo, 'results'))
  with open(os.path.join(repo, 'results', 'summary.json'), 'w', encoding='utf-8') as f:
    f.write('{}')
  assert revision.source_revision(repo)['uncommitted_changes'] is False
  # An edited module, or a new one, does count.
  with open(os.path.join(repo, 'a.py'), 'a', encoding='utf-8') as f:
    f.write('y = 2\n')
  assert revision.source_revision(repo)['uncommitted_changes'] is True
  _git(repo, 'checkout', '-q', 'a.py')
  with open(os.path.join(repo, 'b.py'), 'w', encoding='utf-8') as f:
    f.write('z = 3\n')
  assert revision.source_revision(repo) == {'commit': head, 'uncommitted_changes': True}


def test_outside_a_checkout(tmp_path):
  assert revision.source_revision(str(tmp_path)) == {'commit': None, 'uncommitted_changes': None}


def test_this_checkout_has_a_commit():
  assert len(revision.source_revision()['commit']) == 40
