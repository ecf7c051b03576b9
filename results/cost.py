"""Training cost two ways: the wall-clock a run measured, and a controlled cost from one benchmark.

Wall-clock device-hours (summary.json `train_device_seconds` / 3600) are what a run really took,
but runs made at different times on a shared machine are not comparable: a run repeated on a
quieter afternoon looks cheaper. The controlled cost removes that: every router's step time is
measured in one interleaved run of bench/train_step.py (all models of the grid timed round-robin,
so a slow stretch hits them alike), and

    controlled device-hours = step_ms(router, capacity, softmax_combine) x steps x devices / 3.6e6

with step_ms the median over the benchmark's processes of each process's median step. It covers
only runs of the benchmarked config (its `arch`, the tiny config's XS/7); other runs get None.
"""
import dataclasses
import json
import os
import statistics
from typing import Callable

from results.summaries import Run

DEFAULT_STEP_TIMES = os.path.join('bench', 'results', 'train_step.json')
MS_PER_HOUR = 3.6e6


def step_key(router: str, capacity, softmax_combine: bool = True) -> tuple:
  """The key of one benchmarked model; the dense ViT has no capacity."""
  return (router, None if capacity is None else float(capacity), bool(softmax_combine))


@dataclasses.dataclass(frozen=True)
class StepTimes:
  """One bench/train_step.py result, read once: the file, its benchmarked arch (None when the
  file does not exist), {step_key: median step_ms over the benchmark's processes} and
  {step_key: each process's step_ms, in the file's order} (the process-to-process spread)."""
  path: str
  arch: str | None
  times: dict[tuple, float]
  per_process: dict[tuple, list[float]] = dataclasses.field(default_factory=dict)

  def controlled_hours(self, run: Run) -> float | None:
    """The run's controlled device-hours, or None if the benchmark did not time its model."""
    if self.arch is None or run.get('arch') != self.arch:
      return None
    step_ms = self.times.get(step_key(*run.key[2:]))
    steps = run.get('steps')
    if step_ms is None or steps is None:
      return None
    return step_ms * steps * (run.get('num_devices') or 1) / MS_PER_HOUR

  def pricing(self) -> tuple[Callable[[Run], float | None], str]:
    """(cost(run), its title): controlled device-hours for runs of the benchmarked arch,
    wall-clock device-hours for the others (one arch per table, so a table never mixes the
    two)."""
    if not self.times:
      return Run.device_hours, 'wall-clock device-hours'

    def price(run: Run) -> float | None:
      if run.get('arch') == self.arch:
        return self.controlled_hours(run)
      return run.device_hours()
    return price, (f'controlled device-hours for {self.arch} ({self.path}: step_ms x steps), '
                   'wall-clock device-hours for other archs')

  def axis_label(self, runs) -> str:
    """The cost axis' label for `runs` priced by `pricing`."""
    archs = {run.get('arch') for run in runs}
    if self.times and archs == {self.arch}:
      return 'controlled training device-hours (bench step time x steps)'
    if self.times and self.arch in archs:
      return f'training device-hours (controlled for {self.arch}, wall-clock for others)'
    return 'wall-clock training device-hours'


def load_step_times(path: str) -> StepTimes:
  """The StepTimes of a bench/train_step.py result; empty (arch None) when the file does not
  exist."""
  if not os.path.exists(path):
    return StepTimes(path, None, {})
  with open(path, encoding='utf-8') as f:
    result = json.load(f)
  per_model: dict[tuple, list[float]] = {}
  for run in result.get('runs', [result]):
    for row in run['rows']:
      key = step_key(row['router'], row['capacity'], row.get('softmax_combine', True))
      per_model.setdefault(key, []).append(row['step_ms'])
  return StepTimes(path, result.get('arch'),
                   {k: statistics.median(v) for k, v in per_model.items()}, per_model)


def add_step_times_flag(parser) -> None:
  """--step-times: the benchmark result that prices runs (for tables, claims and figures)."""
  parser.add_argument('--step-times', default=DEFAULT_STEP_TIMES,
                      help='bench/train_step.py result for the controlled cost (results/cost.py).')


def step_times_beside(directory: str) -> StepTimes | None:
  """The bench/train_step.py result kept beside a set of runs (the first train_step*.json in
  directory, by name): the step times of the code those runs trained with; None without one."""
  found = sorted(n for n in os.listdir(directory) if n.startswith('train_step')
                 and n.endswith('.json'))
  return load_step_times(os.path.join(directory, found[0])) if found else None


def rerun_pricing(directory: str, default: Callable[[Run], float | None]
                  ) -> Callable[[Run], float | None]:
  """cost(run) for reruns in directory: controlled device-hours from their own step benchmark
  where one is kept beside them (step_times_beside), else `default` (the study's pricing)."""
  step_times = step_times_beside(directory)
  return default if step_times is None else step_times.controlled_hours
