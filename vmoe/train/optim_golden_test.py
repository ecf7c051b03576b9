"""The schedule and the optimizer against V-MoE's own code (testing/goldens/lr_schedule.py,
testing/goldens/optimizer.py)."""
import jax.numpy as jnp
import numpy as np
import optax

from configs import common
from testing import goldens
from testing.goldens import optimizer as optimizer_golden
from vmoe.train import optim
from vmoe.train import optim_config

# float32's unit roundoff.
U32 = 2.0**-24


def test_schedule_equals_v_moes_warmup_linear_decay():
  g = goldens.load('lr_schedule')
  for run in range(3):
    peak, total = float(g[f'run{run}_peak']), int(g[f'run{run}_total_steps'])
    schedule = optim.make_schedule(
        optim_config.ScheduleConfig(peak_lr=peak, warmup_steps=int(g['warmup_steps']),
                             end_lr=float(g['end_value'])), total)
    ours = np.array([schedule(int(step)) for step in g[f'run{run}_steps']], np.float32)
    # Both sides are optax's linear schedules in float32: the fraction count / steps, its
    # complement, the product with (init - end) and the sum with end each round once, so each
    # side is within 4 u peak of the exact value (u = 2^-24; every term is at most peak), and
    # the two within 8 u peak. One step off in the warm-up moves step 9,999 by peak / 10^4.
    np.testing.assert_allclose(ours, g[f'run{run}_lr'], rtol=0, atol=8 * U32 * peak,
                               err_msg=f'peak {peak}, {total} steps')


def _flat(tree: dict, prefix: str = '') -> dict:
  """{'a': {'b': x}} -> {'a/b': x}, the inverse of optimizer_golden.nest."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}/'))
    else:
      flat[f'{prefix}{key}'] = np.asarray(value)
  return flat


def test_ten_adam_steps_equal_v_moes_optimizer():
  g = goldens.load('optimizer')
  # The paper configs' optimizer section (configs/common.py), against V-MoE's i21k values.
  section = common.get_paper_config('B/32', 'softmax_tc').optimizer
  opt = optim_config.OptimizerConfig(**section)
  steps = int(g['total_steps'])
  tx, schedule = optim.make_optimizer(
      opt, optim_config.ScheduleConfig(peak_lr=float(g['peak']), warmup_steps=int(g['warmup_steps']),
                                end_lr=float(g['end_value'])), steps)
  start = {n.removeprefix('params/'): v for n, v in g.arrays.items()
           if n.startswith('params/')}
  params = optimizer_golden.nest({n: jnp.asarray(v) for n, v in start.items()})
  state = tx.init(params)
  # The bound on the two programs' difference, from the arithmetic of one Adam step:
  # - the global norm sums N squares, so it and every clipped gradient are within (N + 2) u;
  # - the moments are sums of the clipped gradients (and their squares) with weights of one
  #   sign: an error relative to each term, so at most 2 (N + 2) u + 2 t u (the EMA's two
  #   roundings a step) of the sum of |terms|, and by Cauchy-Schwarz that sum over sqrt(v) is
  #   at most A = (1 - b1) / sqrt((1 - b2)(1 - b1^2 / b2)); the bias corrections, the square
  #   root, epsilon and the division add 6 roundings. So Adam's direction d differs by at most
  #   c u A sqrt(1 - b2^t) / (1 - b1^t), c = 2 (N + 2) + 2 t + 6, the decay term wd p by 2 u wd P,
  #   the step (x lr) by one more rounding, and the sum p + step rounds once on each side, 2 u P
  #   (P the largest |parameter|).
  count = sum(v.size for v in start.values())
  b1, b2, wd = opt.b1, opt.b2, opt.weight_decay
  bound_a = (1 - b1) / np.sqrt((1 - b2) * (1 - b1**2 / b2))
  largest = max(float(np.max(np.abs(v))) for name, v in g.arrays.items()
                if name.startswith(('params/', 'after')))
  tolerance = 0.0
  for step in range(10):
    grads = optimizer_golden.nest({name: jnp.asarray(g[f'grads{step}/{name}']) for name in start})
    updates, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, updates)
    t = step + 1
    direction = (2 * (count + 2) + 2 * t + 6) * U32 * bound_a * np.sqrt(1 - b2**t) / (1 - b1**t)
    tolerance += float(schedule(step)) * (direction + 2 * U32 * wd * largest) * (1 + U32)
    tolerance += 2 * U32 * largest
    for name, value in _flat(params).items():
      np.testing.assert_allclose(value, g[f'after{step}/{name}'], rtol=0, atol=tolerance,
                                 err_msg=f'{name} after step {step}')
