"""The optimizer and learning-rate schedule of a config (`config.optimizer`, `config.schedule`)."""
import re

import jax
import optax

from vmoe.train import optim_config

# Weight decay applies to kernels: dense/conv kernels and the experts' stacked kernels (wi, wo).
DECAYED_PARAMS = re.compile(r'(^|/)(kernel|wi|wo)$')


def make_schedule(schedule: optim_config.ScheduleConfig, num_train_steps: int) -> optax.Schedule:
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


def make_optimizer(opt: optim_config.OptimizerConfig, schedule_config: optim_config.ScheduleConfig,
                   num_train_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Global-norm clipping, then Adam with decoupled weight decay on kernels (V-MoE's recipe)."""
  schedule = make_schedule(schedule_config, num_train_steps)
  tx = optax.chain(
      optax.clip_by_global_norm(opt.grad_clip_norm),
      optax.adamw(schedule, b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay, mask=decay_mask))
  return tx, schedule
