"""A watchdog for code that could hang (tests of background threads): when time is up it writes
every thread's Python stack to stderr, so a hang reports which thread waits on what, not just
that time ran out.

Two levels, because a hang can hold the GIL (tf.data's autotuner once held it for tens of seconds
in an iterator's destructor, data/stream/reader.py parallel_calls), and then no Python code runs:
  wait_until      polls a condition from Python; on timeout it dumps the stacks and raises, so the
                  test fails normally and its captured stderr shows the stacks.
  hard_deadline   faulthandler's own C thread, which needs no GIL: if the block is still running
                  after its time, it dumps the stacks to a file descriptor and ends the process
                  with status 1, rather than letting the session hang.
"""
import contextlib
import faulthandler
import sys
import time
from typing import Callable


def dump_all_threads(file=None):
  """Writes every thread's current Python stack to `file` (a file object or descriptor;
  default sys.stderr)."""
  faulthandler.dump_traceback(file=sys.stderr if file is None else file, all_threads=True)


def wait_until(done: Callable[[], bool], seconds: float, what: str, poll: float = 0.02):
  """Returns once done() is true; raises TimeoutError after `seconds`, having dumped every
  thread's stack to stderr. `what` names the awaited event in the message."""
  deadline = time.monotonic() + seconds
  while not done():
    if time.monotonic() > deadline:
      dump_all_threads()
      raise TimeoutError(f'{what} did not happen within {seconds:g} s; the stacks of all '
                         'threads are on stderr.')
    time.sleep(poll)


@contextlib.contextmanager
def hard_deadline(seconds: float, file):
  """Ends the process (status 1) after dumping every thread's stack to `file` if the block runs
  longer than `seconds`. faulthandler keeps one such timer per process: this replaces any other
  (pytest's faulthandler_timeout, unused in this project) for the block's duration."""
  faulthandler.dump_traceback_later(seconds, exit=True, file=file)
  try:
    yield
  finally:
    faulthandler.cancel_dump_traceback_later()
