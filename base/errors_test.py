"""Tests of a full disk as a user error."""
import errno

import pytest

from base import errors
from testing import full_disk


def test_a_full_disk_is_recognised_through_the_chain_and_in_tensorstore_text():
  assert errors.is_disk_full(full_disk.enospc('/x'))
  # TensorStore's error for a failed write (orbax's array writer): a ValueError quoting the OS.
  assert errors.is_disk_full(ValueError('RESOURCE_EXHAUSTED: Failed to write 132153 bytes to file '
                                        "14: No space left on device [os_error_code='28']"))
  try:
    try:
      raise full_disk.enospc()
    except OSError as e:
      raise RuntimeError('save failed') from e
  except RuntimeError as e:
    assert errors.is_disk_full(e)
  assert not errors.is_disk_full(OSError(errno.EACCES, 'Permission denied'))


def test_a_full_disk_under_the_block_is_one_user_error_naming_the_directory():
  with pytest.raises(errors.UserError, match=r'^No space left on the disk of /ckpt while saving '
                                             r'a checkpoint\. Free 1 MiB\.$') as error:
    with errors.disk_full_is_user_error('/ckpt', 'saving a checkpoint', lambda: 'Free 1 MiB.'):
      raise full_disk.enospc('/ckpt/1')
  assert isinstance(error.value.__cause__, OSError)
  with pytest.raises(KeyError):            # Anything else passes through.
    with errors.disk_full_is_user_error('/ckpt', 'saving', lambda: ''):
      raise KeyError('x')
  with pytest.raises(errors.UserError, match='^already said$'):   # As does a UserError.
    with errors.disk_full_is_user_error('/ckpt', 'saving', lambda: ''):
      raise errors.UserError('already said') from full_disk.enospc()


def test_run_tool_reports_a_user_error_in_one_line_with_status_2(capsys):
  def main():
    raise errors.MissingInput('--runs x is not a directory; pass the sweep\'s workdir root.')
  assert errors.run_tool(main) == errors.USER_ERROR_STATUS == 2
  assert capsys.readouterr().err == ('Error: --runs x is not a directory; pass the sweep\'s '
                                     'workdir root.\n')
  assert errors.run_tool(lambda: 1) == 1
  with pytest.raises(KeyError):        # Anything else is a bug: it keeps its traceback.
    errors.run_tool(lambda: {}['bug'])
