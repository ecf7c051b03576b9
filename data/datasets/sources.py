"""Data sources by name: check that a config's data exists, and open a split for random access.

`config.data.name` picks a source (name[/release] for ImageNet-21k):
  fashion_mnist       Fashion-MNIST, 'train' 60,000 / 'test' 10,000, 28x28x1, 10 classes: the IDX
                      files of the Debian package dataset-fashion-mnist (data.manual_dir, or
                      /usr/share/datasets/fashion-mnist when it is None), prepared on first use in
                      seconds. Where that directory does not exist (e.g. macOS) TFDS's own
                      `fashion_mnist` is downloaded instead, and a warning says so.
  digits              sklearn's load_digits: 'train' 1,000 / 'test' 797, 8x8x1, 10 classes
                      (data/datasets/embedded.py), prepared on first use.
  imagenet21k[/fall11|/winter21]   ImageNet-21k (fall11 unless named) from its archive in
                      data.manual_dir, built once with `python -m data.prepare build`
                      (data/datasets/imagenet21k.py); split 'full' and the V-MoE aliases 'holdout'
                      (full[:102400]) and 'train_minus_holdout' (full[102400:]).
  imagenet2012        TFDS imagenet2012 ('train', 'validation'), built once with
                      `python -m data.prepare build` from ILSVRC2012_img_{train,val}.tar in
                      data.manual_dir (TFDS's builder needs the package importlib_resources).
  imagenet_v2         TFDS imagenet_v2 ('test', 10,000 images), downloaded by
                      `python -m data.prepare build imagenet_v2` (no account needed).
  imagenet2012_real   TFDS imagenet2012_real ('validation' with ReaL's multi-labels in
                      'real_label'), built from ILSVRC2012_img_val.tar in data.manual_dir (the
                      labels are downloaded).
  multilabel_records  multi-label TFRecord / ArrayRecord files (data.files, data.file_format;
                      format in data/datasets/records.py). A '{split}' in data.files is replaced by
                      the split name; without it the only split is 'all'.
Splits take TFDS slicing ('train[:10%]', 'full[102400:]').

TFDS data is read through `as_data_source` (random access), which needs the array_record file
format: `python -m data.prepare build` writes it, and a data set already prepared as TFRecord
gets array_record files with `python -m data.prepare convert` (check_available prints both).
"""
import dataclasses
import os
import re
import shlex
from typing import Callable

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from base import errors
from data import config as data_config_lib
from data.datasets import embedded
from data.datasets import image_check
from data.datasets import imagenet21k
from data.datasets import records as records_lib
from data.pp import ops

DEBIAN_FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'
ARRAY_RECORD = tfds.core.FileFormat.ARRAY_RECORD
_SLICE = re.compile(r'(\w+)(?:\[(-?\d*)(%?):(-?\d*)(%?)\])?')


@dataclasses.dataclass(frozen=True)
class Records:
  """One split opened for random access: everything the pipeline reads.

  read: record indices (0..num_examples-1) -> serialized records.
  parse: graph function, serialized record -> example dict ('image' still encoded bytes).
  locate: record index -> where it is stored (file and record number), for error messages.
  check: the command that lists every record of the split that does not decode (check_command).
  num_classes: classes of the int 'label' feature; None for multi-label sources ('labels').
  label_index: a file where the split's labels may be kept (a prepared TFDS data set does not
    change), or None.
  """
  description: str
  num_examples: int
  read: Callable[[np.ndarray], list]
  parse: Callable[[tf.Tensor], dict]
  locate: Callable[[int], str]
  check: str
  num_classes: int | None
  label_index: str | None = None


# ---------------------------------------------------------------------------------------------
# TFDS-backed sources.


