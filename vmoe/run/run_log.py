"""Where a run's logs go: libraries' INFO lines to WORKDIR/log.txt, warnings and errors to stderr.

orbax, tfds, jax and clu log at INFO through Python logging, which absl's handler prints to stderr
by default: over a hundred lines for a short run. main.py instead calls, in order:
  hold(verbose)            first: INFO records are kept in memory, warnings still reach stderr;
  to_workdir(workdir)      once the config is valid: the held records and all later ones are
                           appended to WORKDIR/log.txt (log.N.txt for process N > 0), which thus
                           accumulates across resumes;
  native_stderr_to_log()   around the TensorFlow import, whose C++ start-up lines (oneDNN, "All
                           log messages before absl::InitializeLog()") ignore every log level.
verbose (main.py --verbose or VMOE_VERBOSE=1) also copies every record to stderr, as absl's own
--alsologtostderr does. absl's flags keep their meaning: --verbosity sets what is recorded,
--stderrthreshold what reaches stderr. Native INFO lines after start-up (TensorFlow's, XLA's) are
dropped through TF_CPP_MIN_LOG_LEVEL=1 unless the user set it (TF_CPP_MIN_LOG_LEVEL=0 shows them).
"""
import contextlib
import io
import logging as std_logging
import os
import sys

from absl import flags
from absl import logging
import jax

LOG_FILE = 'log.txt'


def _handler() -> logging.PythonHandler:
  return logging.get_absl_handler().python_handler


def hold(verbose: bool) -> None:
  """Keeps INFO records in memory until `to_workdir`; stderr gets warnings and errors (or every
  record when `verbose`). Call after the flags are parsed, before anything logs."""
  if verbose:
    flags.FLAGS.alsologtostderr = True
  else:
    # TensorFlow reads it when it loads, which main.py does after this.
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')
    if not flags.FLAGS['stderrthreshold'].present:
      flags.FLAGS.stderrthreshold = 'warning'
  _handler().setStream(io.StringIO())


def log_path(workdir: str, process_index: int) -> str:
  """Process 0's log is WORKDIR/log.txt; another process's is log.N.txt (workdirs may be shared)."""
  name = LOG_FILE if process_index == 0 else f'log.{process_index}.txt'
  return os.path.join(workdir, name)


def to_workdir(workdir: str) -> str | None:
  """Appends the held records, and from now on every record, to this process's log file in
  `workdir` (made if needed); returns the file's path, or None if `workdir` is not writable:
  records stay held then, and workdir.prepare reports that workdir as the user's error."""
  path = log_path(workdir, jax.process_index())
  try:
    os.makedirs(workdir, exist_ok=True)
    log_file = open(path, 'a', encoding='utf-8')  # pylint: disable=consider-using-with
  except OSError:
    return None
  held = _handler().setStream(log_file)
  if isinstance(held, io.StringIO):
    log_file.write(held.getvalue())
    log_file.flush()
  _REOPEN_AFTER_SHUTDOWN.path = path
  _handler().addFilter(_REOPEN_AFTER_SHUTDOWN)     # Added once: addFilter skips a known filter.
  return path


class _ReopenAfterShutdown(std_logging.Filter):
  """A record that comes after logging's shutdown closed the log file (asyncio reporting, as the
  process exits, a future of a checkpoint save that a full disk failed) reopens the file at
  `path` and goes there: writing to the closed file would print '--- Logging error ---' and a
  traceback to stderr, after a user error's one line."""
  path = ''

  def filter(self, record: std_logging.LogRecord) -> bool:
    handler = _handler()
    if getattr(handler.stream, 'closed', False):
      handler.stream = open(self.path, 'a', encoding='utf-8')  # pylint: disable=consider-using-with
    return True


_REOPEN_AFTER_SHUTDOWN = _ReopenAfterShutdown()


def shows_info() -> bool:
  """Whether INFO records reach the console (verbose, or absl's own flags asked for it)."""
  handler, flag = _handler(), flags.FLAGS
  return (handler.stream in (sys.stderr, sys.__stderr__) or flag['logtostderr'].value
          or flag['alsologtostderr'].value
          or flag['stderrthreshold'].value in ('debug', 'info'))


@contextlib.contextmanager
def native_stderr_to_log():
  """Sends what native code writes to file descriptor 2 into the log file while the block runs;
  Python's own sys.stderr (warnings, tracebacks) still reaches the console.

  A no-op when INFO reaches the console anyway or the log is not a file yet. A native crash inside
  the block leaves its message in the log file.
  """
  log_file = _handler().stream
  if shows_info() or isinstance(log_file, io.StringIO):
    yield
    return
  sys.stderr.flush()
  log_file.flush()
  console = os.dup(2)
  python_stderr = sys.stderr
  sys.stderr = open(console, 'w', encoding='utf-8',  # pylint: disable=consider-using-with
                    closefd=False)
  os.dup2(log_file.fileno(), 2)
  try:
    yield
  finally:
    sys.stderr.flush()
    os.dup2(console, 2)
    os.close(console)
    sys.stderr = python_stderr
