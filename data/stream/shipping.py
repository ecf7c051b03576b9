"""What the host ships when the accelerator runs the pp's tail (data.augment_on = 'device'): the
head's uint8 image, the tail's label ids and the example's key (data/pp/device_split.py says which
keys, shapes and why).

The host still checks what it ships: an image that is not uint8 after the head, a label id out of
its op's range, or a multi-label record with more than MAX_LABEL_IDS ids fails here, on the
record, as the host's ops would (data/stream/batches.py then names the record).
"""
from typing import Callable

import tensorflow as tf

from data.pp import device_split
from data.pp import ops


def _ids(example: dict, call) -> tf.Tensor:
  """The label ids of `call`'s key, checked and cast to int32 (multi_hot's padded with -1)."""
  key = device_split.label_keys(call)[0]
  if key not in example:
    raise ValueError(f'pp op {call.spec}: no key {key!r}; the example has {sorted(example)}.')
  ids, depth = example[key], device_split.label_depth(call)
  if call.name == 'onehot':
    if ids.shape.rank != 0:
      raise ValueError(f'pp op onehot: {key!r} holds a list of ids; use multi_hot({depth}).')
    ops.check_ids(ids, depth, 'onehot')
    return tf.cast(ids, tf.int32)
  ids = tf.reshape(ids, [-1])
  ops.check_ids(ids, depth, 'multi_hot')
  limit = device_split.MAX_LABEL_IDS
  tf.debugging.assert_less_equal(
      tf.size(ids), limit, message=f'multi_hot: a record has more than {limit} label ids, the '
      'most data.augment_on="device" ships (data/pp/device_split.py MAX_LABEL_IDS); use "host"')
  return tf.pad(tf.cast(ids, tf.int32), [[0, limit - tf.size(ids)]], constant_values=-1)


def shipper(split: device_split.Split) -> Callable[[dict, tf.Tensor], dict]:
  """fn(example after split's head, its seed) -> the keys the host ships (data/stream/batches.py's
  `select`)."""
  labels = [call for call in split.tail if call.name in device_split.LABEL_OPS]
  passed = split.passed_keys()

  def ship(example: dict, seed: tf.Tensor) -> dict:
    image = example.get('image')
    if image is None or image.dtype != tf.uint8:
      raise ValueError(f'data.augment_on="device" ships the uint8 image that "{split.pp}" has '
                       f'before {split.tail[0].spec}; it has {image!r} there. Decode and crop '
                       'before the tail, or use data.augment_on="host".')
    out = {'image': image}
    for call in labels:
      out[device_split.label_keys(call)[0]] = _ids(example, call)
    for key in passed:
      if key not in example:
        raise ValueError(f'pp {split.pp!r} keeps {key!r}; the example has {sorted(example)}.')
      out[key] = example[key]
    if split.random:
      # The low 32 bits of each of the seed's two int64s: a raw threefry2x32 key.
      low = tf.bitwise.bitwise_and(tf.cast(seed, tf.int64), tf.constant(0xFFFFFFFF, tf.int64))
      out[device_split.AUGMENT_KEY] = tf.cast(low, tf.uint32)
    return out
  return ship
