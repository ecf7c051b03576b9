"""Evaluation during training: upstream precision@1 with router health, and few-shot transfer.

`make(config, model, mesh)` returns evaluate(params, step, is_last) -> {metric name: float}:
  upstream/prec@1, upstream/loss   on config.data.eval_split, every eval.every_steps and at the end;
  router/BLOCK/...                 the routers' health on those eval batches (mean over batches;
                                   the padding rows of the last batch take part in routing);
  fewshot/DATASET/Kshot[_cv][_std] every fewshot.every_steps and at the end (evaluation.fewshot).
Every batch is a whole number of routing groups (configs.validation checks eval.batch_size and
fewshot.batch_size), so evaluation routes exactly as training does.
"""
import functools

import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from data import ops
from data import pipeline
from data import sources
from evaluation import classify
from evaluation import fewshot
from vmoe import sharding
from vmoe import train_step



def fewshot_data_config(config, name: str) -> ml_collections.ConfigDict:
  """The data config of few-shot dataset `name`: config.fewshot's directories, or config.data's
  when `name` is also the training set."""
  same = name == config.data.name
  train_split, test_split = config.fewshot.datasets[name]
  return ml_collections.ConfigDict({
      'name': name,
      'data_dir': config.data.data_dir if same else config.fewshot.data_dir,
      'manual_dir': config.data.manual_dir if same else config.fewshot.manual_dirs.get(name),
      'files': None, 'file_format': None,
      'cache': True if same and config.data.cache else False,
      'train_split': train_split, 'eval_split': test_split,
      'pp_train': config.fewshot.pp, 'pp_eval': config.fewshot.pp,
  })


def check_available(config) -> None:
  """Fails before anything compiles when a few-shot set is missing, saying how to obtain it."""
  try:
    ops.build(config.fewshot.pp)
  except ValueError as e:
    raise ValueError(f'fewshot.pp: {e}') from None
  for name in config.fewshot.datasets:
    data_config = fewshot_data_config(config, name)
    source, release = sources.get_source(name)
    try:
      source.check(data_config, release, [data_config.train_split, data_config.eval_split])
    except (ValueError, FileNotFoundError) as e:
      raise type(e)(f'few-shot dataset {name!r}: {e}\n(For a few-shot set the directory keys are '
                    f'config.fewshot.data_dir and config.fewshot.manual_dirs.{name}.)') from None


def due(config, step: int, is_last: bool) -> bool:
  """Whether anything is evaluated after `step`."""
  return is_last or step % config.eval.every_steps == 0 or _fewshot_due(config, step, is_last)


def _fewshot_due(config, step: int, is_last: bool) -> bool:
  return bool(config.fewshot.datasets) and (is_last or step % config.fewshot.every_steps == 0)


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


def make(config, model, mesh):
  """evaluate(params, step, is_last) -> dict of float metrics (see the module docstring)."""
  batch_sharding = sharding.batch_sharding(mesh)

  @jax.jit
  def forward(params, images):
    logits, aux = model.apply({'params': params}, images, train=False)
    return logits, aux['pre_logits'], train_step.router_summary(aux['router'])

  def upstream(params) -> dict:
    router_sums, num_batches = {}, 0

    def predict(images):
      nonlocal router_sums, num_batches
      logits, _, router = forward(params, images)
      router_sums = jax.tree.map(lambda a, b: a + b, router_sums, router) if router_sums else router
      num_batches += 1
      return logits

    batches = pipeline.make_eval_iterator(
        config.data, config.data.eval_split, batch_size=config.eval.batch_size,
        process_index=jax.process_index(), process_count=jax.process_count())
    global_batches = (sharding.put_batch(b, batch_sharding) for b in batches)
    results = dict(classify.ClassifyEvaluator(config.loss).run(predict, global_batches))
    for key, total in jax.device_get(router_sums).items():
      results[key] = float(total) / num_batches
    return results

  def fewshot_results(params) -> dict:
    features = whole_batch_fn(lambda images: forward(params, images)[1], mesh)
    evaluator = fewshot.FewShotEvaluator(
        {name: _fewshot_data(config, name) for name in config.fewshot.datasets},
        shots=tuple(config.fewshot.shots), seeds=config.fewshot.seeds,
        l2_grid=tuple(2.0 ** np.arange(config.fewshot.l2_grid_min_log2,
                                       config.fewshot.l2_grid_max_log2 + 1)))
    return dict(evaluator.run(features))

  def evaluate(params, step: int, is_last: bool) -> dict:
    results = {}
    if is_last or step % config.eval.every_steps == 0:
      results.update(upstream(params))
    if _fewshot_due(config, step, is_last):
      results.update(fewshot_results(params))
    return {k: float(v) for k, v in results.items()}

  return evaluate


def _fewshot_data(config, name: str) -> fewshot.FewShotData:
  data_config = fewshot_data_config(config, name)
  pp, batch_size = config.fewshot.pp, config.fewshot.batch_size
  return fewshot.FewShotData(
      train_batches=functools.partial(_shots, data_config, pp, batch_size),
      test_batches=lambda: pipeline.make_eval_iterator(
          data_config, data_config.eval_split, batch_size=batch_size, pp=pp))


def _shots(data_config, pp: str, batch_size: int, shots: int, seed: int):
  return pipeline.fewshot_batches(data_config, data_config.train_split, shots=shots, seed=seed,
                                  pp=pp, batch_size=batch_size)
