"""Tests of the embedded sets: the IDX reader, the digits split and the real Fashion-MNIST."""
import dataclasses
import gzip
import os

import numpy as np
import pytest

from data.datasets import embedded
from data.datasets import sources
from data.stream import pipeline
from testing.data import data_config


def test_read_idx_hand_made(tmp_path):
  # Magic 0x00000803 (uint8, 3 dims), sizes 2 x 1 x 3 big-endian, then 6 pixels.
  raw = bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6])
  path = tmp_path / 'x-idx3-ubyte.gz'
  with gzip.open(path, 'wb') as f:
    f.write(raw)
  np.testing.assert_array_equal(embedded.read_idx(str(path)), [[[1, 2, 3]], [[4, 5, 6]]])
  (tmp_path / 'bad').write_bytes(b'\x1f\x8b\x08\x00')
  with pytest.raises(ValueError, match='not a uint8 IDX file'):
    embedded.read_idx(str(tmp_path / 'bad'))
  (tmp_path / 'short').write_bytes(raw[:-1])
  with pytest.raises(ValueError, match='truncated'):
    embedded.read_idx(str(tmp_path / 'short'))


def test_digits_split_is_seeded_and_disjoint():
  split = embedded.digits_split()
  assert (len(split['train']), len(split['test'])) == (1000, 797)
  assert sorted(np.concatenate([split['train'], split['test']])) == list(range(1797))
  np.testing.assert_array_equal(split['train'], embedded.digits_split()['train'])


def test_digits_pixels_and_labels(digits_dir):
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  config = data_config(data_dir=digits_dir)
  batch = next(pipeline.make_eval_iterator(config, 'test', batch_size=797,
                                           pp='decode(channels=1)|keep("image", "label")'))
  assert batch['image'].shape == (797, 8, 8, 1) and batch['image'].dtype == np.uint8
  # Every test image is a sklearn test digit scaled by 255/16 (16 -> 255, 8 -> 127.5 -> 128).
  expected = np.round(digits.images * (255 / 16)).astype(np.uint8)[embedded.digits_split()['test']]
  as_set = lambda images: sorted(i.tobytes() for i in images.reshape(len(images), -1))
  assert as_set(batch['image']) == as_set(expected)
  assert batch['image'].max() == 255
  assert np.bincount(batch['label'], minlength=10).min() > 60   # ~80 per class.


@pytest.mark.skipif(not os.path.isdir(sources.DEBIAN_FASHION_MNIST_DIR),
                    reason=f'{sources.DEBIAN_FASHION_MNIST_DIR} absent: install the Debian '
                    'package dataset-fashion-mnist (make install) to test the real Fashion-MNIST.')
def test_real_fashion_mnist():
  # The prepared set in the default data dir, which `make test` builds from the IDX files first
  # (python -m data.prepare embedded); run alone, check_available builds it (a few seconds).
  config = data_config(name='fashion_mnist', cache=True, shuffle_buffer=60_000)
  sources.check_available(config)
  assert sources.open_split(config, 'train').num_examples == 60_000
  test = sources.open_split(config, 'test')
  assert test.num_examples == 10_000 and test.num_classes == 10
  # The test split holds exactly the IDX test images with their labels.
  directory = sources.DEBIAN_FASHION_MNIST_DIR
  images = embedded.read_idx(os.path.join(directory, 't10k-images-idx3-ubyte.gz'))
  labels = embedded.read_idx(os.path.join(directory, 't10k-labels-idx1-ubyte.gz'))
  batch = next(pipeline.make_eval_iterator(config, 'test', batch_size=10_000,
                                           pp='decode(channels=1)|keep("image", "label")'))
  key = lambda image, label: image.tobytes() + bytes([label])
  stored = sorted(map(key, batch['image'][..., 0], batch['label']))
  assert stored == sorted(map(key, images, labels))
  assert np.bincount(batch['label']).tolist() == [1000] * 10
  # Training batches of the tiny study's shape (uncached: caching decodes all 60,000 images).
  config = dataclasses.replace(config, cache=False)
  train = pipeline.make_train_iterator(config, batch_size=64, seed=0)
  batch = next(train)
  assert batch['image'].shape == (64, 28, 28, 1) and batch['labels'].shape == (64, 10)
  assert batch['image'].dtype == np.float32 and -1 <= batch['image'].min() < 0
  np.testing.assert_array_equal(batch['labels'].sum(1), np.ones(64))
