"""Atomic file writes: a reader (or a killed run) sees the old file or the new one, never half."""
import json
import os
import tempfile


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def write_bytes(path: str, data: bytes) -> None:
  """Writes `data` to a temporary file beside `path`, fsyncs it, then renames it over `path`.

  The file gets the usual permissions (0666 less the umask), not mkstemp's owner-only 0600.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + '.', suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_text(path: str, text: str) -> None:
  """Atomically writes `text` (UTF-8)."""
  write_bytes(path, text.encode('utf-8'))


def write_json(path: str, payload) -> None:
  """Atomically writes `payload` as indented JSON."""
  write_text(path, json.dumps(payload, indent=1, sort_keys=True) + '\n')
