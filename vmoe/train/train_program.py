"""A run's training program, built one way: model -> optimizer -> init -> shardings -> step.

`build(experiment)` returns a TrainProgram: what the trainer (vmoe/train/trainer.py) compiles and
runs. The step benchmarks (bench/), the scaling plan (launch/plan.py) and the 8-device test
(vmoe/train/multidevice_test.py) build theirs with it too, so they time, plan and test the very step
the trainer runs. Nothing here starts training or installs signal handlers.
"""
import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from vmoe.model import sharding
from vmoe.model import vit
from vmoe.train import experiment as experiment_lib
from vmoe.train import optim
from vmoe.train import train_step as train_lib


@dataclasses.dataclass(frozen=True)
class TrainProgram:
  """A run's model, optimizer, state layout and jitted step on one mesh.

  init: rng -> a fresh TrainState (unsharded); abstract_state: its shapes (jax.eval_shape);
  state_shardings: where each leaf lives on `mesh`; step: the jitted (state, batch, rng) ->
  (state, metrics), the state donated.
  """
  experiment: experiment_lib.Experiment
  model: vit.VisionTransformer
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  mesh: jax.sharding.Mesh
  init: Callable
  abstract_state: train_lib.TrainState
  state_shardings: train_lib.TrainState
  step: Callable

  @property
  def batch_sharding(self) -> jax.sharding.NamedSharding:
    return sharding.batch_sharding(self.mesh)

  def abstract_batch(self) -> dict:
    """Shapes of one global training batch: 'image' (B, H, W, C) and one-hot 'labels' (B, K); under
    data.augment_on = 'device', what the host ships (data/pp/device_split.py)."""
    e = self.experiment
    tail = e.pp_splits[e.data.pp_train]
    if tail is not None:
      return {key: jax.ShapeDtypeStruct((e.batch_size,) + shape, jnp.dtype(dtype))
              for key, (shape, dtype) in tail.shipped_shapes(e.model.image_shape).items()}
    return {'image': jax.ShapeDtypeStruct((e.batch_size,) + e.model.image_shape, jnp.float32),
            'labels': jax.ShapeDtypeStruct((e.batch_size, e.model.num_classes), jnp.float32)}

  def init_state(self, rng: jax.Array) -> train_lib.TrainState:
    """A fresh state, initialised directly into its shardings."""
    return jax.jit(self.init, out_shardings=self.state_shardings)(rng)

  def lower(self):
    """The step lowered for the abstract state and batch (vmoe/train/flops.py counts its FLOPs)."""
    return self.step.lower(self.abstract_state, self.abstract_batch(), jax.random.PRNGKey(0))

  def compile(self, compiler_options: dict | None = None, lowered=None):
    """The step compiled ahead of time for the abstract state and batch, from `lowered` (the
    result of `lower()`, when the caller counts its FLOPs too) or lowered here."""
    return (lowered or self.lower()).compile(compiler_options)

  def num_params(self) -> int:
    return int(sum(p.size for p in jax.tree.leaves(self.abstract_state.params)))


def build_step(experiment: experiment_lib.Experiment, model, tx, mesh, state_shardings):
  """The training step (the pp's tail under data.augment_on = 'device', then mixup, MoE
  constraints on `mesh`), jitted with its shardings."""
  # Mixup mixes each device's shard on its own (V-MoE's granularity 'device').
  step_fn = train_lib.with_mixup(train_lib.make_train_step(model, tx, experiment.loss),
                                 experiment.mixup_alpha, num_chunks=sharding.batch_shards(mesh))
  tail = experiment.pp_splits[experiment.data.pp_train]
  if tail is not None:
    step_fn = train_lib.with_device_tail(step_fn, tail)
  step_fn = sharding.with_mesh(step_fn, mesh)
  return jax.jit(step_fn, in_shardings=(state_shardings, sharding.batch_sharding(mesh), None),
                 out_shardings=(state_shardings, None), donate_argnums=(0,))


def build(experiment: experiment_lib.Experiment,
          mesh: jax.sharding.Mesh | None = None) -> TrainProgram:
  """The TrainProgram of `experiment` on `mesh` (default: experiment.mesh over all devices)."""
  mesh = sharding.make_mesh(experiment.mesh) if mesh is None else mesh
  model = vit.build_model(experiment.model, experiment.moe)
  tx, schedule = optim.make_optimizer(experiment.optimizer, experiment.schedule,
                                      experiment.num_train_steps)
  init = train_lib.init_fn(model, tx, (experiment.batch_size,) + experiment.model.image_shape)
  abstract_state = jax.eval_shape(init, jax.random.PRNGKey(0))
  state_shardings = sharding.tree_shardings(abstract_state, mesh)
  step = build_step(experiment, model, tx, mesh, state_shardings)
  return TrainProgram(experiment, model, tx, schedule, mesh, init, abstract_state, state_shardings,
                      step)
