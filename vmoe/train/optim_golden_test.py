"""The schedule and the optimizer against V-MoE's own code (testing/goldens/lr_schedule.py,
testing/goldens/optimizer.py)."""
import numpy as np

from testing import goldens
from vmoe.train import optim

# float32's unit roundoff.
U32 = 2.0**-24


def test_schedule_equals_v_moes_warmup_linear_decay():
  g = goldens.load('lr_schedule')
  for run in range(3):
    peak, total = float(g[f'run{run}_peak']), int(g[f'run{run}_total_steps'])
    schedule = optim.make_schedule(
        optim.ScheduleConfig(peak_lr=peak, warmup_steps=int(g['warmup_steps']),
                             end_lr=float(g['end_value'])), total)
    ours = np.array([schedule(int(step)) for step in g[f'run{run}_steps']], np.float32)
    # Both sides are optax's linear schedules in float32: the fraction count / steps, its
    # complement, the product with (init - end) and the sum with end each round once, so each
    # side is within 4 u peak of the exact value (u = 2^-24; every term is at most peak), and
    # the two within 8 u peak. One step off in the warm-up moves step 9,999 by peak / 10^4.
    np.testing.assert_allclose(ours, g[f'run{run}_lr'], rtol=0, atol=8 * U32 * peak,
                               err_msg=f'peak {peak}, {total} steps')
