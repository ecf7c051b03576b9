"""Tests of the ImageNet-21k builder on small archives in the real on-disk layout."""
import dataclasses
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from data import config as data_config_lib
from data.datasets import image_check
from data.datasets import imagenet21k
from data.datasets import sources
from data import prepare
from data.stream import pipeline
from testing.data import CONVERTIBLE
from testing.data import UNDECODABLE
from testing.data import data_config
from testing.data import jpeg
from testing.data import odd_images

# Listed out of order on purpose: labels must follow the sorted ids.
SYNSETS = {'n00000300': 3, 'n00000100': 2, 'n00000200': 4}   # synset -> images
ODD_SYNSET = 'n00000200'      # With odd=True it also holds one member of each odd kind.


def write_archive(path: str, prefix: str = '', odd: bool = False) -> None:
  """SYNSETS' tiny JPEGs in the release layout, plus a README; with `odd`, ODD_SYNSET also holds
  n00000200_KIND.JPEG for each kind of testdata.odd_images."""
  images = {synset: [(f'{synset}_{i}.JPEG', jpeg(10 * s + i, (9, 7))) for i in range(count)]
            for s, (synset, count) in enumerate(SYNSETS.items())}
  if odd:
    images[ODD_SYNSET] += [(f'{ODD_SYNSET}_{kind}.JPEG', data)
                           for kind, data in odd_images(99, (9, 7)).items()]
  imagenet21k.write_archive(path, images, prefix, extra={'README.txt': b'not a synset'})


def test_listing_sorts_synsets_and_skips_other_files(tmp_path):
  path = str(tmp_path / 'fall11_whole.tar')
  write_archive(path)
  assert imagenet21k.list_synsets(path) == sorted(SYNSETS)
  streamed = list(imagenet21k.stream_images(path))
  assert len(streamed) == sum(SYNSETS.values())
  assert streamed[0][:2] == ('n00000300', 'n00000300_0.JPEG')


@pytest.mark.parametrize('release,prefix', [('fall11', ''), ('winter21', 'winter21_whole/')])
def test_build_and_read(tmp_path, release, prefix):
  manual = tmp_path / 'manual'
  manual.mkdir()
  archive = dict((r.name, r.archive) for r in imagenet21k.RELEASES)[release]
  write_archive(str(manual / archive), prefix)
  config = data_config(name=f'imagenet21k/{release}', data_dir=str(tmp_path / 'tfds'),
                       manual_dir=str(manual), train_split='full[3:]',
                       eval_split='full[:3]', num_classes=3)
  # Not built yet: the error gives the build command and says the archive is there.
  with pytest.raises(FileNotFoundError) as error:
    sources.check_available(config)
  assert f'{archive}: found' in str(error.value)
  assert f'python -m data.prepare build imagenet21k/{release} --manual' in str(error.value)

  prepare.main(['build', config.name, '--manual_dir', str(manual), '--data_dir', config.data_dir])
  sources.check_available(config)
  # data.train_images is what num_train_steps counts: the paper configs' 14,197,122 - 102,400 =
  # 14,094,722 fall11 images. A split of another size, here full[3:] = 9 - 3 = 6 images, is
  # refused in one line that names fall11 and the override.
  sources.check_available(data_config(**{**dataclasses.asdict(config), 'train_images': 6}))
  with pytest.raises(ValueError) as error:
    sources.check_available(
        data_config(**{**dataclasses.asdict(config), 'train_images': 14_094_722}))
  text = str(error.value)
  assert '\n' not in text
  for expected in (f"imagenet21k/{release} split 'full[3:]' has 6 examples",
                   'data.train_images=14,094,722', 'ImageNet-21k fall11 (14,197,122 images',
                   'fall11_whole.tar', 'python -m data.prepare build imagenet21k/fall11',
                   '--config.data.train_images=6 and --config.num_train_steps'):
    assert expected in text, expected
  builder = imagenet21k.Imagenet21k(config=release, data_dir=config.data_dir)
  assert builder.info.features['label'].names == sorted(SYNSETS)
  assert builder.info.splits['full'].num_examples == 9
  # The aliases resolve to V-MoE's slices, which TFDS refuses on 9 images (its slices must fit).
  for alias, bound in (('holdout', ':102400'), ('train_minus_holdout', '102400:')):
    with pytest.raises(ValueError, match=rf'{alias}.*\[{bound}.* incompatible with 9'):
      sources.open_split(config, alias)

  batch = next(pipeline.make_eval_iterator(config, 'full', batch_size=9,
                                           pp='keep("label", "file_name")'))
  assert batch['mask'].sum() == 9
  for label, name in zip(batch['label'], batch['file_name']):
    assert sorted(SYNSETS)[label] == name.decode()[:9]   # Label = rank of the synset id.


def build(tmp_path, odd: bool) -> tuple:
  """(data config, builder) of a fall11 build of write_archive(odd=odd) in tmp_path."""
  manual = tmp_path / 'manual'
  manual.mkdir(parents=True)
  write_archive(str(manual / 'fall11_whole.tar'), odd=odd)
  config = data_config(name='imagenet21k', data_dir=str(tmp_path / 'tfds'), manual_dir=str(manual),
                       train_split='full[3:]', eval_split='full[:3]', num_classes=3)
  prepare.main(['build', config.name, '--manual_dir', str(manual), '--data_dir', config.data_dir])
  return config, tfds.builder_from_directory(
      imagenet21k.Imagenet21k(config='fall11', data_dir=config.data_dir).data_dir)


