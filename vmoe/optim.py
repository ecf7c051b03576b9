"""The optimizer and learning-rate schedule of a config (`config.optimizer`, `config.schedule`)."""
import re

import jax
import optax

# Weight decay applies to kernels: dense/conv kernels and the experts' stacked kernels (wi, wo).
DECAYED_PARAMS = re.compile(r'(^|/)(kernel|wi|wo)$')


def make_schedule(schedule, num_train_steps: int) -> optax.Schedule:
  """Linear warm-up from 0 to peak_lr over warmup_steps, then linear decay to end_lr at the end."""
  if not 0 <= schedule.warmup_steps < num_train_steps:
    raise ValueError(f'schedule.warmup_steps={schedule.warmup_steps} must be in '
                     f'[0, num_train_steps={num_train_steps}); lower it or train longer.')
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


def make_optimizer(config) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Global-norm clipping, then Adam with decoupled weight decay on kernels (V-MoE's recipe)."""
  opt = config.optimizer
  schedule = make_schedule(config.schedule, config.num_train_steps)
  tx = optax.chain(
      optax.clip_by_global_norm(opt.grad_clip_norm),
      optax.adamw(schedule, b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay, mask=decay_mask))
  return tx, schedule
