"""Build-time image checks: decode each image once, store what the pipeline's `decode` reads.

`clean(data)` decodes one encoded image with Pillow and returns the bytes to store:
  an RGB or grayscale JPEG   its own bytes, unchanged (no second lossy encoding);
  anything else decodable    re-encoded as an RGB JPEG: CMYK JPEGs and PNG, GIF (first frame),
                             BMP or WebP data under a .JPEG name, as TFDS's imagenet2012 builder
                             does for its CMYK and PNG files;
  empty or undecodable       None and the reason: the builder skips the member and lists it.
Pillow and TensorFlow's decode_image (the pp op `decode`) both decode JPEG with libjpeg and refuse
the same truncated, empty and foreign data; `python -m data.prepare check` re-decodes a prepared
split with TensorFlow itself.

`clean_all` runs `clean` over a stream in worker threads, in order, with a bounded number of
chunks in flight, so that a 1.3 TB archive is never held in memory; it logs each skipped or
re-encoded image and lists it for the build's metadata. Threads, not processes: Pillow
releases the GIL while it decodes and encodes, which is nearly all of the work, and threads need
no pickling of the images and no second TensorFlow import per worker.
"""
import collections
import concurrent.futures
import io
import itertools
from typing import Iterable, Iterator

from absl import logging
from PIL import Image

CHUNK = 16             # Images per task given to a worker thread.
IN_FLIGHT = 4          # Tasks queued per worker: the stream runs at most this far ahead.
REENCODE_QUALITY = 100  # As TFDS's imagenet2012 builder re-encodes its CMYK and PNG images.
# Keys of a build's metadata: [{'name', 'reason'}] of the images left out, and of those re-encoded.
SKIPPED = 'skipped_images'
REENCODED = 'reencoded_images'
_STORED_AS_IS = {('JPEG', 'RGB'), ('JPEG', 'L')}   # What decode(channels=1 or 3) reads directly.


def clean(data: bytes) -> tuple[bytes | None, str]:
  """(bytes to store, note): note is '' for an image stored unchanged, what was converted for a
  re-encoded one, and why for a skipped one (bytes None)."""
  if not data:
    return None, 'empty file'
  try:
    with Image.open(io.BytesIO(data)) as image:
      image.load()      # Decodes every scan: a truncated file fails here, not at open.
      kind = (image.format, image.mode)
      if kind in _STORED_AS_IS:
        return data, ''
      buffer = io.BytesIO()
      image.convert('RGB').save(buffer, format='JPEG', quality=REENCODE_QUALITY)
  except Image.UnidentifiedImageError:
    return None, 'undecodable (no image format Pillow knows)'
  except Exception as e:  # pylint: disable=broad-exception-caught  (any failure: not an image)
    return None, f'undecodable ({type(e).__name__}: {_first_line(e)})'
  return buffer.getvalue(), f'{kind[0]} {kind[1]} re-encoded as an RGB JPEG'


def _first_line(error: Exception) -> str:
  text = str(error).strip()
  return text.splitlines()[0] if text else 'no message'


def _clean_chunk(chunk: list[tuple[str, object, bytes]]
                 ) -> list[tuple[str, object, bytes | None, str]]:
  return [(name, payload, *clean(data)) for name, payload, data in chunk]


def _cleaned(items: Iterable[tuple[str, object, bytes]], workers: int
             ) -> Iterator[tuple[str, object, bytes | None, str]]:
  """_clean_chunk over chunks of `items`, in `workers` threads, in order, at most IN_FLIGHT chunks
  per worker ahead of the consumer (workers <= 1: in the calling thread)."""
  stream = iter(items)
  chunks = iter(lambda: list(itertools.islice(stream, CHUNK)), [])
  if workers <= 1:
    for chunk in chunks:
      yield from _clean_chunk(chunk)
    return
  with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix='clean_images') as pool:
    pending = collections.deque()
    for chunk in chunks:
      pending.append(pool.submit(_clean_chunk, chunk))
      if len(pending) >= workers * IN_FLIGHT:
        yield from pending.popleft().result()
    while pending:
      yield from pending.popleft().result()


def clean_all(items: Iterable[tuple[str, object, bytes]], workers: int, listing: dict
              ) -> Iterator[tuple[str, object, bytes]]:
  """(name, payload, encoded image) -> (name, payload, bytes to store) for the images kept, in
  the input's order; `clean` runs in `workers` threads.

  Each skipped or re-encoded image is logged and appended, as {'name', 'reason'}, to
  listing[SKIPPED] or listing[REENCODED] (created if absent): a build's metadata.
  """
  for key in (SKIPPED, REENCODED):
    listing.setdefault(key, [])
  for name, payload, data, note in _cleaned(items, workers):
    if note:
      logging.warning('%s %s: %s', name, 'skipped' if data is None else 'stored', note)
      listing[REENCODED if data is not None else SKIPPED].append({'name': name, 'reason': note})
    if data is not None:
      yield name, payload, data
