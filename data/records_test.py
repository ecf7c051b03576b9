"""Tests of random access to TFRecord / ArrayRecord files and the multi-label record format."""
import os

import pytest
import tensorflow as tf

from data import records
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
