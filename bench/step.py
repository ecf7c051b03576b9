"""The trainer's step as bench/train_step.py and bench/paper_step.py time it.

A Stepper parses a config, builds its step as the trainer does (vmoe/train/train_program.py) and
compiles it ahead of time, with the optimizer's update alone beside it. `load` puts a fresh state
and a synthetic batch on the devices, so input is not measured. `measure` times steppers in
interleaved rounds: in each, a stepper gets a fresh state, takes `warmup` untimed steps (the first
on its own is `first_step_ms`: on XLA:CPU it also faults the state's memory in), then `steps`
timed steps and `steps` updates alone; a row's times are medians over rounds.
"""
import functools
import statistics

import jax
import numpy as np

from bench import peaks
from bench import timing
from configs import common
from vmoe.model import sharding
from vmoe.routing import declarations
from vmoe.train import experiment as experiment_lib
from vmoe.train import flops
from vmoe.train import train_program
from vmoe.train import train_step as train_lib

SOFT_MOE = 'soft_moe'   # The router with a target of its own (`add_ratios`).


class Stepper:
  """The compiled step and update of one config, and `fields` describing its row."""

  def __init__(self, config):
    self.experiment = e = experiment_lib.parse(config)
    self.program = train_program.build(e)
    lowered = self.program.lower()
    self.compiled = self.program.compile(lowered=lowered)
    # The optimizer's update alone (the parameters standing in for the gradients): its cost is
    # per parameter, so it weighs on a small per-device batch and on MoE's extra expert weights.
    update = lambda state: train_lib.apply_gradients(self.program.tx, state, state.params)
    shardings = self.program.state_shardings
    self.compiled_update = jax.jit(update, in_shardings=(shardings,), out_shardings=shardings,
                                   donate_argnums=(0,)).lower(self.program.abstract_state).compile()
    router, memory = e.moe.router, self.compiled.memory_analysis()
    per_device_batch = e.batch_size // jax.device_count()
    self.fields = {
        'arch': e.model.variant, 'router': router.name if router else declarations.DENSE,
        'capacity': router.capacity_factor if router else None,
        'softmax_combine': router.softmax_combine if router else True, 'dtype': e.model.dtype,
        'dispatch_dtype': e.moe.dispatch_dtype if router else None,
        'per_device_batch': per_device_batch, 'num_experts': e.moe.num_experts,
        'mesh': dict(self.program.mesh.shape), 'remat': e.model.remat,
        'augment_on': e.data.augment_on,
        'num_params': self.program.num_params(),
        # The whole step's FLOPs before the backend's passes (XLA:GPU's compiled count misses
        # the matmuls cuBLAS runs): vmoe/train/flops.py.
        'flops_per_image': flops.lowered_flops(lowered) / e.batch_size,
        # Arguments and temporaries; the outputs alias the donated state.
        'peak_memory_bytes': int(memory.argument_size_in_bytes + memory.temp_size_in_bytes)}
    self.state = self.batch = None

  def load(self):
    """A fresh state and a synthetic batch (synthetic_batch)."""
    e = self.experiment
    self.state = self.program.init_state(jax.random.PRNGKey(e.seed))
    self.batch = sharding.put_batch(synthetic_batch(self.program), self.program.batch_sharding)

  def unload(self):
    """Drops the state, so that one stepper's state is alive at a time (L/16 on a small host)."""
    self.state = self.batch = None

  def __call__(self):
    self.state, metrics = self.compiled(self.state, self.batch, jax.random.PRNGKey(1))
    return metrics['loss']

  def update(self):
    """The optimizer's update alone, on the loaded state."""
    self.state = self.compiled_update(self.state)
    return self.state.step


