"""A small file system to fill up, for the tests of a full disk (ENOSPC).

`small_disk(path, size)` mounts a tmpfs of `size` bytes at `path` when this process may mount
(root, as in the project's container) and yields 'tmpfs'; otherwise it yields 'simulated', warns
(so the session's summary says which of the two a test did), and the test raises ENOSPC at the
writer itself, as each test describes. `fill(path)` then takes all the file system's free space.
"""
import contextlib
import errno
import os
import subprocess
import warnings

TMPFS, SIMULATED = 'tmpfs', 'simulated'


@contextlib.contextmanager
def small_disk(path, size: int):
  """Yields TMPFS with a tmpfs of `size` bytes mounted at `path` (unmounted after), or SIMULATED
  with `path` an ordinary directory where mounting is not allowed."""
  os.makedirs(path, exist_ok=True)
  mounted = os.geteuid() == 0 and subprocess.run(
      ['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(path)],
      capture_output=True, check=False).returncode == 0
  if not mounted:
    warnings.warn(f'cannot mount a tmpfs at {path} (not root, or no mount): this test simulates '
                  'ENOSPC at the writer instead of filling a real file system.')
    yield SIMULATED
    return
  try:
    yield TMPFS
  finally:
    subprocess.run(['umount', '--lazy', str(path)], check=True)


def fill(path) -> None:
  """Writes PATH/filler until the file system holding `path` has no space left."""
  chunk = b'\0' * 65536
  with open(os.path.join(path, 'filler'), 'ab', buffering=0) as f:
    try:
      while f.write(chunk):
        pass
    except OSError as e:
      if e.errno != errno.ENOSPC:
        raise


def enospc(path: str = '') -> OSError:
  """The OSError a write to a full disk raises."""
  return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
