"""TFDS builder for ImageNet-21k from its official archive (TFDS has no public builder for it).

Releases (builder configs), each one archive in the manual_dir:
  fall11    fall11_whole.tar       (1.3 TB) 21,841 synsets, 14,197,122 images; ViT and V-MoE's data
  winter21  winter21_whole.tar.gz  (1.1 TB) 19,167 synsets (the faces-blurred, cleaned release
                                   image-net.org distributes today)
Both hold one tar per synset, `nXXXXXXXX.tar` (WordNet id; any directory prefix is accepted),
each holding that synset's JPEGs (`nXXXXXXXX_N.JPEG`). The archive is streamed: nothing is
extracted to disk. Labels are the synset ids in sorted order (label i = i-th smallest id); the
names are stored with the dataset (ClassLabel names). Listing the synsets costs a first pass: for
the uncompressed fall11 tar it only seeks from header to header (minutes); for winter21's tar.gz it
decompresses the archive once (about an hour), before the pass that writes the examples.

One split, 'full', in TFDS's stored order (examples are shuffled by key hash when written). V-MoE
holds out its first 102,400 images for validation; the pipeline's split aliases name them:
  holdout              = full[:102400]
  train_minus_holdout  = full[102400:]
Features: 'image' (JPEG bytes, decoded by the pp op `decode`), 'label', 'file_name'.

Every member is decoded once while building (data/datasets/image_check.py, in os.cpu_count()
threads): an RGB or grayscale JPEG is stored unchanged; CMYK JPEGs and PNG or GIF data under a .JPEG
name are re-encoded as RGB JPEGs; an empty, truncated or undecodable member is skipped. Each skip
and re-encoding is logged, and the prepared set's metadata.json lists them (image_check.SKIPPED and
REENCODED), so a bad image is found here, not hours into a training run. Skipping removes
examples without moving the others: the stored order is by key, so the holdout is still the first
102,400 images of it.

Releases are told apart by the archive's file name (data.name 'imagenet21k' is fall11). A
release's synsets are counted while listing: an archive holding the other release's count (a
renamed archive) is refused before anything is written (`check_release`); other counts, such as
small test archives, only warn. The paper configs count fall11's images (their num_train_steps is
300 epochs of its full[102400:]); sources.check_available refuses a prepared training split of
another size (data.train_images), so a winter21 build (19,167 synsets, about 13.15M images) does
not silently train 324 epochs of it instead of 300. Refusing, rather than deriving
num_train_steps from the prepared data, keeps each config a complete experiment record that the
schedule, the cost plan (launch/plan.py) and the tests read without the 1.3 TB data set; training
on another release is an explicit override (the error names the two keys to set).

Build (after the archive is in MANUAL_DIR):
  cd /work/main && .venv/bin/python -m data.prepare build imagenet21k/fall11 \
      --manual_dir=MANUAL_DIR --data_dir=DATA_DIR
TFDS writes the examples to temporary buckets before shuffling them: DATA_DIR needs about twice the
archive's size free while building.

Stand-ins, for tools that exercise the input pipeline at real sizes without the real data
(launch/rehearsal.py's generated archives) and for the tests: `write_archive` writes an archive in
a release's layout, and `photo` a JPEG that compresses as a photograph does.
"""
import io
import os
import re
import tarfile

from absl import logging
import numpy as np
from PIL import Image
import tensorflow_datasets as tfds

from data import config as data_config_lib
from data.datasets import embedded
from data.datasets import image_check

DOWNLOAD_PAGE = 'https://image-net.org/download-images.php'
_SYNSET_TAR = re.compile(r'(?:.*/)?(n\d{8})\.tar')


class Imagenet21kConfig(tfds.core.BuilderConfig):
  """One release: the archive's file name and its published number of synsets."""

  def __init__(self, *, archive: str, num_synsets: int, **kwargs):
    super().__init__(version=tfds.core.Version('1.0.0'), **kwargs)
    self.archive = archive
    self.num_synsets = num_synsets


RELEASES = (
    Imagenet21kConfig(name='fall11', archive='fall11_whole.tar', num_synsets=21_841,
                      description='Fall 2011 release (ViT, V-MoE).'),
    Imagenet21kConfig(name='winter21', archive='winter21_whole.tar.gz', num_synsets=19_167,
                      description='Winter 2021 release.'),
)


