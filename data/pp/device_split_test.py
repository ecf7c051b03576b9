"""Where a pp string is cut under data.augment_on = 'device', and what the host ships."""

import numpy as np
import pytest
import tensorflow as tf

from data import config as data_config_lib
from data.pp import device_split
from data.stream import shipping
from testing.data import data_config

PAPER_PP = ('decode|inception_crop(224)|flip_lr|randaug(2, 20)|value_range(-1, 1)|'
            'onehot(21843, key="label", key_result="labels")|keep("image", "labels")')


def test_the_paper_pp_leaves_decode_and_crop_to_the_host():
  cut = device_split.split(PAPER_PP)
  assert cut.head_length == 2 and [op.name for op in cut.tail] == [
      'flip_lr', 'randaug', 'value_range', 'onehot', 'keep']
  assert cut.random
  assert cut.shipped_shapes((224, 224, 3)) == {
      'image': ((224, 224, 3), 'uint8'), 'label': ((), 'int32'),
      device_split.AUGMENT_KEY: ((2,), 'uint32')}


def test_evaluation_and_fewshot_tails_ship_uint8_and_ids():
  evaluation = device_split.split('decode|resize_small(256)|central_crop(224)|value_range(-1, 1)|'
                                  'multi_hot(1000, key="real_label")|keep("image", "labels")')
  assert not evaluation.random and evaluation.head_length == 3
  assert evaluation.shipped_shapes((224, 224, 3)) == {
      'image': ((224, 224, 3), 'uint8'), 'real_label': ((device_split.MAX_LABEL_IDS,), 'int32')}
  fewshot = device_split.split('decode|resize(8)|value_range(-1, 1)|keep("image", "label")')
  assert fewshot.passed_keys() == ('label',)     # The host ships the int 'label' as it is.
  with pytest.raises(ValueError, match='keeps'):   # The training step reads no int 'label'.
    fewshot.shipped_shapes((8, 8, 3))


def test_a_pp_that_ends_in_the_hosts_ops_has_no_tail_and_a_tail_must_end_in_keep():
  assert device_split.split('decode|value_range(-1, 1)|resize(8)').tail == ()
  with pytest.raises(ValueError, match='keep'):
    device_split.split('decode|value_range(-1, 1)|onehot(10)')
  with pytest.raises(ValueError, match='augment_on must be one of host, device'):
    data_config(augment_on='gpu')


def ship(pp: str, example: dict, seed=(5, 6)) -> dict:
  return shipping.shipper(device_split.split(pp))(example, tf.constant(seed, tf.int64))


def test_the_host_ships_its_image_the_ids_and_the_seed_as_a_key():
  image = tf.constant(np.arange(12, dtype=np.uint8).reshape(2, 2, 3))
  seed = tf.random.experimental.stateless_fold_in(tf.constant([3, 1], tf.int64),
                                                  tf.constant(1234, tf.int64))
  out = shipping.shipper(device_split.split(PAPER_PP))(
      {'image': image, 'label': tf.constant(7, tf.int64), 'key': tf.constant('a')}, seed)
  assert sorted(out) == ['augment_key', 'image', 'label']
  assert out['label'].dtype == tf.int32 and int(out['label']) == 7
  assert out['augment_key'].dtype == tf.uint32
  np.testing.assert_array_equal(out['augment_key'].numpy(),
                                (seed.numpy() & np.int64(0xFFFFFFFF)).astype(np.uint32))
  multi = ship('decode|multi_hot(8)|keep("image", "labels")',
               {'image': image, 'labels': tf.constant([3, 0], tf.int64)})
  assert multi['labels'].numpy().tolist() == [3, 0] + [-1] * (device_split.MAX_LABEL_IDS - 2)


@pytest.mark.parametrize('pp,example,message', [
    ('decode|onehot(10)|keep("image", "labels")', {'label': 10}, 'class id >= 10'),
    ('decode|multi_hot(100)|keep("image", "labels")', {'labels': list(range(65))},
     'more than 64 label ids'),
    ('decode|value_range(0, 1)|flip_lr|keep("image")', {}, None)])
def test_the_host_checks_what_it_ships(pp, example, message):
  image = tf.zeros((2, 2, 3), tf.uint8)
  example = {'image': image, **{k: tf.constant(v, tf.int64) for k, v in example.items()}}
  if message is None:     # value_range before flip_lr: the image the tail gets is float32.
    example['image'] = tf.zeros((2, 2, 3), tf.float32)
    with pytest.raises(ValueError, match='ships the uint8 image'):
      ship(pp, example)
    return
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    ship(pp, example)


def test_a_pps_label_ops_make_the_datas_classes_on_either_path():
  assert device_split.label_depths(PAPER_PP) == [21843]
  for augment_on in device_split.AUGMENT_ON:
    with pytest.raises(ValueError, match='makes 10 classes but data.num_classes is 8'):
      data_config(num_classes=8, augment_on=augment_on,
                  pp_train='decode|onehot(10)|keep("image", "labels")')


def test_recorded_configs_without_the_key_are_host_runs():
  assert data_config_lib.DataConfig.__dataclass_fields__['augment_on'].default == 'host'
