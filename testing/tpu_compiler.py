"""What a test that needs XLA:TPU's compiler (launch/tpu_compiler.py) does without it."""
import os

import pytest

from launch import tpu_compiler


def require():
  """Fails under CI (CI is set, as .ci/run does, after `make tpu-compiler` put libtpu in place);
  elsewhere skips: a user's `make install` leaves libtpu out."""
  if not tpu_compiler.available():
    message = tpu_compiler.MISSING
    if os.environ.get('CI'):
      pytest.fail(message)
    pytest.skip(message)
