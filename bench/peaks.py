"""A device's peak matmul FLOP/s, for the model FLOPs utilisation (MFU) of a benchmark's row.

Dense (not 2:4-sparse) peaks from the vendors' data sheets, per JAX device. A float32 model's
matmuls run at JAX's default precision: TF32 on NVIDIA Ampere and Hopper (jax-ml/jax#18934), bf16
passes on TPU, so a float32 row is judged against that peak; a bfloat16 row against the bf16 peak.
Keys are matched as substrings of `jax.devices()[0].device_kind`; a device not listed (a CPU) has
no MFU.
"""

# device kind substring -> {model dtype: peak TFLOP/s of one JAX device}.
PEAK_TFLOPS = {
    # H100 SXM and H200 (same SM count and clocks): 989.5 dense BF16, 494.5 dense TF32.
    'H100': {'float32': 494.5, 'bfloat16': 989.5},
    'H200': {'float32': 494.5, 'bfloat16': 989.5},
    # A100 (SXM and PCIe): 312 dense BF16, 156 dense TF32.
    'A100': {'float32': 156.0, 'bfloat16': 312.0},
    # TPU v4: 275 bf16 TFLOP/s a chip, one JAX device a chip (megacore).
    'TPU v4': {'float32': 275.0, 'bfloat16': 275.0},
    # TPU v5p: 459 bf16 TFLOP/s a chip.
    'TPU v5p': {'float32': 459.0, 'bfloat16': 459.0},
}


def peak_tflops(device_kind: str, dtype: str) -> float | None:
  """The peak of one device of `device_kind` for a model of `dtype`; None when not listed."""
  for key, peaks in PEAK_TFLOPS.items():
    if key in device_kind:
      return peaks.get(dtype)
  return None


def mfu(flops_per_image: float, images_per_second: float, devices: int,
        peak: float | None) -> float | None:
  """Model FLOPs per second per device over the device's peak (`peak` TFLOP/s); None without one."""
  if peak is None:
    return None
  return flops_per_image * images_per_second / devices / (peak * 1e12)
