import pytest

from launch import tpu_compiler
from testing import tpu_compiler as tpu_compiler_check


@pytest.mark.parametrize('ci,outcome', [('true', pytest.fail.Exception),   # .ci/run
                                        ('', pytest.skip.Exception)])      # a user's clone
def test_a_missing_tpu_compiler_fails_under_ci_and_skips_elsewhere(monkeypatch, ci, outcome):
  monkeypatch.setattr(tpu_compiler, 'available', lambda: False)
  monkeypatch.setenv('CI', ci)
  with pytest.raises(outcome, match='run `make tpu-compiler`'):
    tpu_compiler_check.require()
