"""The memory and time plan on this process's one CPU device, with a runlocal paper config."""
import jax
import pytest

from configs import common
from launch import plan


@pytest.mark.parametrize('devices,mesh', [(32, (1, 32)), (128, (4, 32)), (8, (1, 8)),
                                          (64, (2, 32)), (12, (3, 4))])
def test_the_expert_axis_takes_as_many_devices_as_experts_allow(devices, mesh):
  assert plan.mesh_shape(devices, 32) == mesh


def test_a_row_counts_the_state_and_the_step():
  # 'mu/32' on 64x64 images (4 patches + class token), E = 32, a batch of 8 images (one group).
  config = common.get_paper_config('B/32', 'softmax_ec', 'c=1,runlocal=True')
  one_cpu = plan.Slice('one CPU', 1, memory_gib=1.0, peak_tflops=1.0)
  row = plan.plan_row(config, one_cpu, jax.devices()[:1])
  assert row['mesh'] == (1, 1) and row['batch_per_device'] == 8
  assert row['param_bytes'] == row['param_bytes_total'] == 4 * row['num_params']
  # Adam's two float32 moments, plus a few scalars (step counts), however optax nests them.
  assert 2 * row['param_bytes'] <= row['optimizer_bytes'] <= 2 * row['param_bytes'] + 64
  # The arguments are the state and the batch (8 images of 64 x 64 x 3 and 21,843 labels).
  batch_bytes = 4 * 8 * (64 * 64 * 3 + 21_843)
  assert row['argument_bytes'] >= row['param_bytes'] + row['optimizer_bytes'] + batch_bytes
  assert row['temp_bytes'] > 0 and row['fits']
  assert row['flops_per_step'] == row['flops_per_device'] > 0
  assert row['ideal_step_seconds'] == pytest.approx(row['flops_per_device'] / 1e12)
  table = plan.to_markdown([row], [row], 'python -m launch.plan', config.num_train_steps)
  assert '| mu/32 | one CPU | 1 x 1 | 8 |' in table and '| softmax_ec |' in table


def test_precision_columns_measure_bfloat16_and_remat_memory():
  # 'mu' on 32 x 32 images in 4 x 4 patches (65 tokens an image), 256 images and E = 4: the
  # blocks' activations are a sizeable part of the peak (at this size most of it is the 21,843
  # classes' logits and their gradients, which neither bfloat16 nor remat touches).
  config = common.get_paper_config('B/32', 'softmax_ec', 'c=1,runlocal=True')
  config = common.override(config, {'model.image_size': 32, 'model.patch_size': 4,
                                    'batch_size': 256, 'moe.num_experts': 4})
  one_cpu = plan.Slice('one CPU', 1, memory_gib=1.0, peak_tflops=1.0)
  row = plan.plan_row(config, one_cpu, jax.devices()[:1], tuple(plan.PRECISIONS))
  peaks = row['precision_peak_bytes']
  assert set(peaks) == {'bf16', 'remat', 'bf16 + remat'}
  assert peaks['bf16'] <= row['peak_bytes'] and peaks['remat'] < row['peak_bytes']
  assert peaks['bf16 + remat'] < peaks['remat']
  table = plan.to_markdown([row], [], 'python -m launch.plan', config.num_train_steps)
  assert '| peak, bf16 | peak, remat | peak, bf16 + remat |' in table
  assert f"| {plan._gib(row['peak_bytes'])} | {plan._gib(peaks['bf16'])} | " in table
