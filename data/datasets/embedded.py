"""TFDS builders for the embedded data sets: Fashion-MNIST from Debian's IDX files, sklearn digits.

Both store images as PNG under 'image' (uint8, (H, W, 1)) and the class under 'label', the layout of
TFDS's own `fashion_mnist`, so they flow through the same pipeline and pp ops as ImageNet.

fashion_mnist_idx: the IDX files of the Debian package `dataset-fashion-mnist`
  (/usr/share/datasets/fashion-mnist: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz), read from
  the TFDS manual_dir; splits 'train' (60,000) and 'test' (10,000), 28x28x1, 10 classes.
sklearn_digits: scikit-learn's bundled `load_digits` (UCI optical digits: 1,797 8x8 images, values
  0..16 scaled by 255/16 and rounded to uint8 0..255, 10 classes). sklearn ships one set, so the
  split is ours: a permutation with numpy seed 0; its first 1,000 images are 'train', the other
  797 'test'.
Preparing either takes seconds and is cached in data_dir (array_record files, random access).

`LocalBuilder` is the base of this package's TFDS builders, these two and ImageNet-21k's
(data/datasets/imagenet21k.py). TFDS 4.9.10 finds a builder's checksums file through `code_path`,
which, for a builder defined in a package on Python >= 3.9, imports `importlib_resources` (a
package TFDS only declares for Python < 3.9): download_and_prepare then fails with
ModuleNotFoundError. These builders download nothing and live in plain files, so their code path
is simply their module's file.
"""
import gzip
import io
import os
import sys

from etils import epath
import numpy as np
from PIL import Image
import tensorflow_datasets as tfds

FASHION_MNIST_CLASSES = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt',
                         'Sneaker', 'Bag', 'Ankle boot')
FASHION_MNIST_FILES = {  # split -> (images, labels) in the IDX directory.
    'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
    'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'),
}
DIGITS_TRAIN_SIZE = 1000
DIGITS_SPLIT_SEED = 0


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """GeneratorBasedBuilder whose code_path is the file that defines the subclass."""

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    return epath.Path(sys.modules[cls.__module__].__file__)

def png(image: np.ndarray) -> bytes:
  """A uint8 (H, W) or (H, W, 1) array as PNG bytes, uncompressed (zlib level 0): these images
  are tiny, and level 0 spends no time compressing them."""
  buffer = io.BytesIO()
  Image.fromarray(np.asarray(image, np.uint8).reshape(image.shape[:2])).save(
      buffer, format='PNG', compress_level=0)
  return buffer.getvalue()


def read_idx(path: str) -> np.ndarray:
  """An IDX file (gzipped or not) as a numpy array.

  IDX (LeCun's MNIST format): bytes 0-1 zero, byte 2 the type (0x08 = uint8), byte 3 the number
  of dimensions d, then d big-endian uint32 sizes, then the data in C order.
  """
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as f:
    data = f.read()
  if len(data) < 4 or data[:2] != b'\0\0' or data[2] != 0x08:
    raise ValueError(f'{path} is not a uint8 IDX file (magic {data[:4].hex()}); reinstall '
                     'dataset-fashion-mnist or point data.manual_dir at the IDX files')
  ndim = data[3]
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
  array = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
  if array.size != int(np.prod(shape)):
    raise ValueError(f'{path}: header says {shape} but holds {array.size} values; the file is '
                     'truncated')
  return array.reshape(shape)


class FashionMnistIdx(LocalBuilder):
  """Fashion-MNIST (Xiao et al. 2017) from the IDX files in the manual_dir."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'IDX files of the Debian package dataset-fashion-mnist.'}
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      'Install the Debian package dataset-fashion-mnist (sudo apt-get install '
      'dataset-fashion-mnist, or `make install`); it puts the four IDX .gz files in '
      '/usr/share/datasets/fashion-mnist.')

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description='Fashion-MNIST from the IDX files of the Debian package dataset-fashion-mnist.',
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(28, 28, 1)),
            'label': tfds.features.ClassLabel(names=FASHION_MNIST_CLASSES),
        }),
        supervised_keys=('image', 'label'),
        homepage='https://github.com/zalandoresearch/fashion-mnist')

  def _split_generators(self, dl_manager):
    directory = os.fspath(dl_manager.manual_dir)
    return {split: self._generate_examples(directory, images, labels)
            for split, (images, labels) in FASHION_MNIST_FILES.items()}

  def _generate_examples(self, directory, images_file, labels_file):
    images = read_idx(os.path.join(directory, images_file))
    labels = read_idx(os.path.join(directory, labels_file))
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
      raise ValueError(f'{directory}: {images_file} has shape {images.shape} for '
                       f'{labels.shape[0]} labels; expected (N, 28, 28) and N labels')
    for i, (image, label) in enumerate(zip(images, labels)):
      yield i, {'image': png(image), 'label': int(label)}


def digits_split() -> dict[str, np.ndarray]:
  """split -> indices into sklearn's load_digits(): a seeded permutation, first 1,000 are train."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  n = datasets.load_digits().target.shape[0]
  order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(n)
  return {'train': order[:DIGITS_TRAIN_SIZE], 'test': order[DIGITS_TRAIN_SIZE:]}


class SklearnDigits(LocalBuilder):
  """scikit-learn's 8x8 digits as uint8 images, with a seeded 1,000 / 797 train/test split."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'load_digits, values x 255/16, permutation seed 0, 1000 train.'}

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description='UCI optical recognition of handwritten digits via sklearn.load_digits.',
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(8, 8, 1)),
            'label': tfds.features.ClassLabel(num_classes=10),
        }),
        supervised_keys=('image', 'label'),
        homepage=('https://scikit-learn.org/stable/modules/generated/'
                  'sklearn.datasets.load_digits.html'))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(indices) for split, indices in digits_split().items()}

  def _generate_examples(self, indices):
    from sklearn import datasets  # pylint: disable=g-import-not-at-top
    digits = datasets.load_digits()
    # Pixel values are counts 0..16 of set pixels in 4x4 blocks: 16 -> 255.
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    for i in indices:
      yield int(i), {'image': png(images[i]), 'label': int(digits.target[i])}
