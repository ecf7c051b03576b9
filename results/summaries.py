"""Runs' summary.json files (written by vmoe/trainer.py at the end of a run), read and grouped.

A run is identified by (arch, dataset, router, capacity, softmax_combine); its seeds are the
repetitions that tables and figures average. Keys a summary may lack (fewshot, fewshot_cv,
eval_history, cost fields) read as None; a file that is not JSON or lacks an identifying key is
reported as a problem rather than stopping the whole report.
"""
import dataclasses
import json
import math
import os
from typing import Callable, Iterable, Sequence

SUMMARY_FILE = 'summary.json'     # vmoe/trainer.py SUMMARY_FILE.
IDENTITY = ('arch', 'dataset', 'router', 'capacity')


@dataclasses.dataclass(frozen=True)
class Run:
  """One finished run: its summary.json and where it was found."""
  path: str
  summary: dict

  @property
  def key(self) -> tuple:
    """(arch, dataset, router, capacity, softmax_combine): the seeds of one key form a row."""
    s = self.summary
    return (s['arch'], s['dataset'], s['router'], float(s['capacity']),
            bool(s.get('softmax_combine', True)))

  @property
  def seed(self) -> int:
    return int(self.summary.get('seed', 0))

  def get(self, *path):
    """The value at summary[path[0]][path[1]]...; None if any level is missing or null."""
    value = self.summary
    for key in path:
      if not isinstance(value, dict) or value.get(key) is None:
        return None
      value = value[key]
    return value

  def device_hours(self) -> float | None:
    """Training device-hours: train_device_seconds (already summed over devices) / 3600."""
    seconds = self.get('train_device_seconds')
    return None if seconds is None else seconds / 3600.0

  def devices(self) -> str | None:
    """'cpu x1', 'TPU v3 x32': the device kind and count the run trained on."""
    kind = self.get('device_kind')
    return None if kind is None else f'{kind} x{self.get("num_devices") or "?"}'


def load_runs(root: str) -> tuple[list[Run], list[str]]:
  """Every summary.json below `root` (recursively, in path order), and a list of problems."""
  if not os.path.isdir(root):
    raise FileNotFoundError(f'--runs {root!r} is not a directory; pass the sweep\'s workdir root.')
  runs, problems = [], []
  for directory, subdirs, files in os.walk(root):
    subdirs.sort()
    if SUMMARY_FILE not in files:
      continue
    path = os.path.join(directory, SUMMARY_FILE)
    try:
      with open(path, encoding='utf-8') as f:
        summary = json.load(f)
    except (OSError, ValueError) as e:
      problems.append(f'{path}: unreadable ({e}); skipped.')
      continue
    missing = [k for k in IDENTITY if not isinstance(summary, dict) or summary.get(k) is None]
    if missing:
      problems.append(f'{path}: lacks {", ".join(missing)}; skipped.')
      continue
    runs.append(Run(path, summary))
  return runs, problems


def group_seeds(runs: Iterable[Run]) -> tuple[dict[tuple, list[Run]], list[str]]:
  """{key: runs sorted by seed}. Two runs of one key and seed (a copied or repeated workdir)
  keep the newer summary, and the older one is reported as a problem."""
  chosen: dict[tuple, dict[int, Run]] = {}
  problems = []
  for run in runs:
    seeds = chosen.setdefault(run.key, {})
    other = seeds.get(run.seed)
    if other is not None:
      newer, older = sorted([run, other], key=lambda r: os.path.getmtime(r.path), reverse=True)
      problems.append(f'{older.path}: same run and seed {run.seed} as {newer.path}; using the '
                      'newer one.')
      run = newer
    seeds[run.seed] = run
  return {key: [seeds[s] for s in sorted(seeds)] for key, seeds in chosen.items()}, problems


@dataclasses.dataclass(frozen=True)
class Stat:
  """Mean and sample standard deviation (ddof=1; 0 for one value) of n values."""
  mean: float
  std: float
  n: int


def stat(values: Sequence[float | None]) -> Stat | None:
  """Stat of the non-None values; None if there are none."""
  present = [float(v) for v in values if v is not None]
  if not present:
    return None
  mean = sum(present) / len(present)
  var = (sum((v - mean) ** 2 for v in present) / (len(present) - 1)) if len(present) > 1 else 0.0
  return Stat(mean, math.sqrt(var), len(present))


def stat_of(runs: Sequence[Run], value: Callable[[Run], float | None]) -> Stat | None:
  """stat() of value(run) over the seeds of one row."""
  return stat([value(r) for r in runs])


def fewshot_columns(runs: Iterable[Run]) -> list[tuple[str, int]]:
  """Every (few-shot dataset, shots) present in the runs, by dataset name then shots."""
  found = set()
  for run in runs:
    for convention in ('fewshot', 'fewshot_cv'):
      for dataset, by_shots in (run.get(convention) or {}).items():
        found.update((dataset, int(k)) for k in by_shots)
  return sorted(found)
