"""Tests of the iterators: resume equality, sharding, padding, few-shot sampling, bad records."""
import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from base import errors
from data import config as data_config_lib
from data.pp import device_split
from data.stream import pipeline
from data.datasets import sources
from testing.data import data_config
from testing.data import write_multilabel

AUGMENT = ('decode(channels=1)|inception_crop(8)|flip_lr|randaug(2, 20)|value_range(-1, 1)|'
           'onehot(10)|keep("image", "labels")')
from testing.data import MULTILABEL_PP


def take(iterator, n):
  return [next(iterator) for _ in range(n)]


def assert_same_batches(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert sorted(x) == sorted(y)
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])


@pytest.mark.parametrize('shuffle_buffer,pp', [(1000, AUGMENT),   # Full permutation.
                                               (50, AUGMENT.replace('randaug(2, 20)|', ''))])
def test_resume_gives_exactly_the_next_batches(digits_dir, shuffle_buffer, pp):
  # 1000 train digits, batches of 64: batches 14..17 cross the end of epoch 0 (15.6 batches).
  config = data_config(data_dir=digits_dir, pp_train=pp, shuffle_buffer=shuffle_buffer)
  uninterrupted = pipeline.make_train_iterator(config, batch_size=64, seed=3)
  take(uninterrupted, 14)
  state = uninterrupted.get_state()
  assert json.loads(json.dumps(state)) == state and state['batches'] == 14
  expected = take(uninterrupted, 4)
  resumed = pipeline.make_train_iterator(config, batch_size=64, seed=3)
  resumed.set_state(state)
  assert_same_batches(take(resumed, 4), expected)
  assert expected[0]['image'].shape == (64, 8, 8, 1) and expected[0]['labels'].shape == (64, 10)
  assert expected[0]['image'].dtype == np.float32 and expected[0]['labels'].dtype == np.float32


def test_the_device_path_ships_uint8_ids_and_keys_that_resume(digits_dir):
  # With the pp's Split (data.augment_on='device'): the host runs decode|inception_crop and ships
  # the rest's inputs.
  config, cut = data_config(data_dir=digits_dir, pp_train=AUGMENT), device_split.split(AUGMENT)
  uninterrupted = pipeline.make_train_iterator(config, batch_size=64, seed=3, cut=cut)
  take(uninterrupted, 14)
  state = uninterrupted.get_state()
  expected = take(uninterrupted, 2)
  resumed = pipeline.make_train_iterator(config, batch_size=64, seed=3, cut=cut)
  resumed.set_state(state)
  assert_same_batches(take(resumed, 2), expected)
  batch = expected[0]
  assert batch['image'].dtype == np.uint8 and batch['image'].shape == (64, 8, 8, 1)
  assert batch['label'].dtype == np.int32 and batch['label'].shape == (64,)
  keys = batch['augment_key']
  assert keys.dtype == np.uint32 and keys.shape == (64, 2) and len(set(map(bytes, keys))) == 64
  # The host's crop of the same example, run alone: the head's output is what ships.
  head = pipeline.make_train_iterator(
      data_config(data_dir=digits_dir, pp_train='decode(channels=1)|inception_crop(8)|'
                  'keep("image", "label")'), batch_size=64, seed=3)
  head.set_state(state)
  np.testing.assert_array_equal(next(head)['image'], batch['image'])


def test_epochs_are_reshuffled_and_cover_the_data(multilabel):
  # 41 records, batches of 41: batch e is exactly epoch e.
  iterator = pipeline.make_train_iterator(multilabel, batch_size=41, seed=0)
  epochs = [list(b['key']) for b in take(iterator, 3)]
  assert all(sorted(e) == sorted(epochs[0]) and len(set(e)) == 41 for e in epochs)
  assert epochs[0] != epochs[1] != epochs[2]
  other_seed = pipeline.make_train_iterator(multilabel, batch_size=41, seed=1)
  assert list(next(other_seed)['key']) != epochs[0]
  # shuffle_buffer=1 keeps the stored order.
  multilabel = data_config(**{**dataclasses.asdict(multilabel), 'shuffle_buffer': 1})
  stored = next(pipeline.make_train_iterator(multilabel, batch_size=41, seed=0))['key']
  assert list(stored) == [f'img{i}'.encode() for i in range(41)]


def test_multi_hot_batches(multilabel):
  batch = next(pipeline.make_train_iterator(multilabel, batch_size=8, seed=0))
  assert batch['image'].shape == (8, 4, 4, 3) and batch['labels'].shape == (8, 8)
  # Record i has labels {i % 5, 5 + i % 3}: two ones per row.
  for key, labels in zip(batch['key'], batch['labels']):
    i = int(key[3:])
    assert np.flatnonzero(labels).tolist() == [i % 5, 5 + i % 3]


