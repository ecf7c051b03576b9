"""Golden: V-MoE's learning-rate schedule as the paper configs and the rung build it.

configs/vmoe_paper/pretrain_imagenet21k.py and the rung's common.py set
`learning_rate = {'schedule': 'warmup_linear_decay', 'peak_value': P, 'end_value': 1e-5,
'warmup_steps': 10_000}`, and vmoe/train/optimizer.py `create_optimizer` passes the run's
step count as `total_steps`. The schedule is read at the first steps, around the end of the
warm-up, in the middle and at the last steps.
"""
import numpy as np

REFERENCE = 'vmoe/train/schedule.py create_learning_rate_schedule (warmup_linear_decay)'

WARMUP_STEPS = 10_000
END_VALUE = 1e-5
# (peak, total steps): the i21k configs (B/32 and B/16 at 8e-4, L/16 at 4e-4) over
# ceil(300 * 14,094,722 / 4096) steps, and the ImageNet-1k rung (3e-3 over
# ceil(300 * 1,268,355 / 8192) steps).
RUNS = ((8e-4, 1_032_329), (4e-4, 1_032_329), (3e-3, 46_449))


def steps_read(total: int) -> np.ndarray:
  """The steps the golden reads: first, warm-up boundary, middle, last and one past."""
  warm = WARMUP_STEPS
  middle = (warm + total) // 2
  return np.array([0, 1, 2, warm // 2, warm - 2, warm - 1, warm, warm + 1, warm + 2,
                   middle - 1, middle, middle + 1, total - 2, total - 1, total, total + 1],
                  np.int64)


def generate(context) -> dict:
  schedule = context.module('vmoe.train.schedule', 'vmoe')
  arrays = {}
  for i, (peak, total) in enumerate(RUNS):
    fn = schedule.create_learning_rate_schedule(
        schedule='warmup_linear_decay', total_steps=total, peak_value=peak,
        end_value=END_VALUE, warmup_steps=WARMUP_STEPS)
    steps = steps_read(total)
    arrays[f'run{i}_peak'] = np.float64(peak)
    arrays[f'run{i}_total_steps'] = np.int64(total)
    arrays[f'run{i}_steps'] = steps
    arrays[f'run{i}_lr'] = np.array([np.asarray(fn(int(s))) for s in steps], np.float32)
  arrays['warmup_steps'] = np.int64(WARMUP_STEPS)
  arrays['end_value'] = np.float64(END_VALUE)
  return arrays
