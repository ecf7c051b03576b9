"""Where committed runs came from, for the summaries that do not record it themselves.

A summary written by a recent trainer records its `commit`; older ones record only their CPU
(`cpu_model`, `cpu_flags`). A `provenance.json` in a study's directory fills the gap without
touching the committed summaries: {"<dir relative to the file>": {"commit", "worktree",
"cpu_model", "requirements": {package: version}, "source"}}, one entry per directory of runs
(requirements: requirements.txt at that commit). A run is covered by the entry whose directory
holds its summary; its own `commit`, where recorded, wins.
"""
import functools
import json
import os

from base import errors

FILE = 'provenance.json'
SHORT = 7   # Characters of a commit shown in tables and prose.


@functools.cache
def _entries(path: str) -> dict:
  """{absolute run directory: record} of one provenance file."""
  try:
    with open(path, encoding='utf-8') as f:
      entries = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    return {os.path.normpath(os.path.join(base, d)): dict(e, commit=str(e['commit']))
            for d, e in entries.items()}
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise errors.UserError(f'{path} is not an object of {{"<runs dir>": {{"commit", ...}}}} '
                           f'({e!r}); fix or remove it.') from None


def record(summary_path: str) -> dict | None:
  """The provenance record covering a summary.json (the nearest provenance.json above it whose
  entry holds it), or None."""
  path = os.path.abspath(summary_path)
  directory = os.path.dirname(path)
  while True:
    candidate = os.path.join(directory, FILE)
    if os.path.exists(candidate):
      for root, entry in _entries(candidate).items():
        if path.startswith(root + os.sep):
          return entry
    parent = os.path.dirname(directory)
    if parent == directory:
      return None
    directory = parent


def commit(run) -> str | None:
  """The commit a run (results.summaries.Run) trained at: its summary's, else its provenance
  record's; None if neither says."""
  recorded = run.get('commit')
  if recorded:
    return str(recorded)
  entry = record(run.path)
  return None if entry is None else entry['commit']


def short(commit_hash: str | None) -> str:
  """'5b1f2d7', or 'n/a' for an unknown commit."""
  return 'n/a' if not commit_hash else commit_hash[:SHORT]
