"""What a run prints on stdout: a header, progress (observability.Progress), evaluations, a summary.

Everything else (libraries' INFO logs, the metric writers' lines) goes to the log file
(vmoe/run/run_log.py). Each line printed is also recorded in that log, so the log tells the whole
story; with --verbose the log reaches stderr too, so these lines show twice there.
"""
from absl import logging
import jax

from evaluation import fewshot
from vmoe.run import run_log
from vmoe.run import run_outputs


def say(line: str) -> str:
  """Prints `line` on stdout and records it in the log; returns it."""
  logging.info('%s', line)
  print(line, flush=True)
  return line


def header(experiment, *, config_file: str, mesh: jax.sharding.Mesh, num_params: int,
           flops_per_step: float, workdir: str, first_step: int) -> list[str]:
  """The run's identity, size and place, once compiled: two lines. `experiment` is the run's
  vmoe.train.experiment.Experiment (not imported here: the training loop sits above this
  package)."""
  e, router = experiment, experiment.moe.router
  capacity = '' if router is None else f' c={router.capacity_factor:g}'
  platform = mesh.devices.flat[0].platform
  axes = ' x '.join(f'{axis}={size}' for axis, size in mesh.shape.items())
  start = f'resumed from step {first_step}' if first_step else 'fresh start'
  return [f'{config_file}:{e.config_arg} | {e.model.variant} | router {e.router_name}{capacity} '
          f'| {mesh.devices.size} {platform} device(s), mesh {axes}',
          f'{num_params:,} parameters | {flops_per_step:.3g} FLOPs per step | {start} | workdir '
          f'{workdir} (library logs: {run_log.LOG_FILE})']


def _results(prec1: float | None, fewshot_table: dict | None) -> list[str]:
  """'prec@1 P' and '10-shot: NAME A, ...' per shot count, from summary.json's fewshot shape
  ({dataset: {'10': accuracy}}), where present."""
  parts = [] if prec1 is None else [f'prec@1 {prec1:.4f}']
  by_shots = {}
  for name, accuracies in sorted((fewshot_table or {}).items()):
    for shots, accuracy in accuracies.items():
      by_shots.setdefault(int(shots), []).append(f'{name} {accuracy:.4f}')
  return parts + [f'{shots}-shot: {", ".join(items)}' for shots, items in sorted(by_shots.items())]


def evaluation(step: int, results: dict) -> str:
  """One evaluation's line: upstream precision@1 and loss, best-l2 few-shot accuracies."""
  loss = [f'loss {results["upstream/loss"]:.4f}'] if 'upstream/loss' in results else []
  return ' | '.join([f'eval at step {step}'] + loss + _results(
      results.get('upstream/prec@1'), fewshot.summary_table(results, 'best_l2')))


def final(summary: run_outputs.RunSummary, summary_path: str) -> str:
  """The last line: what the run reached, what it cost, where its summary.json is."""
  cost = (f'{summary.train_device_seconds / 3600:.3g} device-hours '
          f'({summary.num_devices} x {summary.device_kind})')
  return ' | '.join([f'done: {summary.steps} steps'] + _results(summary.upstream_prec1,
                                                                summary.fewshot)
                    + [cost, f'summary: {summary_path}'])
