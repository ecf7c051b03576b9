"""One-time data preparation: build a TFDS data set, or add array_record files to one.

  (from the repository root)
  .venv/bin/python -m data.prepare build imagenet2012 --manual_dir=DIR [--data_dir=DIR]
  .venv/bin/python -m data.prepare build imagenet21k/fall11 --manual_dir=DIR [--data_dir=DIR]
  .venv/bin/python -m data.prepare convert DATA_DIR/imagenet2012/5.1.0
  .venv/bin/python -m data.prepare embedded [--data_dir=DIR]
  .venv/bin/python -m data.prepare check NAME --split=SPLIT [--data_dir=DIR] [--files=GLOB ...]

build: prepares a source of data/datasets/sources.py in the array_record format the pipeline reads
  by random access (fashion_mnist and digits prepare themselves on first use).
convert: writes an array_record copy of every TFRecord shard of a data set already prepared in
  the TFRecord format (TFDS's default) and records the new format in its dataset_info.json, so
  an existing ImageNet need not be rebuilt from the archives. Needs as much free space again.
embedded: prepares Fashion-MNIST and digits now rather than on first use (`make test` does, so
  that test processes running in parallel do not race to prepare them).
check: decodes every record of a prepared split as the pp op `decode` does and lists those that
  fail (exit status 1 and their count; 0 if none). A training run that meets such a record stops
  with this command in its error (sources.check_command).
TFDS's own `tfds build` and `tfds convert_format` do the same, but that CLI imports apache_beam,
which this project does not install.
"""
import argparse
import os
import sys

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from base import errors
from data import config as data_config
from data.datasets import records
from data.datasets import sources
from data.pp import ops
from data.stream import orders
from data.stream import reader as reader_lib


def build(name: str, manual_dir: str | None, data_dir: str | None) -> str:
  """Prepares source `name` from the archives in manual_dir; returns the data set's directory."""
  source, release = sources.get_source(name)
  if not isinstance(source, sources.TfdsSource):
    raise ValueError(f'{name} is read directly from its files; there is nothing to build.')
  config = data_config.DataSource(name, data_dir=data_dir, manual_dir=manual_dir)
  builder = source.make_builder(config, release, file_format=sources.ARRAY_RECORD)
  try:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  except ModuleNotFoundError as e:
    if e.name != 'importlib_resources':
      raise
    # TFDS 4.9.10 imports it for builders inside its package (imagenet2012) but only declares it
    # for Python < 3.9; see data/datasets/embedded.py LocalBuilder.
    raise ModuleNotFoundError(
        f'Building {name} with TFDS needs the package importlib_resources: '
        '.venv/bin/pip install importlib_resources (requirements.txt should pin it).') from e
  return builder.data_dir


EMBEDDED = ('fashion_mnist', 'digits')


def prepare_embedded(data_dir: str | None) -> None:
  """Prepares the embedded sets (seconds; a no-op when they are prepared)."""
  for name in EMBEDDED:
    sources.open_split(data_config.DataSource(name, data_dir=data_dir), 'train')


def convert(dataset_version_dir: str) -> int:
  """Adds array_record shards beside the TFRecord shards of a prepared data set.

  Returns the number of shards written (existing array_record shards are kept, so an
  interrupted conversion resumes).
  """
  builder = tfds.builder_from_directory(dataset_version_dir)
  info = builder.info
  written = 0
  for split in info.splits.values():
    source = split.filename_template
    target = source.replace(filetype_suffix=sources.ARRAY_RECORD.file_suffix)
    for shard in range(split.num_shards):
      out_path = os.fspath(target.sharded_filepath(shard_index=shard, num_shards=split.num_shards))
      if os.path.exists(out_path):
        continue
      in_path = os.fspath(source.sharded_filepath(shard_index=shard, num_shards=split.num_shards))
      with records.RecordWriter(out_path, 'array_record') as writer:   # Renamed when complete.
        for record in tf.data.TFRecordDataset(in_path).as_numpy_iterator():
          writer.write(record)
      written += 1
      logging.info('Wrote %s', out_path)
  if sources.ARRAY_RECORD not in info.available_file_formats():
    info.add_alternative_file_format(sources.ARRAY_RECORD)
    info.write_to_directory(dataset_version_dir)
  return written


