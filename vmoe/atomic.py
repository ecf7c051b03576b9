"""Atomic file writes: a reader (or a killed run) sees the old file or the new one, never half."""
import json
import os
import tempfile


def write_text(path: str, text: str):
  """Writes `text` to a temporary file beside `path`, fsyncs it, then renames it over `path`."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + '.', suffix='.tmp')
  try:
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_json(path: str, payload) -> None:
  """Atomically writes `payload` as indented JSON."""
  write_text(path, json.dumps(payload, indent=1, sort_keys=True) + '\n')
