"""Tests of the source registry and of check_available's errors (they must say what to do)."""
import dataclasses
import os

import pytest
import tensorflow_datasets as tfds

from data import config as data_config_lib
from data.datasets import embedded
from data.datasets import sources
from testing.data import data_config
from testing.data import write_multilabel


def replace(config, **changes):
  return data_config(**{**dataclasses.asdict(config), **changes})


def test_unknown_source_lists_valid_names():
  with pytest.raises(ValueError, match='valid: digits, fashion_mnist, imagenet2012, '
                                       'imagenet2012_real, imagenet21k, imagenet_v2, '
                                       'multilabel_records'):
    sources.check_available(data_config(name='jft300m'))
  with pytest.raises(ValueError, match='valid: imagenet21k/fall11, imagenet21k/winter21'):
    sources.check_available(data_config(name='imagenet21k/spring99'))
  with pytest.raises(ValueError, match='only imagenet21k has releases'):
    sources.get_source('digits/x')


def test_missing_imagenet2012_gives_the_steps(tmp_path):
  manual = tmp_path / 'manual'
  manual.mkdir()
  (manual / 'ILSVRC2012_img_val.tar').write_bytes(b'')
  config = data_config(name='imagenet2012', data_dir=str(tmp_path / 'tfds'),
                       manual_dir=str(manual), train_split='train', eval_split='validation',
                       num_classes=1000)
  with pytest.raises(FileNotFoundError) as error:
    sources.check_available(config)
  text = str(error.value)
  for expected in ['https://image-net.org/download-images.php',
                   'ILSVRC2012_img_train.tar: MISSING', 'ILSVRC2012_img_val.tar: found',
                   f'python -m data.prepare build imagenet2012 --manual_dir={manual} '
                   f'--data_dir={tmp_path}/tfds',
                   f'--config.data.data_dir={tmp_path}/tfds', f'--config.data.manual_dir={manual}']:
    assert expected in text, expected
  # Opening a split gives the same steps.
  with pytest.raises(FileNotFoundError, match='ILSVRC2012_img_train.tar: MISSING'):
    sources.open_split(config, 'validation')


def test_missing_imagenet_v2_and_real_give_their_steps(tmp_path):
  # The ImageNet-1k rung's evaluation sets (configs/ilsvrc_s32.py eval.sets; docs/data.md).
  data_dir = tmp_path / 'tfds'
  v2 = sources_lib_config('imagenet_v2', data_dir)
  with pytest.raises(FileNotFoundError, match='ImageNet-V2 .* not prepared'):
    sources.get_source('imagenet_v2')[0].check(v2, None, ['test'])
  real = sources_lib_config('imagenet2012_real', data_dir)
  with pytest.raises(FileNotFoundError) as error:
    sources.get_source('imagenet2012_real')[0].check(real, None, ['validation'])
  assert 'ILSVRC2012_img_val.tar' in str(error.value)
  assert 'python -m data.prepare build imagenet2012_real --manual_dir=MANUAL_DIR' in str(
      error.value)


def test_real_is_multi_label(tmp_path):
  # ReaL's labels are lists ('real_label'): the records have no single-label class count, and
  # multi_hot makes the (B, 1000) targets that precision@1 reads.
  config = sources_lib_config('imagenet2012_real', tmp_path)
  with tfds.testing.mock_data(num_examples=4):
    records = sources.open_split(config, 'validation')
    assert records.num_classes is None
    assert sources.get_source('imagenet2012_real')[0]._classes(
        tfds.builder('imagenet2012_real').info.features) == (1000, True)


def sources_lib_config(name, data_dir):
  return data_config_lib.DataSource(name, data_dir=str(data_dir))


def test_missing_imagenet21k_without_manual_dir(tmp_path):
  config = data_config(name='imagenet21k', data_dir=str(tmp_path), train_split='full',
                       eval_split='holdout', num_classes=21843)
  with pytest.raises(FileNotFoundError) as error:
    sources.check_available(config)
  text = str(error.value)
  assert 'data.manual_dir is not set' in text
  assert 'download fall11_whole.tar' in text
  assert ('.venv/bin/python -m data.prepare build imagenet21k --manual_dir=MANUAL_DIR '
          f'--data_dir={tmp_path}') in text