def synthetic_batch(program: train_program.TrainProgram) -> dict:
  """A batch of the step's abstract batch: uniform float32 images and random one-hot labels, or
  under data.augment_on = 'device' what the host ships (data/pp/device_split.py): uniform uint8
  images, random label ids and one key per example."""
  rng = np.random.default_rng(0)
  e = program.experiment
  batch = {}
  for key, spec in program.abstract_batch().items():
    if key == 'image' and spec.dtype == np.float32:
      batch[key] = rng.uniform(-1, 1, spec.shape).astype(np.float32)
    elif key == 'image':
      batch[key] = rng.integers(0, 256, spec.shape).astype(np.uint8)
    elif spec.dtype == np.float32:
      # One-hot rows set directly: np.eye(21,843) alone would be a 1.9 GB matrix.
      batch[key] = np.zeros(spec.shape, np.float32)
      batch[key][np.arange(spec.shape[0]), rng.integers(0, spec.shape[1], spec.shape[0])] = 1
    elif spec.dtype == np.uint32:    # Raw keys, as jax.random.PRNGKey makes them.
      batch[key] = np.asarray(jax.vmap(jax.random.PRNGKey)(np.arange(spec.shape[0])))
    else:                            # Label ids (a multi-label list holds one id and padding).
      ids = rng.integers(0, e.model.num_classes, spec.shape[:1]).astype(np.int32)
      batch[key] = ids if len(spec.shape) == 1 else np.concatenate(
          [ids[:, None], np.full((spec.shape[0], spec.shape[1] - 1), -1, np.int32)], axis=1)
  return batch


def one_round(stepper, steps: int, warmup: int) -> dict:
  """One round of one stepper (the module docstring), in ms."""
  stepper.load()
  times = {'first_step_ms': timing.time_ms(stepper, warmup=0, repeats=1),
           'step_ms': timing.time_ms(stepper, warmup=warmup - 1, repeats=steps),
           'update_ms': timing.time_ms(stepper.update, warmup=1, repeats=steps)}
  stepper.unload()
  return times


def row(fields: dict, times: dict) -> dict:
  """A row: the stepper's fields, the medians over rounds of its times, each round's step, the
  images per second of the median step and its MFU (bench/peaks.py; None on a device without a
  listed peak)."""
  median = lambda name: round(statistics.median(times[name]), 3)
  images = fields['per_device_batch'] * jax.device_count()
  images_per_second = images / (median('step_ms') / 1e3)
  peak = peaks.peak_tflops(jax.devices()[0].device_kind, fields['dtype'])
  mfu = peaks.mfu(fields['flops_per_image'], images_per_second, jax.device_count(), peak)
  return {**fields, 'step_ms': median('step_ms'), 'first_step_ms': median('first_step_ms'),
          'update_ms': median('update_ms'), 'round_ms': [round(t, 3) for t in times['step_ms']],
          'images_per_second': round(images_per_second, 3), 'peak_tflops': peak,
          'mfu': None if mfu is None else round(mfu, 4)}


def measure(steppers: list, rounds: int, steps: int, warmup: int) -> list[dict]:
  """The rows of `steppers` timed in interleaved rounds (the module docstring)."""
  timers = [functools.partial(one_round, s, steps, warmup) for s in steppers]
  return [row(s.fields, times)
          for s, times in zip(steppers, timing.interleaved(timers, rounds))]


def add_ratios(rows: list[dict], targets: dict) -> list[dict]:
  """Each MoE row with its step and FLOPs over the dense row of the same arch, dtype and batch
  (when there is one) and, at c = 1 with softmax combine, its target: targets[SOFT_MOE] for Soft
  MoE, targets['sparse'] for the others, each a (ratio's name, bound)."""
  key = lambda r: (r['arch'], r['dtype'], r['per_device_batch'], r.get('augment_on'))
  dense = {key(r): r for r in rows if r['router'] == declarations.DENSE}
  out = []
  for r in rows:
    base = dense.get(key(r))
    if r['router'] == declarations.DENSE or base is None:
      out.append(r)
      continue
    extra = {'vs_dense': round(r['step_ms'] / base['step_ms'], 3),
             'flops_vs_dense': round(r['flops_per_image'] / base['flops_per_image'], 3)}
    if r['router'] == SOFT_MOE:
      extra['vs_flops_scaled_dense'] = round(extra['vs_dense'] / extra['flops_vs_dense'], 3)
    if r['step_ms'] > base['step_ms']:
      # How much of the MoE step's extra time its optimizer update's extra time explains.
      extra['update_share_of_extra'] = round(
          (r['update_ms'] - base['update_ms']) / (r['step_ms'] - base['step_ms']), 3)
    name, bound = targets[SOFT_MOE if r['router'] == SOFT_MOE else 'sparse']
    paper_row = r['capacity'] == 1 and r['softmax_combine']
    extra['target'] = {name: bound} if paper_row else None
    extra['meets_target'] = extra[name] <= bound if paper_row else None
    out.append({**r, **extra})
  return out
