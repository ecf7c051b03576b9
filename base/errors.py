"""The one exception type for errors a user causes and can fix.

`main.py` catches `UserError` and prints its message alone (no traceback) with exit status 2, so
the message must say what to change. Anything else is a bug and keeps its traceback. A leaf
module: it imports nothing of the project, so any package may raise it.
"""


class UserError(ValueError):
  """A bad config, flag, workdir or input that the user can fix; the message says how.

  A `ValueError` so code and tests that predate it and catch `ValueError` keep working.
  """


class MissingInput(UserError, FileNotFoundError):
  """A data set or file the user must provide is not there; the message says how to get it.

  Also a `FileNotFoundError`, what such errors were before this type existed.
  """
