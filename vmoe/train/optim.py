"""The optimizer and learning-rate schedule of a config (`config.optimizer`, `config.schedule`)."""
import dataclasses
import re

import jax
import optax

# Weight decay applies to kernels: dense/conv kernels and the experts' stacked kernels (wi, wo).
DECAYED_PARAMS = re.compile(r'(^|/)(kernel|wi|wo)$')


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """`config.optimizer`: Adam (b1, b2) with decoupled weight decay on kernels, after clipping the
  global gradient norm at grad_clip_norm (V-MoE's recipe; configs/common.py builds it)."""
  weight_decay: float
  b1: float = 0.9
  b2: float = 0.999
  grad_clip_norm: float = 1.0

  def __post_init__(self):
    if not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
      raise ValueError(f'optimizer.b1={self.b1} and optimizer.b2={self.b2} must be in [0, 1).')
    if self.weight_decay < 0 or self.grad_clip_norm <= 0:
      raise ValueError(f'optimizer.weight_decay={self.weight_decay} must be >= 0 and '
                       f'optimizer.grad_clip_norm={self.grad_clip_norm} > 0.')


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
  """`config.schedule`: linear warm-up to peak_lr over warmup_steps, linear decay to end_lr."""
  peak_lr: float
  warmup_steps: int
  end_lr: float = 1e-5

  def __post_init__(self):
    if self.peak_lr <= 0 or self.end_lr < 0 or self.warmup_steps < 0:
      raise ValueError(f'schedule: need peak_lr > 0, end_lr >= 0 and warmup_steps >= 0; got '
                       f'{self.peak_lr}, {self.end_lr}, {self.warmup_steps}.')


def make_schedule(schedule: ScheduleConfig, num_train_steps: int) -> optax.Schedule:
  """Linear warm-up from 0 to peak_lr over warmup_steps, then linear decay to end_lr at the end
  (vmoe/train/experiment.py `parse` checked that the warm-up ends before training does)."""
  warmup = optax.linear_schedule(0.0, schedule.peak_lr, schedule.warmup_steps)
  decay = optax.linear_schedule(schedule.peak_lr, schedule.end_lr,
                                num_train_steps - schedule.warmup_steps)
  return optax.join_schedules([warmup, decay], [schedule.warmup_steps])


def decay_mask(params):
  """True for the parameters that get weight decay (see DECAYED_PARAMS)."""
  def is_decayed(path, _):
    name = '/'.join(str(getattr(k, 'key', k)) for k in path)
    return bool(DECAYED_PARAMS.search(name))
  return jax.tree_util.tree_map_with_path(is_decayed, params)


def make_optimizer(opt: OptimizerConfig, schedule_config: ScheduleConfig, num_train_steps: int
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Global-norm clipping, then Adam with decoupled weight decay on kernels (V-MoE's recipe)."""
  schedule = make_schedule(schedule_config, num_train_steps)
  tx = optax.chain(
      optax.clip_by_global_norm(opt.grad_clip_norm),
      optax.adamw(schedule, b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay, mask=decay_mask))
  return tx, schedule