def test_train_shards_are_disjoint_and_cover_the_split(multilabel):
  # 41 records over 2 hosts: shards of 20 and 21; batch 8 -> 4 per host.
  seen = []
  for host in range(2):
    iterator = pipeline.make_train_iterator(multilabel, batch_size=8, seed=0, process_index=host,
                                            process_count=2)
    keys = [k for b in take(iterator, 5) for k in b['key']]
    assert len(keys) == 20
    seen.append(keys[:20 + host] if host == 0 else keys)
  host0 = set(seen[0])
  more = pipeline.make_train_iterator(multilabel, batch_size=8, seed=0, process_index=1,
                                      process_count=2)
  host1 = {k for b in take(more, 6) for k in b['key'][:21]}
  assert len(host0) == 20 and host0.isdisjoint(host1)
  assert host0 | host1 == {f'img{i}'.encode() for i in range(41)}


def test_eval_covers_each_example_once_across_hosts(multilabel):
  # 41 records, 2 hosts, batch 8 (4 per host): every host yields ceil(ceil(41/2)/4) = 6 batches.
  counted = []
  for host in range(2):
    batches = list(pipeline.make_eval_iterator(multilabel, 'train', batch_size=8,
                                               process_index=host, process_count=2))
    assert len(batches) == 6
    assert all(b['mask'].dtype == np.float32 and b['mask'].shape == (4,) for b in batches)
    counted += [k for b in batches for k, m in zip(b['key'], b['mask']) if m == 1]
  assert sorted(counted) == sorted(f'img{i}'.encode() for i in range(41))


def test_eval_pads_the_last_batch(digits_dir):
  config = data_config(data_dir=digits_dir)
  batches = list(pipeline.make_eval_iterator(config, 'test', batch_size=100))
  # 797 = 7 * 100 + 97.
  assert len(batches) == 8 and [b['mask'].sum() for b in batches][-2:] == [100, 97]
  assert batches[-1]['image'].shape == (100, 8, 8, 1)
  with pytest.raises(ValueError, match='does not split over 3 processes'):
    pipeline.make_eval_iterator(config, 'test', batch_size=100, process_count=3)
  with pytest.raises(ValueError, match='does not split over 3 processes'):
    pipeline.make_train_iterator(config, batch_size=64, seed=0, process_count=3)


def test_cache_gives_the_same_batches(digits_dir):
  config = data_config(data_dir=digits_dir, pp_train=AUGMENT.replace('randaug(2, 20)|', ''))
  plain = take(pipeline.make_train_iterator(config, batch_size=32, seed=5), 3)
  config = dataclasses.replace(config, cache=True)
  cached = take(pipeline.make_train_iterator(config, batch_size=32, seed=5), 3)
  assert_same_batches(plain, cached)


def test_state_of_another_run_is_refused(digits_dir):
  config = data_config(data_dir=digits_dir)
  state = pipeline.make_train_iterator(config, batch_size=32, seed=0).get_state()
  other = pipeline.make_train_iterator(config, batch_size=64, seed=0)
  with pytest.raises(ValueError, match='batch_size=32 but this run has 64'):
    other.set_state(state)


def test_fewshot_draws_exact_counts_deterministically(digits_dir):
  config = data_config(data_dir=digits_dir)
  pp = 'decode(channels=1)|resize(28)|value_range(-1, 1)|keep("image", "label")'

  def subset(seed):
    batches = list(pipeline.fewshot_batches(config, 'train', shots=10, seed=seed, pp=pp,
                                            batch_size=32))
    # 100 examples: 3 full batches and 4 real in the last (32 * 4 = 128).
    assert len(batches) == 4 and sum(b['mask'].sum() for b in batches) == 100
    assert batches[0]['image'].shape == (32, 28, 28, 1)
    real = [(b['image'][m > 0], b['label'][m > 0]) for b in batches for m in [b['mask']]]
    return np.concatenate([r[0] for r in real]), np.concatenate([r[1] for r in real])

  images, labels = subset(0)
  assert np.bincount(labels).tolist() == [10] * 10
  again, _ = subset(0)
  other, _ = subset(1)
  np.testing.assert_array_equal(images, again)
  assert not np.array_equal(images, other)
  counts = np.bincount(pipeline.split_labels(config, 'train'))
  assert counts.sum() == 1000 and counts.max() < 200
  with pytest.raises(ValueError, match=rf"class {counts.argmin()} has {counts.min()} examples "
                                       r"in sklearn_digits split 'train', fewer than shots=200"):
    pipeline.fewshot_batches(config, 'train', shots=200, seed=0, pp=pp, batch_size=32)


