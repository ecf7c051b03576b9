"""The evaluations the trainer runs: upstream precision@1 with router health, and few-shot transfer.

This binds the model, mesh and data to evaluation/ (pure precision@1 and the few-shot ridge, which
know nothing of models or meshes).

`make_evaluator(model, mesh, data=, eval_config=, fewshot_config=, loss=, safe_point=)` returns
evaluate(variables, step, is_last) -> {metric name: float}, at the steps `due_steps` lists:
  upstream/prec@1, upstream/loss   on data.eval_split, every eval.every_steps and at the end;
  router/BLOCK/...                 the routers' health on those eval batches (mean over batches;
                                   the padding rows of the last batch take part in routing);
  fewshot/DATASET/Kshot[_cv][_std] every fewshot.every_steps and at the end (evaluation.fewshot).
Every batch is a whole number of routing groups (vmoe/experiment.py fits or checks eval.batch_size
and fewshot.batch_size), so evaluation routes exactly as training does. safe_point() is called
before every batch, so that a preemption notice can end an evaluation between two batches
(vmoe/preemption.py: it raises there).
"""
import functools
from typing import Callable, Iterable, Iterator

import jax
from jax.experimental import multihost_utils
import numpy as np

from base import errors
from data import config as data_config_lib
from data import ops
from data import pipeline
from data import sources
from evaluation import classify
from evaluation import fewshot
from vmoe import losses
from vmoe import sharding
from vmoe import train_step


def fewshot_source(data: data_config_lib.DataConfig, fewshot_config: fewshot.FewShotConfig,
                   name: str) -> data_config_lib.DataSource:
  """Where few-shot set `name` is: fewshot's directories, or the data section's (and its cache)
  when `name` is also the training set."""
  if name == data.name:
    return data_config_lib.DataSource(name, data.data_dir, data.manual_dir, cache=data.cache)
  return data_config_lib.DataSource(name, fewshot_config.data_dir,
                                    fewshot_config.manual_dirs.get(name))


def check_available(data: data_config_lib.DataConfig,
                    fewshot_config: fewshot.FewShotConfig) -> None:
  """Fails before anything compiles when a few-shot set is missing, saying how to obtain it."""
  try:
    ops.build(fewshot_config.pp)
  except ValueError as e:
    raise errors.UserError(f'fewshot.pp: {e}') from None
  for name, splits in fewshot_config.datasets.items():
    source, release = sources.get_source(name)
    try:
      source.check(fewshot_source(data, fewshot_config, name), release, list(splits))
    except (ValueError, FileNotFoundError) as e:
      raise type(e)(f'few-shot dataset {name!r}: {e}\n(For a few-shot set the directory keys are '
                    f'config.fewshot.data_dir and config.fewshot.manual_dirs.{name}.)') from None


def due_steps(eval_config: classify.EvalConfig, fewshot_config: fewshot.FewShotConfig,
              num_steps: int) -> set[int]:
  """The steps after which something is evaluated: every eval.every_steps, every
  fewshot.every_steps (if there are few-shot sets) and the last."""
  steps = set(range(eval_config.every_steps, num_steps + 1, eval_config.every_steps))
  if fewshot_config.datasets:
    steps.update(range(fewshot_config.every_steps, num_steps + 1, fewshot_config.every_steps))
  return steps | {num_steps}


def _fewshot_due(fewshot_config: fewshot.FewShotConfig, step: int, is_last: bool) -> bool:
  return bool(fewshot_config.datasets) and (is_last or step % fewshot_config.every_steps == 0)


def fewshot_table(results: dict, convention: str) -> dict:
  """{dataset: {'10': accuracy}} of one evaluation's results (summary.json's shape)."""
  return fewshot.summary_table(results, convention)


