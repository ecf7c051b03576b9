"""Settings of every test session, applied before any test module imports jax.

Most of the suite's time is XLA:CPU compiling small functions, so tests run under the fast-compile
flags (base/fast_compile.py), a good trade for tests. Every comparison in a test runs both sides
under the same flags, and subprocesses that tests start inherit them. Benchmarks run as their own
processes (python -m bench.NAME) and do not see them.
"""
import os

from base import fast_compile

os.environ['XLA_FLAGS'] = f'{os.environ.get("XLA_FLAGS", "")} {fast_compile.as_xla_flags()}'.strip()
