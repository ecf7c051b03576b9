"""Which source a result came from: the commit of this checkout and whether its code had changes
not yet committed.

summary.json and every benchmark result file record both, so that anyone can check out the code
that produced a number. What counts as code: tracked or untracked-but-not-ignored Python files,
Makefiles and requirements files. Result files (summary.json, bench/results/*.json) are data that
runs write while the code stays as committed, so they do not make a tree count as changed.
"""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE_PATHS = ('*.py', 'Makefile', '*/Makefile', 'requirements*.txt', '.ci/*')


def _git(*args: str, repo: str) -> str | None:
  try:
    done = subprocess.run(['git', '-C', repo, *args], capture_output=True, text=True, timeout=30,
                          check=False)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return done.stdout if done.returncode == 0 else None


def source_revision(repo: str = REPO) -> dict:
  """{'commit': the checkout's HEAD, 'uncommitted_changes': whether its code differs from HEAD}
  (both None outside a git checkout, or without git)."""
  commit = _git('rev-parse', 'HEAD', repo=repo)
  if commit is None:
    return {'commit': None, 'uncommitted_changes': None}
  changed = _git('status', '--porcelain', '--', *CODE_PATHS, repo=repo)
  return {'commit': commit.strip(),
          'uncommitted_changes': None if changed is None else bool(changed.strip())}