def whole_batch_fn(fn, mesh):
  """fn over a global batch, applied to a batch every process holds in full (few-shot sets):
  each process feeds its slice, and every process gets all the rows back as numpy."""
  batch_sharding = sharding.batch_sharding(mesh)

  def apply(images: np.ndarray) -> np.ndarray:
    rows = len(images) // jax.process_count()
    local = images[jax.process_index() * rows:(jax.process_index() + 1) * rows]
    out = fn(jax.make_array_from_process_local_data(batch_sharding, local))
    return np.asarray(multihost_utils.process_allgather(out, tiled=True))
  return apply


def make_evaluator(model, mesh, *, data: data_config_lib.DataConfig,
                   eval_config: classify.EvalConfig,
                   fewshot_config: fewshot.FewShotConfig, loss: str,
                   safe_point: Callable[[], None]):
  """evaluate(variables, step, is_last) -> dict of float metrics (see the module docstring); `loss`
  names the training loss (vmoe/losses.py) that upstream/loss reports; safe_point() runs before
  every batch."""
  batch_sharding = sharding.batch_sharding(mesh)

  @jax.jit
  def forward(variables, images):   # variables: train_step.model_variables, routers frozen.
    logits, aux = model.apply(variables, images, train=False)
    return logits, aux['pre_logits'], train_step.router_summary(aux['router'])

  def upstream(variables) -> dict:
    router_sums, num_batches = {}, 0

    def predict(images):
      nonlocal router_sums, num_batches
      logits, _, router = forward(variables, images)
      router_sums = jax.tree.map(lambda a, b: a + b, router_sums, router) if router_sums else router
      num_batches += 1
      return logits

    batches = pipeline.make_eval_iterator(
        data, data.eval_split, batch_size=eval_config.batch_size,
        process_index=jax.process_index(), process_count=jax.process_count())
    global_batches = (sharding.put_batch(b, batch_sharding)
                      for b in _after_safe_points(batches, safe_point))
    evaluator = classify.ClassifyEvaluator(losses.get_loss(loss))
    results = dict(evaluator.run(predict, global_batches))
    for key, total in jax.device_get(router_sums).items():
      results[key] = float(total) / num_batches
    return results

  def fewshot_results(variables) -> dict:
    whole_batch_features = whole_batch_fn(lambda images: forward(variables, images)[1], mesh)

    def features(images):
      safe_point()
      return whole_batch_features(images)

    evaluator = fewshot.FewShotEvaluator(
        {name: _fewshot_data(data, fewshot_config, name) for name in fewshot_config.datasets},
        shots=fewshot_config.shots, seeds=fewshot_config.seeds, l2_grid=fewshot_config.l2_grid)
    return dict(evaluator.run(features))

  def evaluate(variables, step: int, is_last: bool) -> dict:
    results = {}
    if is_last or step % eval_config.every_steps == 0:
      results.update(upstream(variables))
    if _fewshot_due(fewshot_config, step, is_last):
      results.update(fewshot_results(variables))
    return {k: float(v) for k, v in results.items()}

  return evaluate


def _after_safe_points(batches: Iterable, safe_point: Callable[[], None]) -> Iterator:
  for batch in batches:
    safe_point()
    yield batch


def _fewshot_data(data: data_config_lib.DataConfig, fewshot_config: fewshot.FewShotConfig,
                  name: str) -> fewshot.FewShotData:
  source = fewshot_source(data, fewshot_config, name)
  train_split, test_split = fewshot_config.datasets[name]
  pp, batch_size = fewshot_config.pp, fewshot_config.batch_size
  return fewshot.FewShotData(
      train_batches=functools.partial(_shots, source, train_split, pp, batch_size),
      test_batches=lambda: pipeline.make_eval_iterator(
          source, test_split, batch_size=batch_size, pp=pp))


def _shots(source: data_config_lib.DataSource, split: str, pp: str, batch_size: int, shots: int,
           seed: int):
  return pipeline.fewshot_batches(source, split, shots=shots, seed=seed, pp=pp,
                                  batch_size=batch_size)