def test_fewshot_needs_single_label(multilabel):
  with pytest.raises(ValueError, match='is multi-label'):
    pipeline.fewshot_batches(multilabel, 'val', shots=1, seed=0, pp=MULTILABEL_PP, batch_size=4)


@pytest.mark.parametrize('file_format', ['tfrecord', 'array_record'])
def test_corrupt_record_is_reported_with_its_source(tmp_path, file_format):
  pattern = write_multilabel(tmp_path, 'bad', 12, file_format, num_files=2, corrupt={8})
  config = data_config(name='multilabel_records', files=pattern, file_format=file_format,
                       train_split='all', eval_split='all', pp_train=MULTILABEL_PP,
                       pp_eval=MULTILABEL_PP, num_classes=8)
  # Record 8 is the 3rd of the second file (6 records per file).
  where = rf"split 'all' record 8 \(.*bad-00001.{file_format} record 2, key 'img8'\)"
  with pytest.raises(pipeline.CorruptRecordError, match=where + '.*Unknown image file format'):
    take(pipeline.make_train_iterator(config, batch_size=12, seed=0), 1)
  with pytest.raises(pipeline.CorruptRecordError, match=where):
    list(pipeline.make_eval_iterator(config, 'all', batch_size=4))


def test_a_bad_record_in_training_is_one_user_error_line(tmp_path, capsys):
  pattern = write_multilabel(tmp_path, 'bad', 12, 'array_record', num_files=2, corrupt={8})
  config = data_config(name='multilabel_records', files=pattern, file_format='array_record',
                       train_split='all', eval_split='all', pp_train=MULTILABEL_PP,
                       pp_eval=MULTILABEL_PP, num_classes=8)
  train = pipeline.make_train_iterator(config, batch_size=4, seed=0)
  # 3 batches of 4 are one epoch of the 12 records, so they reach record 8.
  assert errors.run_tool(lambda: len(take(train, 3))) == errors.USER_ERROR_STATUS == 2
  line, = capsys.readouterr().err.splitlines()      # One line, no traceback.
  assert line.startswith(f"Error: multilabel_records '{pattern}' split 'all' record 8 (")
  assert 'WebP required. Fix or remove it;' in line
  assert line.endswith('this lists every bad record of the split: '
                       + sources.check_command(config, 'all'))


def test_imagenet2012_mock_data(tmp_path):
  config = data_config(
      name='imagenet2012', data_dir=str(tmp_path), num_classes=1000, train_split='train',
      eval_split='validation',
      pp_train=('decode|inception_crop(16)|flip_lr|randaug(2, 20)|value_range(-1, 1)|'
                'onehot(1000)|keep("image", "labels")'),
      pp_eval=('decode|resize_small(18)|central_crop(16)|value_range(-1, 1)|onehot(1000)|'
               'keep("image", "labels")'))
  with tfds.testing.mock_data(num_examples=24):
    train = pipeline.make_train_iterator(config, batch_size=8, seed=0)
    batch = next(train)
    assert batch['image'].shape == (8, 16, 16, 3) and batch['labels'].shape == (8, 1000)
    np.testing.assert_array_equal(batch['labels'].sum(1), np.ones(8))
    state = train.get_state()
    expected = next(train)
    resumed = pipeline.make_train_iterator(config, batch_size=8, seed=0)
    resumed.set_state(state)
    assert_same_batches([next(resumed)], [expected])
    batches = list(pipeline.make_eval_iterator(config, 'validation', batch_size=16))
    assert [b['mask'].sum() for b in batches] == [16, 8]
    assert batches[0]['image'].shape == (16, 16, 16, 3)


def test_pipelines_run_without_the_autotune_model_thread(digits_dir):
  """Autotuning's model thread can stall an iterator's destructor for tens of seconds with the
  GIL held (see reader.parallel_calls); every pipeline the trainer builds turns it off."""
  config = data_config(data_dir=digits_dir)
  iterators = [pipeline.make_train_iterator(config, batch_size=32, seed=0),
               pipeline.make_eval_iterator(config, 'test', batch_size=100)]
  for iterator in iterators:
    assert iterator.dataset(0).options().autotune.enabled is False
    assert next(iterator)['image'].shape[0] in (32, 100)


