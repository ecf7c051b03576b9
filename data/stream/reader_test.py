"""Tests of the reader: examples by index in the order asked, and a failing record named."""
import numpy as np
import pytest
import tensorflow as tf

from base import errors
from base import host
from data.datasets import sources
from data.pp import ops
from data.stream import reader as reader_lib
from testing.data import data_config
from testing.data import write_multilabel

PP = 'decode|keep("key")'


def open_reader(tmp_path, corrupt=()) -> reader_lib.Reader:
  """A reader of 150 multi-label records in two files (more than one CHUNK of reads)."""
  pattern = write_multilabel(tmp_path, 'all', 150, 'array_record', num_files=2, corrupt=corrupt)
  config = data_config(name='multilabel_records', files=pattern, file_format='array_record',
                       num_classes=8)
  return reader_lib.Reader(sources.open_split(config, 'all'), ops.build(PP), PP, None)


def test_examples_come_in_the_order_of_the_slots(tmp_path):
  reader = open_reader(tmp_path)
  indices = np.random.default_rng(0).permutation(150)
  positions = np.arange(150) + 1000
  slots = tf.data.Dataset.from_tensor_slices((positions, indices))
  got = [(int(t), example['key'].decode()) for t, example in
         reader.examples(slots).as_numpy_iterator()]
  assert got == [(1000 + k, f'img{i}') for k, i in enumerate(indices)]
  assert reader.example(7)['key'].numpy() == b'img7'


def test_a_failing_record_is_named(tmp_path):
  reader = open_reader(tmp_path, corrupt={80})
  process = lambda example: ops.apply(reader.steps, example, tf.constant([0, 0], tf.int64))
  assert reader.failure(79, process) is None
  # 150 records over 2 files of 75: record 80 is the 6th (number 5) of the second.
  report = reader.failure(80, process)
  assert report.startswith(
      f"multilabel_records '{tmp_path}/all-*.array_record' split 'all' record 80 "
      f"({tmp_path}/all-00001.array_record record 5, key 'img80') failed in pp")
  assert report.endswith('failed in pp "decode|keep("key")": Unknown image file format. One of '
                         'JPEG, JPEG XL, PNG, GIF, BMP, WebP required.')
  assert '{{function_node' not in report and '\n' not in report


def test_parallel_calls_default_and_override(monkeypatch):
  monkeypatch.delenv(reader_lib.PARALLEL_CALLS_VARIABLE, raising=False)
  assert reader_lib.parallel_calls() == reader_lib.default_parallel_calls()
  cores = host.usable_cores()
  assert reader_lib.default_parallel_calls({}) == cores
  # Two processes of launch/local.sh on this host share its cores; Slurm's per-task mask does not.
  local = {'JAX_COORDINATOR_ADDRESS': 'localhost:1', 'JAX_NUM_PROCESSES': '2'}
  assert reader_lib.default_parallel_calls(local) == max(1, cores // 2)
  assert reader_lib.default_parallel_calls({**local, 'SLURM_CPUS_PER_TASK': '4'}) == cores
  monkeypatch.setenv(reader_lib.PARALLEL_CALLS_VARIABLE, '24')
  assert reader_lib.parallel_calls() == 24


@pytest.mark.parametrize('text', ['0', '-3', 'eight', '2.5', ''])
def test_a_bad_parallel_calls_value_is_a_user_error(monkeypatch, text):
  monkeypatch.setenv(reader_lib.PARALLEL_CALLS_VARIABLE, text)
  with pytest.raises(errors.UserError, match='VMOE_DATA_PARALLEL_CALLS=.*positive integer'):
    reader_lib.parallel_calls()
