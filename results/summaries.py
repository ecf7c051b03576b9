"""Runs' summary.json files (written by vmoe/train/trainer.py at the end of a run), read and
grouped.

A run is identified by (arch, dataset, router, capacity, softmax_combine); its seeds are the
repetitions that tables and figures average. Summaries are read through the trainer's own record,
vmoe.run.run_outputs.RunSummary: keys a summary may lack (fewshot, fewshot_cv, eval_history, cost
fields, resolved_config) read as None; a file that is not JSON or lacks an identifying key is
reported as a problem rather than stopping the whole report, and so are runs of one row whose
resolved configs differ in more than the seed (they are kept out of that row). Configs are
compared as this code resolves them, so a key added between two seeds splits no row.
"""
import dataclasses
import functools
import json
import os
from typing import Callable, Iterable, Sequence

from base import errors
from base import stats
from results import paper
from vmoe.run import run_outputs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



@dataclasses.dataclass(frozen=True)
class Run:
  """One finished run: its summary.json (as read) and where it was found."""
  path: str
  summary: dict

  @property
  def record(self) -> run_outputs.RunSummary:
    """The summary as the trainer's record (ValueError if it lacks an identifying key)."""
    return run_outputs.RunSummary.from_dict(self.summary)

  @property
  def key(self) -> tuple:
    """(arch, dataset, router, capacity, softmax_combine): the seeds of one key form a row."""
    r = self.record
    return (r.arch, r.dataset, r.router, None if r.capacity is None else float(r.capacity),
            bool(r.softmax_combine))

  @property
  def title(self) -> str:
    """The run's row label: 'Soft MoE (c=1)', 'Sinkhorn Token Choice (k=2), no softmax combine';
    a user's router by the title and allocation its summary recorded."""
    r = self.record
    return (paper.row_title(r.router, r.capacity, r.router_title, r.router_allocation)
            + ('' if r.softmax_combine else ', no softmax combine'))

  @property
  def seed(self) -> int:
    return int(self.record.seed)

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
    raise errors.MissingInput(f'--runs {root!r} is not a directory; pass the sweep\'s workdir '
                              'root.')
  runs, problems = [], []
  for directory, subdirs, files in os.walk(root):
    subdirs.sort()
    if run_outputs.SUMMARY_FILE not in files:
      continue
    path = os.path.join(directory, run_outputs.SUMMARY_FILE)
    try:
      with open(path, encoding='utf-8') as f:
        summary = json.load(f)
    except (OSError, ValueError) as e:
      problems.append(f'{path}: unreadable ({e}); skipped.')
      continue
    try:
      run_outputs.RunSummary.from_dict(summary)
    except (TypeError, ValueError) as e:
      problems.append(f'{path}: {e}; skipped.')
      continue
    runs.append(Run(path, summary))
  return runs, problems


def config_differences(a: Run, b: Run) -> list[str]:
  """The resolved-config keys, other than the seed, in which two runs differ ([] when either
  summary predates resolved_config). A key one record lacks counts as its recorded default
  (run_outputs.RECORDED_DEFAULTS, vmoe/train/experiment.py recorded_defaults), so a key added
  between two runs is no difference when its default is the other's value."""
  config_a, config_b = a.record.resolved_config, b.record.resolved_config
  if config_a is None or config_b is None:
    return []
  differ = run_outputs.config_differences(config_a, config_b, recorded_defaults())
  return [k for k in differ if k != 'seed']


@functools.cache
def recorded_defaults() -> dict:
  with open(os.path.join(REPO, run_outputs.RECORDED_DEFAULTS), encoding='utf-8') as f:
    return json.load(f)


def _same_config(runs: list[Run]) -> tuple[list[Run], list[str]]:
  """The runs whose resolved config matches the row's (the first run that records one; runs
  that record none match), and a problem for each other one (kept out)."""
  recorded = [r for r in runs if r.record.resolved_config is not None]
  reference = recorded[0] if recorded else runs[0]
  kept, problems = [], []
  for run in runs:
    differences = config_differences(reference, run)
    if differences:
      problems.append(f'{run.path}: same row as {reference.path} but its config differs in '
                      f'{", ".join(differences)}; kept out of that row (give it its own sweep '
                      'root, or rerun it with the row\'s config).')
    else:
      kept.append(run)
  return kept, problems


def group_seeds(runs: Iterable[Run]) -> tuple[dict[tuple, list[Run]], list[str]]:
  """{key: runs sorted by seed}. Runs of one key whose resolved configs differ in more than the
  seed are not averaged: the row keeps those that match its first recorded config (in path
  order) and the others are reported as problems. Two runs of one key and seed (a copied or repeated
  workdir) keep the newer summary, and the older one is reported as a problem."""
  by_key: dict[tuple, list[Run]] = {}
  for run in runs:
    by_key.setdefault(run.key, []).append(run)
  chosen: dict[tuple, dict[int, Run]] = {}
  problems = []
  for key, key_runs in by_key.items():
    kept, differ = _same_config(key_runs)
    problems += differ
    for run in kept:
      _add_seed(chosen.setdefault(key, {}), run, problems)
  return {key: [seeds[s] for s in sorted(seeds)] for key, seeds in chosen.items()}, problems


def _add_seed(seeds: dict[int, Run], run: Run, problems: list[str]) -> None:
  """Adds `run` to its row's {seed: run}, the newer of two summaries of one seed winning."""
  other = seeds.get(run.seed)
  if other is not None:
    newer, older = sorted([run, other], key=lambda r: os.path.getmtime(r.path), reverse=True)
    problems.append(f'{older.path}: same run and seed {run.seed} as {newer.path}; using the '
                    'newer one.')
    run = newer
  seeds[run.seed] = run


def stat_of(runs: Sequence[Run], value: Callable[[Run], float | None]) -> stats.Stat | None:
  """stats.stat() of value(run) over the seeds of one row."""
  return stats.stat([value(r) for r in runs])


def fewshot_columns(runs: Iterable[Run]) -> list[tuple[str, int]]:
  """Every (few-shot dataset, shots) present in the runs, by dataset name then shots."""
  found = set()
  for run in runs:
    for convention in ('fewshot', 'fewshot_cv'):
      for dataset, by_shots in (run.get(convention) or {}).items():
        found.update((dataset, int(k)) for k in by_shots)
  return sorted(found)
