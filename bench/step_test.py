"""The step benchmarks' rounds, rows and ratios, hand-worked (no timed assertions); a real
Stepper runs in train_step_test and paper_step_test."""
import jax
import pytest

from bench import step

TARGETS = {'sparse': ('vs_dense', 1.15), step.SOFT_MOE: ('vs_flops_scaled_dense', 1.1)}


class CountingStepper:
  """Records what a round does to it."""

  def __init__(self):
    self.log = []
    self.fields = {'router': 'x', 'per_device_batch': 8, 'dtype': 'float32',
                   'flops_per_image': 1e9}

  def load(self):
    self.log.append('load')

  def unload(self):
    self.log.append('unload')

  def __call__(self):
    self.log.append('step')
    return 0

  def update(self):
    self.log.append('update')
    return 0


def test_every_round_warms_its_fresh_state_before_the_timed_steps():
  stepper = CountingStepper()
  rows = step.measure([stepper], rounds=2, steps=3, warmup=2)
  # Each round: a fresh state, 2 untimed steps (the first timed alone), 3 timed, then the update:
  # 1 untimed call and 3 timed.
  one_round = ['load'] + ['step'] * 5 + ['update'] * 4 + ['unload']
  assert stepper.log == one_round * 2
  assert len(rows[0]['round_ms']) == 2 and rows[0]['router'] == 'x'


def row(arch, router, step_ms, flops, update_ms=1.0, capacity=1.0, softmax_combine=True):
  return step.row({'arch': arch, 'router': router, 'dtype': 'float32', 'per_device_batch': 8,
                   'capacity': capacity, 'softmax_combine': softmax_combine,
                   'flops_per_image': flops},
                  {'step_ms': step_ms, 'first_step_ms': [50.0], 'update_ms': [update_ms]})


def test_row_takes_medians_over_rounds():
  dense = row('B/32', 'dense', [10.0, 30.0, 20.0], 1e9)
  # Median 20 ms for 8 images on each device: 400 images/s a device.
  assert (dense['step_ms'], dense['round_ms']) == (20.0, [10.0, 30.0, 20.0])
  assert dense['images_per_second'] == 400.0 * jax.device_count()
  assert (dense['first_step_ms'], dense['update_ms']) == (50.0, 1.0)


def test_row_mfu_against_the_devices_peak(monkeypatch):
  # 400 images/s a device at 1e9 FLOPs an image: 0.4 TFLOP/s, over an A100's 156 TF32 TFLOP/s.
  monkeypatch.setattr(step.jax, 'devices', lambda: [type('D', (), {'device_kind': 'NVIDIA A100'})])
  monkeypatch.setattr(step.jax, 'device_count', lambda: 1)
  dense = row('B/32', 'dense', [20.0], 1e9)
  assert dense['peak_tflops'] == 156.0
  assert dense['mfu'] == round(0.4 / 156.0, 4)


def test_no_mfu_on_a_cpu():
  dense = row('B/32', 'dense', [20.0], 1e9)
  if jax.devices()[0].platform == 'cpu':
    assert (dense['peak_tflops'], dense['mfu']) == (None, None)


def test_ratios_hand_worked():
  rows = [row('B/32', 'dense', [20.0], 1e9, update_ms=4.0),
          row('B/32', 'sinkhorn_ec', [30.0], 1e9, update_ms=7.0),
          row('B/32', 'soft_moe', [25.0], 1.25e9),
          row('B/32', 'sinkhorn_tc', [22.0], 1e9, capacity=2.0),
          row('B/16', 'soft_moe', [25.0], 1e9)]
  dense, sparse, soft, second, lonely = step.add_ratios(rows, TARGETS)
  assert dense == rows[0] and lonely == rows[4]      # No dense B/16 row: no ratio.
  # 30 / 20 = 1.5 > 1.15; its update took 3 ms of the 10 ms more: 30% of the extra.
  assert (sparse['vs_dense'], sparse['flops_vs_dense'], sparse['update_share_of_extra']) == (
      1.5, 1.0, 0.3)
  assert (sparse['target'], sparse['meets_target']) == ({'vs_dense': 1.15}, False)
  # Soft MoE: 25 / 20 = 1.25 at 1.25x the FLOPs, 1.0 of the FLOPs-scaled dense step.
  assert (soft['vs_dense'], soft['flops_vs_dense'], soft['vs_flops_scaled_dense']) == (
      1.25, 1.25, 1.0)
  assert (soft['target'], soft['meets_target']) == ({'vs_flops_scaled_dense': 1.1}, True)
  # Targets apply at c = 1 only.
  assert (second['vs_dense'], second['target'], second['meets_target']) == (1.1, None, None)


def test_no_target_without_softmax_combine():
  rows = [row('XS/7', 'dense', [10.0], 1e6),
          row('XS/7', 'sinkhorn_tc', [15.0], 1e6, softmax_combine=False)]
  ablation = step.add_ratios(rows, TARGETS)[1]
  assert (ablation['vs_dense'], ablation['target'], ablation['meets_target']) == (1.5, None, None)
  assert 'update_share_of_extra' in ablation and ablation['update_share_of_extra'] == 0.0


@pytest.mark.parametrize('router', ['sinkhorn_ec', 'soft_moe'])
def test_a_faster_moe_step_has_no_update_share(router):
  rows = [row('B/32', 'dense', [20.0], 1e9), row('B/32', router, [19.0], 1e9)]
  assert 'update_share_of_extra' not in step.add_ratios(rows, TARGETS)[1]