def check_release(path: str, num_synsets: int, release: Imagenet21kConfig) -> None:
  """Refuses an archive holding another release's number of synsets; other mismatches warn."""
  if num_synsets == release.num_synsets:
    return
  for other in RELEASES:
    if other.name != release.name and num_synsets == other.num_synsets:
      raise ValueError(
          f'{path} holds {num_synsets:,} synsets, the {other.name} release, but is being built as '
          f'{release.name} ({release.num_synsets:,} synsets): put the real {release.archive} from '
          f'{DOWNLOAD_PAGE} in the manual_dir, or build this archive as imagenet21k/{other.name} '
          f'under its own name {other.archive}.')
  logging.warning('%s holds %d synsets; the %s release has %d. Labels are this archive\'s sorted '
                  'synsets.', path, num_synsets, release.name, release.num_synsets)


def synset_tars(outer: tarfile.TarFile):
  """Yields (synset id, member) for the per-synset tars of an opened outer archive."""
  for member in outer:
    match = _SYNSET_TAR.fullmatch(member.name)
    if match and member.isfile():
      yield match.group(1), member


def list_synsets(path: str) -> list[str]:
  """Sorted synset ids in the archive (seeks over a .tar; decompresses a .tar.gz once)."""
  with tarfile.open(path, 'r:*') as outer:
    synsets = sorted({synset for synset, _ in synset_tars(outer)})
  if not synsets:
    raise ValueError(f'{path} holds no nXXXXXXXX.tar members; is it the ImageNet-21k "whole" '
                     f'archive from {DOWNLOAD_PAGE}?')
  return synsets


def stream_images(path: str):
  """Yields (synset, file name, bytes) for every file of every synset tar, reading `path` once."""
  with tarfile.open(path, 'r|*') as outer:
    for synset, member in synset_tars(outer):
      with tarfile.open(fileobj=outer.extractfile(member), mode='r|') as inner:
        for image in inner:
          if image.isfile():
            yield synset, os.path.basename(image.name), inner.extractfile(image).read()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
  info = tarfile.TarInfo(name)
  info.size = len(data)
  archive.addfile(info, io.BytesIO(data))


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


def write_archive(path: str, images: dict, prefix: str = '', extra: dict | None = None) -> None:
  """Writes an archive in the release layout (for tests and benchmarks; gzipped if path ends in
  .gz): for each synset of images = {synset: [(file name, bytes), ...]}, a member
  prefix + synset + '.tar' holding those files; `extra` = {name: bytes} adds other members."""
  with tarfile.open(path, 'w:gz' if path.endswith('.gz') else 'w') as outer:
    for synset, files in images.items():
      inner_bytes = io.BytesIO()
      with tarfile.open(fileobj=inner_bytes, mode='w') as inner:
        for name, data in files:
          _add(inner, name, data)
      _add(outer, f'{prefix}{synset}.tar', inner_bytes.getvalue())
    for name, data in (extra or {}).items():
      _add(outer, prefix + name, data)


class Imagenet21k(embedded.LocalBuilder):
  """ImageNet-21k (Deng et al. 2009; Ridnik et al. 2021) from the official whole archive."""

  BUILDER_CONFIGS = list(RELEASES)
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      f'Register at {DOWNLOAD_PAGE} and download the ImageNet-21k "whole" archive: '
      'fall11_whole.tar (Fall 2011, 21,841 synsets) or winter21_whole.tar.gz (Winter 2021, 19,167 '
      'synsets). Put it, unextracted, in the manual_dir.')

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=('ImageNet-21k; labels are the sorted WordNet synset ids of the archive. '
                     f'V-MoE validation: {data_config_lib.IMAGENET21K_SPLITS["holdout"]}.'),
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(encoding_format='jpeg'),
            'label': tfds.features.ClassLabel(),      # Names set from the archive listing.
            'file_name': tfds.features.Text(),
        }),
        supervised_keys=('image', 'label'),
        homepage='https://image-net.org/',
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    path = os.path.join(os.fspath(dl_manager.manual_dir), self.builder_config.archive)
    if not os.path.exists(path):
      raise FileNotFoundError(f'{path} not found. {self.MANUAL_DOWNLOAD_INSTRUCTIONS}')
    synsets = list_synsets(path)
    check_release(path, len(synsets), self.builder_config)
    self.info.features['label'].names = synsets
    return {'full': self._generate_examples(path, synsets)}

  def _generate_examples(self, path, synsets):
    label = {synset: i for i, synset in enumerate(synsets)}
    listing = {}
    members = ((name, synset, data) for synset, name, data in stream_images(path))
    for file_name, synset, data in image_check.clean_all(members, os.cpu_count() or 1, listing):
      # File names (nXXXXXXXX_N.JPEG) are unique across the release: the key.
      yield file_name, {'image': data, 'label': label[synset], 'file_name': file_name}
    self.info.metadata.update(listing)   # Written with the data set's info, after the examples.
    logging.info('%s: %d images skipped, %d re-encoded (listed in metadata.json).', path,
                 len(listing[image_check.SKIPPED]), len(listing[image_check.REENCODED]))