def checksums(batches) -> list[str]:
  """The first 16 hex digits of each batch's sha256 over its keys, dtypes, shapes and bytes."""
  digests = []
  for batch in batches:
    digest = hashlib.sha256()
    for key in sorted(batch):
      array = np.ascontiguousarray(batch[key])
      assert array.dtype != object, key   # An object array's bytes are pointers.
      digest.update(f'{key} {array.dtype.str} {array.shape}'.encode() + array.tobytes())
    digests.append(digest.hexdigest()[:16])
  return digests


# What test_tiny_study_batches_are_unchanged computes for the tiny study's data (two runs, the same
# digests): a refactoring of data/ must leave them. After a deliberate change of the data, run the
# test with -s: it prints what it gets.
TINY_STUDY_DIGESTS = {
    'train 0-2': ['d4738703a22b3137', '109960cbfb34baf5', '6e82ed4eddb79843'],
    'train 936-938': ['7c4715afef18ac19', '1fce13ea74930f01', '56ae115918a9e921'],
    'eval 0-1': ['dd47de2dc396de4d', '4f266f638e7e0f10'],
    'fewshot digits 0': ['0b54fb73ccdd6088'],
    'fewshot digits 1': ['e4437c4e0d756e4c'],
    'fewshot fashion_mnist 0': ['129d1010a7e85382'],
    'fewshot fashion_mnist 1': ['4965c08db2bbf338'],
    'digits host 1 of 2': ['f1f1014400fa5f84', '4ecfa2873a3a69d3'],
    'digits eval 6-7': ['d0142533659258b0', '59a5457c203b9234'],
}


@pytest.mark.skipif(not os.path.isdir(sources.DEBIAN_FASHION_MNIST_DIR),
                    reason=f'{sources.DEBIAN_FASHION_MNIST_DIR} absent: the tiny study reads the '
                    'Debian package dataset-fashion-mnist (make install).')
def test_tiny_study_batches_are_unchanged(digits_dir):
  """The batches the tiny study trains, evaluates and draws few-shot sets from, pinned bit for bit
  (TINY_STUDY_DIGESTS), so that a change of the pipeline's code cannot silently change its data."""
  # Imported here, not at the top: the other tests of this file need no config to be importable.
  from configs import tiny  # pylint: disable=g-import-not-at-top
  config = tiny.get_config()
  data = data_config_lib.DataConfig(**config.data.to_dict())
  sources.check_available(data)
  train = pipeline.make_train_iterator(data, batch_size=config.batch_size, seed=config.seed)
  got = {'train 0-2': checksums(take(train, 3))}
  # 60,000 / 64 = 937.5: batch 937 holds the last 32 records of epoch 0 and the first 32 of 1.
  train.set_state({**train.get_state(), 'batches': 936})
  got['train 936-938'] = checksums(take(train, 3))
  got['eval 0-1'] = checksums(take(pipeline.make_eval_iterator(
      data, data.eval_split, batch_size=config.eval.batch_size), 2))
  # The few-shot sources as vmoe/train/train_evals.py fewshot_source makes them for this config.
  for source in (data_config_lib.DataSource('digits'), data.source):
    for seed in (0, 1):
      got[f'fewshot {source.name} {seed}'] = checksums(pipeline.fewshot_batches(
          source, 'train', shots=10, seed=seed, pp=config.fewshot.pp,
          batch_size=config.fewshot.batch_size))
  # Beyond the tiny study: uncached reads, the shuffle-buffer imitation, two hosts and RandAugment;
  # the cached split decoded in the pipeline and the padded last eval batch.
  digits = data_config(data_dir=digits_dir, pp_train=AUGMENT, shuffle_buffer=50)
  got['digits host 1 of 2'] = checksums(take(pipeline.make_train_iterator(
      digits, batch_size=64, seed=7, process_index=1, process_count=2), 2))
  digits = data_config(data_dir=digits_dir, cache=True)
  got['digits eval 6-7'] = checksums(list(pipeline.make_eval_iterator(
      digits, 'test', batch_size=100))[6:])
  print(json.dumps(got, indent=1))
  assert got == TINY_STUDY_DIGESTS


def test_a_saved_order_of_another_process_count_is_refused_in_one_line():
  state = {'version': pipeline.STATE_VERSION, pipeline.PROCESS_COUNT: 2, 'batches': 7}
  pipeline.check_process_count(state, 2, 'The checkpoint of step 7')
  pipeline.check_process_count(None, 4, 'The checkpoint of step 0')     # Saved before any batch.
  with pytest.raises(errors.UserError, match=r'^The checkpoint of step 7 was written by 2 '
                                             r'processes and this run has 4: .* resumes only on '
                                             r'2 processes\. Rerun it on 2 processes, or use a '
                                             r'new --workdir\.$'):
    pipeline.check_process_count(state, 4, 'The checkpoint of step 7')
