"""Tests of the build-time image check: what is kept, re-encoded and skipped, and in what order."""
import io

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from data.datasets import image_check
from testing.data import CONVERTIBLE
from testing.data import UNDECODABLE
from testing.data import encoded
from testing.data import jpeg
from testing.data import odd_images

SIZE = (9, 7)


@pytest.mark.parametrize('mode', ['RGB', 'L'])
def test_rgb_and_grayscale_jpegs_are_stored_unchanged(mode):
  data = encoded(0, SIZE, 'JPEG', mode)
  assert image_check.clean(data) == (data, '')


@pytest.mark.parametrize('kind', CONVERTIBLE)
def test_other_images_become_rgb_jpegs_that_tensorflow_reads(kind):
  data, note = image_check.clean(odd_images(0, SIZE)[kind])
  with Image.open(io.BytesIO(data)) as image:
    assert (image.format, image.mode, image.size) == ('JPEG', 'RGB', SIZE[::-1])
  assert note.endswith('re-encoded as an RGB JPEG')
  expected = {'cmyk': 'JPEG CMYK', 'png': 'PNG RGB', 'gif': 'GIF P'}[kind]
  assert note.startswith(expected)
  assert tf.io.decode_jpeg(data, channels=3).shape == SIZE + (3,)


def test_png_pixels_survive_the_reencoding():
  # A grayscale PNG: its RGB copy has no chroma for the JPEG's subsampling to lose, and quality
  # 100 quantises every DCT coefficient with step 1 (error <= 1/2 each). The orthonormal 8x8 IDCT
  # weighs each coefficient by at most 1/4 per pixel, so a pixel moves by at most
  # 64 * 1/2 * 1/4 = 8 before its final rounding; the same holds back in grayscale.
  png = encoded(3, (16, 16), 'PNG', 'L')
  data, _ = image_check.clean(png)
  stored = np.asarray(Image.open(io.BytesIO(data)).convert('L'), np.float64)
  original = np.asarray(Image.open(io.BytesIO(png)), np.float64)
  assert np.abs(stored - original).max() <= 8


@pytest.mark.parametrize('kind', UNDECODABLE)
def test_undecodable_members_are_skipped_with_the_reason(kind):
  data, note = image_check.clean(odd_images(0, SIZE)[kind])
  assert data is None
  assert note == 'empty file' if kind == 'empty' else note.startswith('undecodable (')
  # TensorFlow's decode (the pp op `decode`) refuses them too: the check agrees with training.
  with pytest.raises(tf.errors.InvalidArgumentError):
    tf.io.decode_image(odd_images(0, SIZE)[kind], channels=3, expand_animations=False)


@pytest.mark.parametrize('workers', [1, 2])
def test_clean_all_keeps_the_order_and_lists_what_it_changed(workers, monkeypatch, caplog):
  monkeypatch.setattr(image_check, 'CHUNK', 3)        # 3-image chunks: several in flight.
  monkeypatch.setattr(image_check, 'IN_FLIGHT', 1)
  good = [(f'good{i}', i, jpeg(i, SIZE)) for i in range(7)]
  odd = [(kind, -1, data) for kind, data in sorted(odd_images(1, SIZE).items())]
  listing = {}
  got = list(image_check.clean_all(iter(good + odd), workers, listing))
  stored = [name for name, _, _ in good + odd if name not in UNDECODABLE]
  assert [name for name, _, _ in got] == stored
  assert got[:7] == good                               # Payloads and JPEG bytes unchanged.
  assert sorted(s['name'] for s in listing[image_check.SKIPPED]) == sorted(UNDECODABLE)
  assert sorted(s['name'] for s in listing[image_check.REENCODED]) == sorted(CONVERTIBLE)
  assert 'empty skipped: empty file' in caplog.text
  assert 'png stored: PNG RGB re-encoded as an RGB JPEG' in caplog.text
