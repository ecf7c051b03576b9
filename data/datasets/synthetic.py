"""Synthetic photograph-like JPEGs, for tools that exercise the input pipeline at real sizes
without real data (launch/rehearsal.py's generated ImageNet archives) and for the tests."""
import io

import numpy as np
from PIL import Image


def photo(seed: int, size=(375, 500), grain: int = 28) -> bytes:
  """An RGB JPEG (height, width = size) that compresses about as a photograph does: smooth colour
  fields (random pixels at 1/25 of the size, upscaled bicubically) under uniform grain of +-grain
  levels. At ImageNet's most common size, 500 x 375, it is about 94 KB at quality 90, near
  fall11's mean image (1.3 TB over 14,197,122 images: 92 KB)."""
  rng = np.random.default_rng(seed)
  height, width = size
  coarse = rng.integers(0, 256, (max(1, height // 25), max(1, width // 25), 3), dtype=np.uint8)
  smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), np.int16)
  noise = rng.integers(-grain, grain + 1, (height, width, 3), dtype=np.int16)
  buffer = io.BytesIO()
  Image.fromarray(np.clip(smooth + noise, 0, 255).astype(np.uint8)).save(buffer, format='JPEG',
                                                                         quality=90)
  return buffer.getvalue()
