"""Device peaks by kind and dtype, and the MFU's arithmetic, hand-worked."""
import pytest

from bench import peaks


@pytest.mark.parametrize('kind, dtype, peak', [
    ('NVIDIA H100 80GB HBM3', 'float32', 494.5), ('NVIDIA H200', 'bfloat16', 989.5),
    ('NVIDIA A100-SXM4-80GB', 'float32', 156.0), ('TPU v4', 'bfloat16', 275.0),
    ('cpu', 'float32', None), ('NVIDIA H100 80GB HBM3', 'float16', None)])
def test_peak_by_kind_and_dtype(kind, dtype, peak):
  assert peaks.peak_tflops(kind, dtype) == peak


def test_mfu_hand_worked():
  # 1e10 FLOPs an image x 4e4 images/s over 8 devices: 5e13 FLOP/s a device, over 500 TFLOP/s.
  assert peaks.mfu(1e10, 4e4, 8, 500.0) == pytest.approx(0.1, rel=1e-12)
  assert peaks.mfu(1e10, 4e4, 8, None) is None
