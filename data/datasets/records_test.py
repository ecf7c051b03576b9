"""Tests of random access to TFRecord / ArrayRecord files and the multi-label record format."""
import json
import os

import pytest
import tensorflow as tf

from data.datasets import image_check
from data.datasets import records
from testing.data import CONVERTIBLE
from testing.data import UNDECODABLE
from testing.data import jpeg
from testing.data import odd_images
from testing.data import write_multilabel


@pytest.mark.parametrize('file_format', records.FILE_FORMATS)
def test_random_access_matches_files_in_order(tmp_path, file_format):
  pattern = write_multilabel(tmp_path, 'x', 7, file_format, num_files=3)   # Files of 3, 2, 2.
  files = records.RecordFiles(records.match_files(pattern), file_format)
  assert len(files) == 7
  parsed = [records.parse_multilabel(tf.constant(s)) for s in files.read([6, 0, 3])]
  assert [p['key'].numpy() for p in parsed] == [b'img6', b'img0', b'img3']
  # Record i has labels [i % 5, 5 + i % 3]: record 6 -> [1, 5].
  assert parsed[0]['labels'].numpy().tolist() == [1, 5]
  assert parsed[0]['labels'].dtype == tf.int64
  assert files.locate(4).endswith(f'x-00001.{file_format} record 1')   # 3 in file 0, 4 is 2nd in 1.
  with pytest.raises(IndexError, match='out of range'):
    files.read([7])


def test_truncated_tfrecord_is_reported(tmp_path):
  pattern = write_multilabel(tmp_path, 'x', 3, 'tfrecord', num_files=1)
  path = records.match_files(pattern)[0]
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) - 10)
  with pytest.raises(ValueError, match='record 2 .* truncated'):
    records.RecordFiles([path], 'tfrecord')


def test_errors_name_what_to_fix(tmp_path):
  with pytest.raises(FileNotFoundError, match='no files match'):
    records.match_files(str(tmp_path / 'none-*.tfrecord'))
  with pytest.raises(ValueError, match='valid: tfrecord, array_record'):
    records.RecordFiles([], 'parquet')


@pytest.mark.parametrize('file_format', records.FILE_FORMATS)
def test_writer_reencodes_or_leaves_out_odd_images(tmp_path, file_format):
  examples = [(jpeg(i), [i], f'good{i}') for i in range(3)]
  examples += [(data, [7], kind) for kind, data in odd_images(5).items()]
  path = str(tmp_path / f'x.{file_format}')
  metadata = records.write_multilabel(path, examples, file_format, workers=2)
  # 3 good + 3 convertible of the 6 odd kinds written; the 3 undecodable left out and listed.
  assert metadata['records'] == 6
  assert sorted(s['name'] for s in metadata[image_check.SKIPPED]) == sorted(UNDECODABLE)
  assert sorted(s['name'] for s in metadata[image_check.REENCODED]) == sorted(CONVERTIBLE)
  with open(path + '.metadata.json') as f:
    assert json.load(f) == metadata
  files = records.RecordFiles([path], file_format)
  parsed = [records.parse_multilabel(tf.constant(s)) for s in files.read(range(len(files)))]
  assert [p['key'].numpy().decode() for p in parsed] == ['good0', 'good1', 'good2'] + [
      kind for kind in odd_images(5) if kind in CONVERTIBLE]
  assert parsed[0]['image'].numpy() == jpeg(0)         # A good JPEG is stored unchanged.
  for p in parsed:
    assert tf.io.decode_jpeg(p['image'], channels=3).shape == (12, 10, 3)


def test_a_writer_stopped_midway_leaves_nothing_under_the_final_name(tmp_path):
  path = str(tmp_path / 'part.array_record')
  with pytest.raises(RuntimeError):
    with records.RecordWriter(path, 'array_record') as writer:
      writer.write(b'one')
      raise RuntimeError('killed')
  assert not os.path.exists(path) and os.path.exists(path + '.incomplete')
  with records.RecordWriter(path, 'array_record') as writer:
    writer.write(b'one')
  assert os.path.exists(path) and not os.path.exists(path + '.incomplete')
