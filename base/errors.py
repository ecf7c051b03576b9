"""The one exception type for errors a user causes and can fix.

`main.py` (vmoe/run/cli.py) and the argparse tools (`run_tool`) catch `UserError` and print its
message alone (no traceback) with exit status 2, so the message must say what to change. Anything
else is a bug and keeps its traceback. A leaf module: it imports nothing of the project, so any
package may raise it.

A full disk is a user error too: `disk_full_is_user_error` turns one into a UserError that names
the directory and what to free.
"""
import contextlib
import errno
import os
import sys
from typing import Callable

USER_ERROR_STATUS = 2   # As for a usage error (argparse, absl's UsageError).


class UserError(ValueError):
  """A bad config, flag, workdir or input that the user can fix; the message says how.

  A `ValueError` so code and tests that predate it and catch `ValueError` keep working.
  """


def run_tool(main: Callable[[], int]) -> int:
  """An argparse tool's main() -> its exit status; a UserError is one 'Error: ...' line on
  stderr and USER_ERROR_STATUS."""
  try:
    return main()
  except UserError as e:
    sys.stderr.write(f'Error: {e}\n')
    return USER_ERROR_STATUS


class MissingInput(UserError, FileNotFoundError):
  """A data set or file the user must provide is not there; the message says how to get it.

  Also a `FileNotFoundError`, what such errors were before this type existed.
  """


# The OS's text for ENOSPC, which TensorStore (orbax's array writer) quotes in the ValueError it
# raises for a failed write, with no errno attached.
NO_SPACE = os.strerror(errno.ENOSPC)


def is_disk_full(error: BaseException) -> bool:
  """Whether `error`, or an error it was raised from or while handling, is a full disk (ENOSPC)."""
  while error is not None:
    if (isinstance(error, OSError) and error.errno == errno.ENOSPC) or NO_SPACE in str(error):
      return True
    error = error.__cause__ or error.__context__
  return False


@contextlib.contextmanager
def disk_full_is_user_error(directory: str, doing: str, advice: Callable[[], str]):
  """Turns a full disk under the block into one UserError: 'No space left on the disk of
  DIRECTORY while DOING. ADVICE()' (advice is computed then: what is intact, what to free). A full
  disk is the user's to fix, not a bug to show a traceback for."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-exception-caught  (re-raised unless ENOSPC)
    if isinstance(e, UserError) or not is_disk_full(e):    # A UserError already says it.
      raise
    raise UserError(f'No space left on the disk of {directory} while {doing}. {advice()}') from e
