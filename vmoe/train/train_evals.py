"""The evaluations the trainer runs: upstream precision@1 with router health, and few-shot transfer.

This binds the model, mesh and data to evaluation/ (pure precision@1 and the few-shot ridge, which
know nothing of models or meshes).

`Evaluator(model, mesh, data=, eval_config=, fewshot_config=, loss=, num_steps=, safe_point=)`
runs them; its `evaluate(variables, step)` -> {metric name: float} runs those that its schedule
(EvalSchedule) says are due after `step`:
  upstream/prec@1, upstream/loss   on data.eval_split, every eval.every_steps and at the end;
  NAME/prec@1, NAME/loss           with them, on each of eval.sets that is prepared (one warning
                                   line names each set skipped, and how to prepare it);
  router/BLOCK/...                 the routers' health on those eval batches (mean over batches;
                                   the padding rows of the last batch take part in routing);
  fewshot/DATASET/Kshot[_cv][_std] every fewshot.every_steps and at the end (evaluation.fewshot).
Every batch is a whole number of routing groups (vmoe/train/experiment.py fits or checks
eval.batch_size and fewshot.batch_size), so evaluation routes exactly as training does. safe_point()
is called before every batch, so that a preemption notice can end an evaluation between two batches
(vmoe/run/preemption.py: it raises there).
"""
import dataclasses
import functools
from typing import Callable, Iterable, Iterator

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from base import errors
from data import config as data_config_lib
from data.pp import device_augment
from data.pp import device_split
from data.pp import ops
from data.stream import pipeline
from data.datasets import sources
from evaluation import classify
from evaluation import eval_config
from evaluation import fewshot
from vmoe.model import sharding
from vmoe.train import losses
from vmoe.train import train_step


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
    check_pp(fewshot_config.pp, data)
  except ValueError as e:
    raise errors.UserError(f'fewshot.pp: {e}') from None
  for name, splits in fewshot_config.datasets.items():
    source, release = sources.get_source(name)
    try:
      source.check(fewshot_source(data, fewshot_config, name), release, list(splits))
    except (ValueError, FileNotFoundError) as e:
      raise type(e)(f'few-shot dataset {name!r}: {e}\n(For a few-shot set the directory keys are '
                    f'config.fewshot.data_dir and config.fewshot.manual_dirs.{name}.)') from None


def check_pp(pp: str, data: data_config_lib.DataConfig) -> None:
  """Fails (ValueError) on a pp string that does not build, or whose tail the accelerator cannot
  run under data.augment_on = 'device' (data/pp/device_split.py)."""
  ops.build(pp)
  if data.augment_on == 'device':
    device_split.split(pp)


def on_device_tail(pp: str, data: data_config_lib.DataConfig) -> device_split.Split | None:
  """The tail of an evaluation pp the accelerator runs under data.augment_on = 'device', or None:
  the host ships uint8 images and label ids (data/pp/device_split.py)."""
  return device_split.tail_on_device(pp, data.augment_on)


def eval_set_source(data: data_config_lib.DataConfig,
                    name: str) -> data_config_lib.DataSource:
  """Where an eval.sets source `name` is: the data section's directories (ImageNet-V2 and ReaL
  sit in ImageNet's TFDS data_dir, and ReaL builds from the same validation archive)."""
  return data_config_lib.DataSource(name, data.data_dir, data.manual_dir,
                                    cache=data.cache and name == data.name)


def available_eval_sets(data: data_config_lib.DataConfig,
                        eval_config: eval_config.EvalConfig) -> dict:
  """eval.sets less those not prepared, each skipped with one warning line that says how to
  prepare it; a bad pp string or split fails (a config error, not missing data)."""
  available = {}
  for name, (source_name, split, pp) in eval_config.sets.items():
    try:
      check_pp(pp, data)
    except ValueError as e:
      raise errors.UserError(f'eval.sets.{name} pp: {e}') from None
    source, release = sources.get_source(source_name)
    try:
      source.check(eval_set_source(data, source_name), release, [split])
    except errors.MissingInput as e:
      first_line = str(e).splitlines()[0]
      logging.warning('eval set %s skipped: %s (docs/data.md says how to prepare it).', name,
                      first_line)
      continue
    available[name] = (source_name, split, pp)
  return available


@dataclasses.dataclass(frozen=True)
class EvalSchedule:
  """After which of the steps 1..num_steps each evaluation runs: upstream every `upstream_every`
  steps, few-shot every `fewshot_every` (None: no few-shot sets), and both after the last."""
  num_steps: int
  upstream_every: int
  fewshot_every: int | None

  def upstream_due(self, step: int) -> bool:
    return self._due(step, self.upstream_every)

  def fewshot_due(self, step: int) -> bool:
    return self.fewshot_every is not None and self._due(step, self.fewshot_every)

  def due(self, step: int) -> bool:
    """Whether anything is evaluated after `step` (never after step 0, before any training)."""
    return self.upstream_due(step) or self.fewshot_due(step)

  def _due(self, step: int, every: int) -> bool:
    return 1 <= step <= self.num_steps and (step % every == 0 or step == self.num_steps)


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


