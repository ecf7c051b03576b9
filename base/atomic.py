"""Atomic file writes: a reader (or a killed run) sees the old file or the new one, never half."""
import contextlib
import json
import os
import secrets
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def writing(path: str) -> Iterator[BinaryIO]:
  """Yields a binary file beside `path`; on a clean exit fsyncs it and renames it over `path`.

  The file is created with mode 0666 less the umask, as open() would create `path` itself (not
  mkstemp's or NamedTemporaryFile's owner-only 0600: other users of a shared data_dir must be able
  to read a label index or a decoded split). If the block raises, the temporary file is removed
  and `path` keeps its old contents.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  tmp = os.path.join(directory, f'{os.path.basename(path)}.{secrets.token_hex(8)}.tmp')
  # O_EXCL: never write into a file someone else made; the kernel applies the umask to 0o666.
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
  try:
    with os.fdopen(fd, 'wb') as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_bytes(path: str, data: bytes) -> None:
  """Atomically writes `data`."""
  with writing(path) as f:
    f.write(data)


def write_text(path: str, text: str) -> None:
  """Atomically writes `text` (UTF-8)."""
  write_bytes(path, text.encode('utf-8'))


def write_json(path: str, payload) -> None:
  """Atomically writes `payload` as indented JSON."""
  write_text(path, json.dumps(payload, indent=1, sort_keys=True) + '\n')
