"""Settings of every test session, applied before any test module imports jax.

Most of the suite's time is XLA:CPU compiling small functions. Without LLVM optimisation and the
fusion emitters it compiles them 5-10x faster (a small MoE layer's init: 2.4-3.8 s -> 0.3-0.4 s)
while the compiled code runs about 2.5x slower (the tiny training step: 33 -> 81 ms), a good trade
for tests. Every comparison in a test runs both sides under the same flags, and subprocesses that
tests start inherit them. Benchmarks run as scripts (bench/*.py) and do not see them.
"""
import os

FAST_COMPILE_XLA_FLAGS = ('--xla_backend_optimization_level=0 '
                          '--xla_llvm_disable_expensive_passes=true '
                          '--xla_cpu_use_fusion_emitters=false')
os.environ['XLA_FLAGS'] = f'{os.environ.get("XLA_FLAGS", "")} {FAST_COMPILE_XLA_FLAGS}'.strip()