class Evaluator:
  """The trainer's evaluations of one experiment's model on its mesh (the module docstring):
  `upstream(variables)` and `fewshot(variables)` run one each, `evaluate(variables, step)` runs
  what `schedule` says is due after `step`. variables: the parameters and the routers' state
  (train_step.model_variables), which evaluation never updates. `loss` names the training loss
  (vmoe/train/losses.py) that upstream/loss reports; safe_point() runs before every batch."""

  def __init__(self, model, mesh, *, data: data_config_lib.DataConfig,
               eval_config: eval_config.EvalConfig, fewshot_config: fewshot.FewShotConfig,
               loss: str, num_steps: int, safe_point: Callable[[], None]):
    self.mesh, self.data, self.eval_config = mesh, data, eval_config
    self.fewshot_config, self.loss, self.safe_point = fewshot_config, loss, safe_point
    self.schedule = EvalSchedule(num_steps, eval_config.every_steps,
                                 fewshot_config.every_steps if fewshot_config.datasets else None)
    self.eval_sets = available_eval_sets(data, eval_config)

    @jax.jit
    def forward(variables, images):
      logits, aux = model.apply(variables, images, train=False)
      return logits, aux['pre_logits'], train_step.router_summary(aux['router'])
    # Under the mesh's axes, so that the model's sharding constraints take effect when it traces.
    self._forward = sharding.with_mesh(forward, mesh)
    self._tails = {}    # (pp, images_only) -> _tail(pp, images_only), built once.

  def _tail(self, pp: str, images_only: bool = False):
    """The jitted function that runs pp's tail on a global batch (images_only: on images), or
    the identity when the host runs the whole pp."""
    if (pp, images_only) not in self._tails:
      tail = on_device_tail(pp, self.data)
      run = device_augment.tail_images if images_only else device_augment.run_tail
      self._tails[pp, images_only] = (lambda batch: batch) if tail is None else jax.jit(
          functools.partial(run, tail))
    return self._tails[pp, images_only]

  def evaluate(self, variables, step: int) -> dict:
    """{metric name: float} of the evaluations due after `step`."""
    results = {}
    if self.schedule.upstream_due(step):
      results.update(self.upstream(variables))
    if self.schedule.fewshot_due(step):
      results.update(self.fewshot(variables))
    return {k: float(v) for k, v in results.items()}

  def upstream(self, variables) -> dict:
    """precision@1 and the loss on data.eval_split, and the routers' health averaged over its
    batches; then precision@1 and the loss on each available set of eval.sets."""
    routers = []    # Each batch's router summary, summed in order below.
    results = self._classify(variables, self.data, self.data.eval_split, self.data.pp_eval,
                             eval_config.UPSTREAM, routers)
    if routers:
      totals = functools.reduce(lambda a, b: jax.tree.map(lambda x, y: x + y, a, b), routers)
      for key, total in jax.device_get(totals).items():
        results[key] = float(total) / len(routers)
    for name, (source_name, split, pp) in self.eval_sets.items():
      results.update(self._classify(variables, eval_set_source(self.data, source_name), split,
                                    pp, name, []))
    return results

  def _classify(self, variables, source, split: str, pp: str, prefix: str, routers: list):
    """'{prefix}/prec@1' and '{prefix}/loss' on `split` of `source`; each batch's router summary
    is appended to `routers`."""
    def predict(images):
      logits, _, router = self._forward(variables, images)
      routers.append(router)
      return logits

    tail = self._tail(pp)
    batches = pipeline.make_eval_iterator(
        source, split, batch_size=self.eval_config.batch_size, pp=pp,
        process_index=jax.process_index(), process_count=jax.process_count(),
        on_device=on_device_tail(pp, self.data) is not None)
    batch_sharding = sharding.batch_sharding(self.mesh)
    global_batches = (tail(sharding.put_batch(b, batch_sharding))
                      for b in _after_safe_points(batches, self.safe_point))
    evaluator = classify.ClassifyEvaluator(losses.get_loss(self.loss), prefix)
    return dict(evaluator.run(predict, global_batches))

  def fewshot(self, variables) -> dict:
    """The few-shot ridge on the model's pre-logits, for every few-shot set (evaluation.fewshot)."""
    tail = self._tail(self.fewshot_config.pp, images_only=True)
    whole_batch_features = whole_batch_fn(
        lambda images: self._forward(variables, tail(images))[1], self.mesh)

    def features(images):
      self.safe_point()
      return whole_batch_features(images)

    config = self.fewshot_config
    evaluator = fewshot.FewShotEvaluator(
        {name: _fewshot_data(self.data, config, name,
                             on_device_tail(config.pp, self.data) is not None)
         for name in config.datasets},
        shots=config.shots, seeds=config.seeds, l2_grid=config.l2_grid)
    return dict(evaluator.run(features))


def _after_safe_points(batches: Iterable, safe_point: Callable[[], None]) -> Iterator:
  for batch in batches:
    safe_point()
    yield batch


def _fewshot_data(data: data_config_lib.DataConfig, fewshot_config: fewshot.FewShotConfig,
                  name: str, on_device: bool) -> fewshot.FewShotData:
  """A few-shot set's batches; on_device, with uint8 images for the accelerator's tail."""
  source = fewshot_source(data, fewshot_config, name)
  train_split, test_split = fewshot_config.datasets[name]
  pp, batch_size = fewshot_config.pp, fewshot_config.batch_size
  return fewshot.FewShotData(
      train_batches=functools.partial(_shots, source, train_split, pp, batch_size, on_device),
      test_batches=lambda: pipeline.make_eval_iterator(
          source, test_split, batch_size=batch_size, pp=pp, on_device=on_device))


def _shots(source: data_config_lib.DataSource, split: str, pp: str, batch_size: int,
           on_device: bool, shots: int, seed: int):
  return pipeline.fewshot_batches(source, split, shots=shots, seed=seed, pp=pp,
                                  batch_size=batch_size, on_device=on_device)