def stored_names(config) -> list[str]:
  """The file names of split 'full' (at most 12 images) in their stored order."""
  batch = next(pipeline.make_eval_iterator(config, 'full', batch_size=12, pp='keep("file_name")'))
  return [name.decode() for name, real in zip(batch['file_name'], batch['mask']) if real]


def test_odd_members_are_reencoded_or_skipped_and_listed(tmp_path, caplog):
  config, builder = build(tmp_path, odd=True)
  odd = {f'{ODD_SYNSET}_{kind}.JPEG': kind for kind in UNDECODABLE + CONVERTIBLE}
  skipped = builder.info.metadata[image_check.SKIPPED]
  reencoded = builder.info.metadata[image_check.REENCODED]
  assert sorted(odd[s['name']] for s in skipped) == sorted(UNDECODABLE)
  assert sorted(odd[s['name']] for s in reencoded) == sorted(CONVERTIBLE)
  for listed in skipped + reencoded:                  # Each is in the build's log too.
    assert f'{listed["name"]} ' in caplog.text and listed['reason'] in caplog.text
  # 9 JPEGs + 3 re-encoded members stored; every stored image decodes as the pipeline decodes.
  assert builder.info.splits['full'].num_examples == 12
  batch = next(pipeline.make_eval_iterator(config, 'full', batch_size=12,
                                           pp='decode|resize(4)|keep("image", "file_name")'))
  assert batch['image'].shape == (12, 4, 4, 3)
  assert {n.decode() for n in batch['file_name']} >= {n for n, k in odd.items()
                                                      if k in CONVERTIBLE}
  # The size check counts the release's images less the recorded skips: an archive of 15
  # members with 3 skipped makes a full[3:] of 15 - 3 - 3 = 9 images, accepted for
  # data.train_images 15 - 3 = 12 (the release's count of full[3:]) and 9 (the split's own).
  for train_images in (12, 9):
    sources.check_available(dataclasses.replace(config, train_images=train_images))
  with pytest.raises(ValueError,
                     match=r"'full\[3:\]' has 9 examples \(its build skipped 3 undecodable"):
    sources.check_available(dataclasses.replace(config, train_images=11))


def test_skipping_keeps_the_stored_order_of_the_others(tmp_path):
  # The holdout (the first 102,400 images) must not depend on which members were skipped: TFDS
  # stores by key, so the build with odd members stores the others in the same order.
  clean = stored_names(build(tmp_path / 'clean', odd=False)[0])
  with_odd = stored_names(build(tmp_path / 'odd', odd=True)[0])
  assert len(clean) == 9 and len(with_odd) == 12
  assert [name for name in with_odd if name in clean] == clean


def test_an_archive_of_the_other_release_is_refused(caplog):
  fall11, winter21 = imagenet21k.RELEASES
  # winter21's 19,167 synsets under fall11's name (a renamed archive): refused before building.
  with pytest.raises(ValueError) as error:
    imagenet21k.check_release('m/fall11_whole.tar', 19_167, fall11)
  text = str(error.value)
  assert '\n' not in text
  for expected in ('m/fall11_whole.tar holds 19,167 synsets, the winter21 release',
                   'built as fall11 (21,841 synsets)', 'put the real fall11_whole.tar',
                   'as imagenet21k/winter21 under its own name winter21_whole.tar.gz'):
    assert expected in text, expected
  with pytest.raises(ValueError, match='holds 21,841 synsets, the fall11 release'):
    imagenet21k.check_release('m/winter21_whole.tar.gz', 21_841, winter21)
  # The release's own count passes; other counts (small or partial archives) only warn.
  imagenet21k.check_release('m/fall11_whole.tar', 21_841, fall11)
  imagenet21k.check_release('m/winter21_whole.tar.gz', 19_167, winter21)
  assert not caplog.records
  imagenet21k.check_release('m/fall11_whole.tar', 3, fall11)
  assert 'holds 3 synsets; the fall11 release has 21841' in caplog.text


def test_archive_without_synsets_fails(tmp_path):
  path = str(tmp_path / 'fall11_whole.tar')
  imagenet21k.write_archive(path, {}, extra={'photo.jpg': jpeg(0)})
  with pytest.raises(ValueError, match='no nXXXXXXXX.tar members'):
    imagenet21k.list_synsets(path)


def test_holdout_aliases_are_vmoe_s():
  assert data_config_lib.IMAGENET21K_SPLITS == {'holdout': 'full[:102400]',
                                              'train_minus_holdout': 'full[102400:]'}
  assert [r.num_synsets for r in imagenet21k.RELEASES] == [21_841, 19_167]
  assert not os.path.basename(imagenet21k.RELEASES[1].archive).endswith('.tar')  # tar.gz
  assert np.all(np.diff([int(s[1:]) for s in sorted(SYNSETS)]) > 0)
