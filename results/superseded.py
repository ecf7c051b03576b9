"""Rows of a study that a later fix superseded: their runs trained with a bug, and reruns at the
fixed commit replace them.

A study's runs directory may hold `superseded.json`, a list of {"router", "capacity", "reason",
"rerun"} objects (rerun: where the fixed runs live). Tables mark those rows with a dagger and a
note, claims.md marks every verdict that compares one of them, and the figures draw them hollow.
The committed summaries themselves stay as they were written.
"""
import json
import os
import re

from base import errors
from results import summaries

FILE = 'superseded.json'
MARK = '\u2020'   # The dagger beside a superseded row.


def load(runs_dir: str) -> dict[tuple[str, float], str]:
  """{(router, capacity): 'reason; rerun: PATH'} from RUNS_DIR/superseded.json ({} without)."""
  return {key: f'{reason}; rerun: {rerun}' for key, (reason, rerun) in _entries(runs_dir).items()}


def reruns(runs_dir: str) -> dict[tuple[str, float], str]:
  """{(router, capacity): the directory of its reruns, as superseded.json names it}."""
  return {key: rerun for key, (_, rerun) in _entries(runs_dir).items()}


def _entries(runs_dir: str) -> dict[tuple[str, float], tuple[str, str]]:
  """{(router, capacity): (reason, rerun)} of RUNS_DIR/superseded.json ({} without)."""
  path = os.path.join(runs_dir, FILE)
  if not os.path.exists(path):
    return {}
  try:
    with open(path, encoding='utf-8') as f:
      entries = json.load(f)
    return {(e['router'], float(e['capacity'])): (e['reason'], e['rerun']) for e in entries}
  except (ValueError, KeyError, TypeError) as e:
    raise errors.UserError(f'{path} is not a list of {{"router", "capacity", "reason", '
                           f'"rerun"}} objects ({e!r}); fix or remove it.') from None


def involved(superseded: dict, detail: str, capacity: float | None) -> list[str]:
  """The superseded rows that a verdict's detail names (router names as words), at its capacity
  (any capacity for a verdict across capacities, whose detail names its c)."""
  words = set(re.findall(r'\w+', detail))
  return [f'{router} c={c:g}' for (router, c) in sorted(superseded)
          if router in words and (capacity is None or capacity == c or f'c={c:g}' in detail)]


def load_reruns(runs_dir: str) -> dict[tuple[str, float], tuple[str, list]]:
  """{(router, capacity): (the reruns' directory, their runs of that row)} for each superseded
  row (directories relative to the repository, as superseded.json names them)."""
  found = {}
  for key, path in reruns(runs_dir).items():
    directory = os.path.join(summaries.REPO, path)
    runs, _ = summaries.load_runs(directory)
    found[key] = (directory, [r for r in runs if (r.key[2], r.key[3]) == key and r.key[4]])
  return found