def _data_dir(data_config) -> str:
  return data_config.data_dir or tfds.core.constants.get_default_data_dir()


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  """A TFDS builder read through its array_record files.

  make_builder: (data_config, release, **builder kwargs) -> builder. Readers pass no file_format
    (TFDS refuses one that differs from the prepared data's); preparing passes array_record.
  prepare: prepares the builder in seconds (embedded sets), or None when a user must build it.
  missing: (data_config, builder) -> the steps that obtain the data, for a builder not prepared.
  size_note: what a training split of the wrong size (data.train_images) should have been, and
    where to get it; appended to that error.
  label_key: the feature holding the labels: an int class ('label'), or a list of them (ReaL's
    'real_label': a multi-label source, whose Records have num_classes None).
  """
  make_builder: Callable
  prepare: Callable | None
  missing: Callable[..., str] | None
  aliases: dict = dataclasses.field(default_factory=dict)
  size_note: str = ''
  label_key: str = 'label'

  def _classes(self, features) -> tuple[int, bool]:
    """(classes of the label feature, whether each example holds a list of them)."""
    label = features[self.label_key]
    if isinstance(label, tfds.features.Sequence):
      return label.feature.num_classes, True
    return label.num_classes, False

  def builder(self, data_config, release: str | None):
    """The prepared builder; embedded sets are prepared here, others fail with the steps."""
    builder = self._prepared(data_config, release)
    if not builder.is_prepared():
      raise errors.MissingInput(self.missing(data_config, builder))
    if ARRAY_RECORD not in builder.info.available_file_formats():
      raise errors.MissingInput(_convert_steps(builder))
    return builder

  def _prepared(self, data_config, release):
    """The builder to read with, after preparing it if it is an embedded set.

    A prepared data set is read through a builder restored from its directory: its
    dataset_info.json lists the formats added by `data.prepare convert`, which a builder made
    from code does not pick up (TFDS 4.9.10).
    """
    builder = self.make_builder(data_config, release)
    if self.prepare is not None and not builder.is_prepared():
      self.prepare(data_config, self.make_builder(data_config, release, file_format=ARRAY_RECORD))
      builder = self.make_builder(data_config, release)
    return tfds.builder_from_directory(builder.data_dir) if builder.is_prepared() else builder

  def check(self, data_config, release, splits) -> tuple[int | None, list[int]]:
    """(classes of 'label', examples of each split); fails with what to do if one is missing."""
    builder = self.builder(data_config, release)
    sizes = []
    for split in splits:
      spec = self.aliases.get(split, split)
      try:
        sizes.append(builder.info.splits[spec].num_examples)
      except (KeyError, ValueError, AssertionError) as e:
        raise errors.UserError(self._bad_split(builder, split, e)) from None
    return self._classes(builder.info.features)[0], sizes

  def skipped_images(self, data_config, release) -> int:
    """How many undecodable images the build left out (listed in its metadata.json)."""
    metadata = self.builder(data_config, release).info.metadata   # Loads metadata.json.
    return len(metadata.get(image_check.SKIPPED, ())) if metadata is not None else 0

  def _bad_split(self, builder, split: str, error: Exception) -> str:
    valid = list(builder.info.splits) + list(self.aliases)
    return (f'{builder.name}: bad split {split!r} ({error}); valid splits: {", ".join(valid)} '
            '(TFDS slicing such as "train[:10%]" allowed).')

  def open(self, data_config, release, split: str) -> Records:
    # No is_prepared() check before reading: tfds.testing.mock_data fakes the reads, not the
    # files. A failed read is explained afterwards.
    builder = self._prepared(data_config, release)
    spec = self.aliases.get(split, split)
    try:
      source = builder.as_data_source(
          spec, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
    except Exception as e:  # TFDS raises several types for a missing or unsliceable split.
      self.builder(data_config, release)   # Raises the steps if the data is missing.
      raise errors.UserError(self._bad_split(builder, split, e)) from e
    features = builder.info.features
    skip_image = {'image': tfds.decode.SkipDecoding()}
    return Records(
        description=f'{builder.name} split {split!r}',
        num_examples=len(source),
        # Item by item: tfds.testing.mock_data's __getitems__ is unbound (TFDS 4.9.10), and a local
        # ArrayRecord read costs little beside the decoding.
        read=lambda indices: [source[int(i)] for i in indices],
        parse=lambda serialized: features.deserialize_example(serialized, decoders=skip_image),
        locate=_tfds_locator(builder, spec),
        check=check_command(data_config, split),
        num_classes=None if self._classes(features)[1] else self._classes(features)[0],
        label_index=os.path.join(builder.data_dir, 'labels-' + re.sub(r'[^\w.%-]', '_', spec)
                                 + '.npy'))


def _tfds_locator(builder, spec: str) -> Callable[[int], str]:
  """index -> 'FILE record N' from the split's file instructions ('split S record i' if unknown)."""
  try:
    instructions = list(builder.info.splits[spec].file_instructions)
    ends = np.cumsum([int(fi.take) for fi in instructions])
  except (KeyError, ValueError, TypeError, AttributeError):
    instructions, ends = [], np.zeros(0)

  def locate(index: int) -> str:
    f = int(np.searchsorted(ends, index, side='right'))
    if f >= len(instructions):
      return f'{builder.name} split {spec!r} record {index}'
    start = ends[f] - int(instructions[f].take)
    return f'{instructions[f].filename} record {int(instructions[f].skip + index - start)}'
  return locate


def _repo() -> str:
  return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The options of `data.prepare check` that name a data set's records: DataSource's fields.
CHECK_OPTIONS = ('data_dir', 'manual_dir', 'files', 'file_format')


def check_command(source, split: str) -> str:
  """The shell command (`python -m data.prepare check`) that decodes every record of `split` of
  a data set (a DataSource or data section) and lists those that fail."""
  args = [source.name, '--split', split]
  for option in CHECK_OPTIONS:
    if getattr(source, option) is not None:
      args += [f'--{option}', getattr(source, option)]
  return f'cd {shlex.quote(_repo())} && .venv/bin/python -m data.prepare check {shlex.join(args)}'


def _convert_steps(builder) -> str:
  return (f'{builder.name} is prepared in {builder.data_dir} as '
          f'{sorted(f.value for f in builder.info.available_file_formats())}, but this pipeline '
          'reads by random access, which needs array_record files. Add them once (in place; as '
          'much free space again):\n'
          f'  cd {_repo()} && .venv/bin/python -m data.prepare convert {builder.data_dir}')


def _prepare_embedded(data_config, builder):
  """Prepares a small embedded set (seconds); the IDX builder reads its manual_dir."""
  logging.info('Preparing %s in %s.', builder.name, builder.data_dir)
  manual_dir = _fashion_mnist_dir(data_config) if builder.name == 'fashion_mnist_idx' else None
  config = tfds.download.DownloadConfig(manual_dir=manual_dir)
  try:
    builder.download_and_prepare(download_config=config)
  except Exception as e:  # Download errors come in many types; all get the same advice.
    if builder.name != 'fashion_mnist':
      raise
    raise errors.MissingInput(
        f'Fashion-MNIST: {_fashion_mnist_dir(data_config)} does not exist and TFDS could not '
        f'download fashion_mnist ({type(e).__name__}: {e}). Either\n'
        '  install the IDX files: sudo apt-get install dataset-fashion-mnist (or `make install`), '
        f'which fills {DEBIAN_FASHION_MNIST_DIR}; or put the four IDX .gz files '
        '(train-images-idx3-ubyte.gz, ...) in a directory and set '
        '--config.data.manual_dir=DIR; or\n'
        '  connect to the internet once so TFDS can download fashion_mnist into '
        f'{_data_dir(data_config)} (--config.data.data_dir).') from e


def _fashion_mnist_dir(data_config) -> str:
  # The IDX directory: data.manual_dir, or where the Debian package installs the files.
  return data_config.manual_dir or DEBIAN_FASHION_MNIST_DIR


def _fashion_mnist_builder(data_config, release, **kwargs):
  del release
  directory = _fashion_mnist_dir(data_config)
  if os.path.isdir(directory):
    return embedded.FashionMnistIdx(data_dir=data_config.data_dir, **kwargs)
  logging.log_first_n(logging.WARNING, 'Fashion-MNIST IDX directory %s not found (package '
                      'dataset-fashion-mnist not installed?): using TFDS\'s fashion_mnist, '
                      'downloaded on first use.', 1, directory)
  return tfds.builder('fashion_mnist', data_dir=data_config.data_dir, **kwargs)


def _digits_builder(data_config, release, **kwargs):
  del release
  return embedded.SklearnDigits(data_dir=data_config.data_dir, **kwargs)


def _imagenet21k_builder(data_config, release, **kwargs):
  names = [r.name for r in imagenet21k.RELEASES]
  if release is not None and release not in names:
    raise errors.UserError(f'unknown ImageNet-21k release {release!r} in data.name; valid: '
                           f'{", ".join("imagenet21k/" + n for n in names)}.')
  return imagenet21k.Imagenet21k(config=release or names[0], data_dir=data_config.data_dir,
                                 **kwargs)


def _imagenet2012_builder(data_config, release, **kwargs):
  del release
  return tfds.builder('imagenet2012', data_dir=data_config.data_dir, **kwargs)


def _imagenet_v2_builder(data_config, release, **kwargs):
  del release
  return tfds.builder('imagenet_v2', data_dir=data_config.data_dir, **kwargs)


def _imagenet2012_real_builder(data_config, release, **kwargs):
  del release
  return tfds.builder('imagenet2012_real', data_dir=data_config.data_dir, **kwargs)


def _archive_status(manual_dir: str | None, files: list[str]) -> str:
  if not manual_dir:
    return 'data.manual_dir is not set.'
  found = [f'{f}: {"found" if os.path.exists(os.path.join(manual_dir, f)) else "MISSING"}'
           for f in files]
  return f'In data.manual_dir={manual_dir}: ' + '; '.join(found) + '.'


def _build_steps(data_config, builder, name: str, files: list[str], download: str) -> str:
  data_dir = _data_dir(data_config)
  manual_dir = data_config.manual_dir or 'MANUAL_DIR'
  return (
      f'{name} is not prepared in {data_dir}. {_archive_status(data_config.manual_dir, files)}\n'
      f'To obtain it:\n'
      f'  1. {download}\n'
      f'  2. Put {" and ".join(files)} (unextracted) in one directory, MANUAL_DIR.\n'
      f'  3. Build it once (hours; about twice the archive size free in the data_dir):\n'
      f'       cd {_repo()} && .venv/bin/python -m data.prepare build {data_config.name} '
      f'--manual_dir={manual_dir} --data_dir={data_dir}\n'
      f'  4. Run with --config.data.data_dir={data_dir} '
      f'(and --config.data.manual_dir={manual_dir}).')


def _imagenet21k_missing(data_config, builder) -> str:
  return _build_steps(
      data_config, builder, f'ImageNet-21k ({builder.builder_config.name})',
      [builder.builder_config.archive],
      f'Register at {imagenet21k.DOWNLOAD_PAGE} and download {builder.builder_config.archive} '
      f'(the "whole" ImageNet-21k archive, release {builder.builder_config.name}).')


# What TFDS's imagenet2012 builder reads from the manual_dir (its test archive is optional).
IMAGENET2012_ARCHIVES = ('ILSVRC2012_img_train.tar', 'ILSVRC2012_img_val.tar')


def _imagenet2012_missing(data_config, builder) -> str:
  return _build_steps(
      data_config, builder, 'ImageNet-1k (imagenet2012)', list(IMAGENET2012_ARCHIVES),
      'Register at https://image-net.org/download-images.php and download, from the ILSVRC2012 '
      'page, "Training images (Task 1 & 2)" ILSVRC2012_img_train.tar (138 GB) and "Validation '
      'images (all tasks)" ILSVRC2012_img_val.tar (6.3 GB).')


def _imagenet_v2_missing(data_config, builder) -> str:
  del builder
  return (f'ImageNet-V2 (imagenet_v2) is not prepared in {_data_dir(data_config)}. Download and '
          f'build it once (1.2 GB, no account): cd {_repo()} && .venv/bin/python -m data.prepare '
          f'build imagenet_v2 --data_dir={_data_dir(data_config)}')


def _imagenet2012_real_missing(data_config, builder) -> str:
  return _build_steps(
      data_config, builder, 'ImageNet-ReaL (imagenet2012_real)', ['ILSVRC2012_img_val.tar'],
      'Register at https://image-net.org/download-images.php and download "Validation images '
      '(all tasks)" ILSVRC2012_img_val.tar (6.3 GB); the ReaL labels are downloaded by the build.')


# ---------------------------------------------------------------------------------------------
# Multi-label record files.


def _slice(split: str, num_examples: int, description: str) -> tuple[int, int]:
  """(start, stop) of a 'name[a:b]' slice (ints or percents, Python semantics) of n records."""
  match = _SLICE.fullmatch(split)

  def bound(text, percent, default):
    if text == '':
      return default
    value = int(text)
    return int(round(value * num_examples / 100)) if percent else value

  start = bound(match.group(2) or '', match.group(3), 0)
  stop = bound(match.group(4) or '', match.group(5), num_examples)
  start, stop, _ = slice(start, stop).indices(num_examples)
  if stop <= start:
    raise errors.UserError(f'{description}: split {split!r} selects no records of {num_examples}.')
  return start, stop


@dataclasses.dataclass(frozen=True)
class RecordFilesSource:
  """User files of multi-label records (data.files, data.file_format)."""
  size_note: str = ''

  def _pattern(self, data_config, split: str) -> tuple[str, str]:
    if not data_config.files:
      raise errors.UserError('multilabel_records needs data.files, a glob of TFRecord or '
                             'ArrayRecord files (e.g. '
                             '--config.data.files="/data/jft/{split}-*.tfrecord").')
    if data_config.file_format not in records_lib.FILE_FORMATS:
      raise errors.UserError(f'unknown data.file_format {data_config.file_format!r}; valid: '
                             f'{", ".join(records_lib.FILE_FORMATS)}.')
    match = _SLICE.fullmatch(split)
    if not match:
      raise errors.UserError(f'bad split {split!r}; write NAME or NAME[start:stop] (ints or '
                             'percents).')
    name = match.group(1)
    if '{split}' in data_config.files:
      return name, data_config.files.replace('{split}', name)
    if name != 'all':
      raise errors.UserError(f'data.files={data_config.files!r} has no {{split}} placeholder, so '
                             f'its only split is "all" (got {split!r}); put {{split}} in the glob '
                             'to have named splits.')
    return name, data_config.files

  def _files(self, data_config, split: str) -> records_lib.RecordFiles:
    _, pattern = self._pattern(data_config, split)
    try:
      files = records_lib.match_files(pattern)
    except FileNotFoundError as e:
      raise errors.MissingInput(
          f'multilabel_records split {split!r}: {e}. Write the records (data/datasets/records.py: '
          'serialize_example) and set --config.data.files to their glob.') from None
    return records_lib.RecordFiles(files, data_config.file_format)

  def check(self, data_config, release, splits) -> tuple[None, list[int]]:
    """(None: multi-label, records of each split); fails with what to do if one is missing."""
    del release
    sizes = []
    for split in splits:
      start, stop = _slice(split, len(self._files(data_config, split)), 'multilabel_records')
      sizes.append(stop - start)
    return None, sizes

  def skipped_images(self, data_config, release) -> int:
    """0: records are checked when written (data/datasets/records.py write_multilabel), not
    counted."""
    del data_config, release
    return 0

  def open(self, data_config, release, split: str) -> Records:
    del release
    files = self._files(data_config, split)
    start, stop = _slice(split, len(files), f'multilabel_records {data_config.files!r}')
    return Records(
        description=f'multilabel_records {data_config.files!r} split {split!r}',
        num_examples=stop - start,
        read=lambda indices: files.read(np.asarray(indices, np.int64) + start),
        parse=records_lib.parse_multilabel,
        locate=lambda index: files.locate(start + index),
        check=check_command(data_config, split),
        num_classes=None)


# ---------------------------------------------------------------------------------------------
# Registry and entry points.

# The release behind data/config.py's IMAGENET21K_TRAIN_IMAGES, the paper configs' count (V-MoE's
# data).
_IMAGENET21K_SIZE_NOTE = (
    f'; the paper configs count ImageNet-21k fall11 ({data_config_lib.FALL11_IMAGES:,} images '
    f'less the {data_config_lib.IMAGENET21K_HOLDOUT:,} held out): download fall11_whole.tar from '
    f'{imagenet21k.DOWNLOAD_PAGE} and build it with '
    '`python -m data.prepare build imagenet21k/fall11`')

SOURCES = {
    'fashion_mnist': TfdsSource(_fashion_mnist_builder, _prepare_embedded, None),
    'digits': TfdsSource(_digits_builder, _prepare_embedded, None),
    'imagenet21k': TfdsSource(_imagenet21k_builder, None, _imagenet21k_missing,
                              aliases=data_config_lib.IMAGENET21K_SPLITS,
                              size_note=_IMAGENET21K_SIZE_NOTE),
    'imagenet2012': TfdsSource(_imagenet2012_builder, None, _imagenet2012_missing),
    'imagenet_v2': TfdsSource(_imagenet_v2_builder, None, _imagenet_v2_missing),
    'imagenet2012_real': TfdsSource(_imagenet2012_real_builder, None, _imagenet2012_real_missing,
                                    label_key='real_label'),
    'multilabel_records': RecordFilesSource(),
}


def get_source(name: str):
  """'name' or 'name/release' -> (source, release or None); unknown names list the valid ones."""
  base, _, release = name.partition('/')
  if base not in SOURCES:
    raise errors.UserError(f'unknown data.name {name!r}; valid: {", ".join(sorted(SOURCES))} '
                           '(imagenet21k/fall11 or imagenet21k/winter21 pick a release).')
  if release and base != 'imagenet21k':
    raise errors.UserError(f'data.name {name!r}: only imagenet21k has releases (/fall11, '
                           '/winter21).')
  return SOURCES[base], release or None


def check_available(data_config) -> None:
  """Fails, before anything compiles, when the data of `data_config` is missing or inconsistent.

  Prepares the embedded sets (seconds). For ImageNet the error gives the download page, where to
  put the archives, the build command and the config keys (data.manual_dir, data.data_dir).
  Also parses pp_train and pp_eval, checks train_split and eval_split, that data.num_classes
  covers the source's classes, and that train_split holds data.train_images examples (unless it
  is None): the count num_train_steps was computed from, so that a data set of another size (such
  as ImageNet-21k winter21 for the paper configs' fall11) is refused, not trained for a different
  number of epochs. A build that left out undecodable images also passes with the count less
  those skips (the paper configs count fall11's published 14,197,122 images; the skips only
  shorten each epoch by as many images).
  """
  for key in ('pp_train', 'pp_eval'):
    try:
      ops.build(getattr(data_config, key))
    except ValueError as e:
      raise errors.UserError(f'data.{key}: {e}') from None
  source, release = get_source(data_config.name)
  num_classes, (num_train, _) = source.check(data_config, release,
                                             [data_config.train_split, data_config.eval_split])
  expected = data_config.train_images
  skipped = source.skipped_images(data_config, release) if expected is not None else 0
  if expected is not None and num_train not in (expected, expected - skipped):
    skips = (f' (its build skipped {skipped:,} undecodable images, listed in its metadata.json)'
             if skipped else '')
    raise errors.UserError(
        f'{data_config.name} split {data_config.train_split!r} has {num_train:,} examples{skips}, '
        f'but num_train_steps was computed for data.train_images={expected:,}{source.size_note}; '
        f'to train on these {num_train:,} instead, set --config.data.train_images={num_train} and '
        f'--config.num_train_steps to match (epochs x {num_train} / batch_size).')
  if num_classes is not None and data_config.num_classes < num_classes:
    raise errors.UserError(f'data.num_classes={data_config.num_classes} but {data_config.name} '
                           f'has {num_classes} classes; set data.num_classes (and onehot(...) in '
                           f'the pp strings, and model.num_classes) to at least {num_classes}.')
  if num_classes is not None and data_config.num_classes > num_classes:
    logging.info('data.num_classes=%d > the %d classes of %s: the extra classes never occur.',
                 data_config.num_classes, num_classes, data_config.name)


def open_split(data_config, split: str) -> Records:
  """Opens `split` of data_config's source for random access (prepares embedded sets)."""
  source, release = get_source(data_config.name)
  return source.open(data_config, release, split)
