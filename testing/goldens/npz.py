"""A byte-reproducible .npz writer: the same arrays give the same file.

numpy's savez stamps each member with the time of writing, so two runs of the generator would
differ in bytes. Here every member has the zip epoch's date, the members are sorted by name, and
each array is written with numpy's own .npy format (np.load reads the file as any .npz).
"""
import io
import json
import zipfile

import numpy as np

from base import atomic

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def npz_bytes(arrays: dict[str, np.ndarray], meta: dict, meta_key: str) -> bytes:
  """The .npz file of `arrays` and `meta` (stored as JSON text under `meta_key`)."""
  if meta_key in arrays:
    raise ValueError(f'{meta_key!r} is reserved for the record')
  members = {**arrays, meta_key: np.array(json.dumps(meta, indent=1, sort_keys=True))}
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, 'w') as archive:
    for name in sorted(members):
      array = np.asarray(members[name])
      if array.dtype == object:
        raise ValueError(f'{name!r} is an object array: a golden holds plain arrays only')
      npy = io.BytesIO()
      np.lib.format.write_array(npy, array.copy(order='C'), allow_pickle=False)
      info = zipfile.ZipInfo(f'{name}.npy', date_time=ZIP_EPOCH)
      info.compress_type = zipfile.ZIP_DEFLATED
      info.external_attr = 0o644 << 16
      archive.writestr(info, npy.getvalue(), compresslevel=9)
  return buffer.getvalue()


def write(path, arrays: dict[str, np.ndarray], meta: dict, meta_key: str) -> None:
  """Writes npz_bytes atomically to `path`."""
  atomic.write_bytes(str(path), npz_bytes(arrays, meta, meta_key))