CHECK_PP = 'decode'    # What every pp string starts with: the step a bad image fails in.


def check(source: data_config.DataSource, split: str) -> tuple[int, list[str]]:
  """(records in `split`, a report for each record that does not parse or decode).

  All records go through the reader and `decode` in parallel, as in training, with the failing
  ones dropped (tf.data's ignore_errors: a check may skip, a training run may not); those missing
  from the output are then re-read one by one for their report.
  """
  split_records = sources.open_split(source, split)
  reader = reader_lib.Reader(split_records, ops.build(CHECK_PP), CHECK_PP, None)
  seed = tf.zeros([2], tf.int64)   # `decode` draws no randomness.
  decode = lambda example: ops.apply(reader.steps, example, seed)
  # The image's shape is the output: a decode whose result went unused could be pruned away.
  decoded = orders.without_autograph(
      lambda t, example: (t, tf.shape(decode(example)['image'])))
  slots = orders.OnePass(np.arange(split_records.num_examples)).slots(0)
  passed = reader.examples(slots).map(decoded, num_parallel_calls=reader_lib.parallel_calls())
  ok = np.zeros(split_records.num_examples, bool)
  for positions, _ in passed.ignore_errors().batch(1024).as_numpy_iterator():
    ok[positions] = True
  reports = (reader.failure(int(i), decode) for i in np.flatnonzero(~ok))
  return split_records.num_examples, [r for r in reports if r is not None]


def _data_source(args) -> data_config.DataSource:
  return data_config.DataSource(args.name, **{o: getattr(args, o) for o in sources.CHECK_OPTIONS})


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  commands = parser.add_subparsers(dest='command', required=True)
  build_parser = commands.add_parser('build', help='prepare a source from its archives')
  build_parser.add_argument('name', help=f'one of {", ".join(sorted(sources.SOURCES))} '
                            '(imagenet21k/fall11 or /winter21)')
  build_parser.add_argument('--manual_dir', default=None, help='directory holding the archives')
  build_parser.add_argument('--data_dir', default=None, help='TFDS data_dir (default: TFDS\'s)')
  convert_parser = commands.add_parser('convert', help='add array_record files to a data set')
  convert_parser.add_argument('dataset_version_dir', help='e.g. DATA_DIR/imagenet2012/5.1.0')
  embedded_parser = commands.add_parser('embedded', help=f'prepare {" and ".join(EMBEDDED)}')
  embedded_parser.add_argument('--data_dir', default=None, help='TFDS data_dir (default: TFDS\'s)')
  check_parser = commands.add_parser(
      'check', help='list the records of a split that fail to decode')
  check_parser.add_argument('name', help='a data.name, e.g. imagenet21k/fall11')
  check_parser.add_argument('--split', required=True, help='e.g. full, train_minus_holdout')
  for option in sources.CHECK_OPTIONS:   # The DataSource fields sources.check_command writes.
    check_parser.add_argument(f'--{option}', default=None, help=f'data.{option}')
  args = parser.parse_args(argv)
  if args.command == 'check':
    total, bad = check(_data_source(args), args.split)
    for report in bad:
      print(report)
    print(f'{len(bad)} of {total:,} records of {args.name} split {args.split!r} fail to decode.')
    return 1 if bad else 0
  if args.command == 'build':
    print(f'Prepared {args.name} in {build(args.name, args.manual_dir, args.data_dir)}.')
  elif args.command == 'embedded':
    prepare_embedded(args.data_dir)
    print(f'Prepared {" and ".join(EMBEDDED)}.')
  else:
    print(f'Wrote {convert(args.dataset_version_dir)} array_record shards in '
          f'{args.dataset_version_dir}.')
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