def test_tfrecord_prepared_data_asks_for_conversion(tmp_path):
  builder = embedded.SklearnDigits(data_dir=str(tmp_path), file_format='tfrecord')
  builder.download_and_prepare()
  with pytest.raises(FileNotFoundError, match=r'python -m data.prepare convert .*/sklearn_digits/'
                                              r'1.0.0$'):
    sources.check_available(data_config(data_dir=str(tmp_path)))


def test_fashion_mnist_fallback_failure_says_how_to_install(tmp_path, monkeypatch):
  # No IDX directory -> TFDS's fashion_mnist download, impossible offline (or without
  # importlib_resources, see data/datasets/embedded.py LocalBuilder): the error lists the ways to
  # get the data. The download fails at once here, as offline; TFDS's own retries would take
  # minutes.
  def offline(*args, **kwargs):
    raise ConnectionError('no network (test)')
  for method in ('download', 'download_and_extract'):
    monkeypatch.setattr(tfds.download.DownloadManager, method, offline)
  config = data_config(name='fashion_mnist', data_dir=str(tmp_path / 'tfds'),
                       manual_dir=str(tmp_path / 'no_idx_here'))
  with pytest.raises(FileNotFoundError) as error:
    sources.check_available(config)
  text = str(error.value)
  assert 'sudo apt-get install dataset-fashion-mnist' in text
  assert '--config.data.manual_dir=DIR' in text and '--config.data.data_dir' in text


def test_pp_strings_are_checked_first():
  with pytest.raises(ValueError, match="data.pp_eval: unknown pp op 'mixup'"):
    sources.check_available(data_config(pp_eval='decode|mixup(0.5)'))


def test_split_and_class_checks(digits_dir):
  with pytest.raises(ValueError, match="bad split 'validation'.*valid splits: train, test"):
    sources.check_available(data_config(data_dir=digits_dir, eval_split='validation'))
  with pytest.raises(ValueError, match='data.num_classes=5 but digits has 10 classes'):
    sources.check_available(data_config(data_dir=digits_dir, num_classes=5))
  sources.check_available(data_config(data_dir=digits_dir, train_split='train[:50%]'))
  records = sources.open_split(data_config(data_dir=digits_dir), 'train[:10%]')
  assert records.num_examples == 100 and records.num_classes == 10
  assert 'sklearn_digits-train.array_record' in records.locate(3)


def test_multilabel_records_splits(tmp_path):
  write_multilabel(tmp_path, 'train', 10, 'tfrecord')
  write_multilabel(tmp_path, 'val', 4, 'tfrecord')
  files = os.path.join(str(tmp_path), '{split}-*.tfrecord')
  config = data_config(name='multilabel_records', files=files, file_format='tfrecord',
                       train_split='train', eval_split='val[:50%]', num_classes=8)
  sources.check_available(config)
  assert sources.open_split(config, 'val[:50%]').num_examples == 2
  records = sources.open_split(config, 'train[-3:]')
  assert records.num_examples == 3 and records.num_classes is None
  assert records.locate(0).endswith('train-00001.tfrecord record 2')   # Global record 7.
  with pytest.raises(FileNotFoundError, match="split 'test'.*set --config.data.files"):
    sources.check_available(replace(config, eval_split='test'))
  with pytest.raises(ValueError, match='only split is "all"'):
    sources.open_split(replace(config, files=str(tmp_path / '*')), 'train')
  with pytest.raises(ValueError, match='valid: tfrecord, array_record'):
    sources.check_available(replace(config, file_format='csv'))
  with pytest.raises(ValueError, match='needs data.files'):
    sources.check_available(replace(config, files=None))
  with pytest.raises(ValueError, match='selects no records'):
    sources.open_split(config, 'val[4:]')
