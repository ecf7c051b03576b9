"""Tests of the pp ops and the pp-string builder: hand-worked numbers, shapes, errors."""
import numpy as np
import pytest
import tensorflow as tf

from data import ops

SEED = tf.constant([1, 2], tf.int64)


def run(pp: str, example: dict, seed=SEED) -> dict:
  out = ops.apply(ops.build(pp), {k: tf.constant(v) for k, v in example.items()}, seed)
  return {k: v.numpy() for k, v in out.items()}


def png(array: np.ndarray) -> bytes:
  return tf.io.encode_png(array).numpy()


def test_value_range_maps_0_255_linearly():
  # -1 + v * 2/255: 0 -> -1, 51 -> -0.6, 255 -> 1.
  out = run('value_range(-1, 1)', {'image': np.array([[[0], [51], [255]]], np.uint8)})
  np.testing.assert_allclose(out['image'].ravel(), [-1.0, -0.6, 1.0], atol=1e-6)
  assert out['image'].dtype == np.float32
  # 0..1: 102 -> 0.4.
  out = run('value_range(0, 1)', {'image': np.array([[[102]]], np.uint8)})
  np.testing.assert_allclose(out['image'].ravel(), [0.4], atol=1e-6)


def test_onehot_and_multi_hot():
  out = run('onehot(4)', {'label': np.int64(2)})
  np.testing.assert_array_equal(out['labels'], [0, 0, 1, 0])
  assert out['labels'].dtype == np.float32
  out = run('onehot(3, key="y", key_result="z", on=0.9, off=0.05)', {'y': np.int64(0)})
  np.testing.assert_allclose(out['z'], [0.9, 0.05, 0.05])
  # Repeated ids count once; an empty list gives zeros.
  out = run('multi_hot(5)', {'labels': np.array([4, 1, 4], np.int64)})
  np.testing.assert_array_equal(out['labels'], [0, 1, 0, 0, 1])
  out = run('multi_hot(3)', {'labels': np.zeros(0, np.int64)})
  np.testing.assert_array_equal(out['labels'], [0, 0, 0])


def test_label_out_of_range_fails():
  with pytest.raises(tf.errors.InvalidArgumentError, match='class id >= 3'):
    run('onehot(3)', {'label': np.int64(3)})
  with pytest.raises(tf.errors.InvalidArgumentError, match='class id >= 3'):
    run('multi_hot(3)', {'labels': np.array([0, 7], np.int64)})
  with pytest.raises(ValueError, match='use multi_hot'):
    run('onehot(3)', {'label': np.array([0, 1], np.int64)})


def test_central_crop_picks_the_middle():
  # 4x5 image with value 10*row + col; the central 2x3 starts at row (4-2)//2=1, col (5-3)//2=1.
  image = (10 * np.arange(4)[:, None] + np.arange(5)[None, :]).astype(np.uint8)[..., None]
  out = run('central_crop((2, 3))', {'image': image})['image'][..., 0]
  np.testing.assert_array_equal(out, [[11, 12, 13], [21, 22, 23]])
  with pytest.raises(tf.errors.InvalidArgumentError, match='smaller than the crop'):
    run('central_crop(5)', {'image': image})


def test_resize_keeps_uint8_and_constant_images():
  out = run('resize(7)', {'image': np.full((3, 5, 3), 200, np.uint8)})['image']
  assert out.shape == (7, 7, 3) and out.dtype == np.uint8
  assert (out == 200).all()


def test_resize_small_keeps_aspect_ratio():
  # 40x60, shorter side 40 -> 20: 20x30.
  out = run('resize_small(20)', {'image': np.zeros((40, 60, 1), np.uint8)})['image']
  assert out.shape == (20, 30, 1)


def test_resize_small_averages_areas_as_vmoe():
  # Shorter side 2 -> 1 halves both sides: each output pixel is the mean of a 2x2 block,
  # (0 + 10 + 40 + 50) / 4 = 25 and (20 + 30 + 60 + 70) / 4 = 45.
  image = np.array([[0, 10, 20, 30], [40, 50, 60, 70]], np.uint8)[..., None]
  np.testing.assert_array_equal(run('resize_small(1)', {'image': image})['image'].ravel(), [25, 45])
  # V-MoE's op on a 300x451 photo-sized image: ratio 256 / 300, sides round(300 * 256 / 300) = 256
  # and round(451 * 0.8533) = round(384.85) = 385, resampled by tf.image.resize_area (TF1's op).
  image = np.random.default_rng(0).integers(0, 256, (300, 451, 3), dtype=np.uint8)
  reference = tf.compat.v1.image.resize_area(image[None], [256, 385])[0].numpy()
  out = run('resize_small(256)', {'image': image})['image']
  assert out.shape == (256, 385, 3) and out.dtype == np.uint8
  np.testing.assert_array_equal(out, np.clip(np.round(reference), 0, 255).astype(np.uint8))


def test_decode_channels_and_grayscale():
  rgb = np.zeros((2, 2, 3), np.uint8)
  rgb[..., 0] = 255                      # Pure red: luma 0.299 * 255 = 76.
  out = run('decode', {'image': png(rgb)})['image']
  np.testing.assert_array_equal(out, rgb)
  gray = run('decode(channels=1)', {'image': png(rgb)})['image']
  assert gray.shape == (2, 2, 1) and abs(int(gray[0, 0, 0]) - 76) <= 1
  # A grayscale PNG replicated to 3 channels.
  out = run('decode(channels=3)', {'image': png(np.full((2, 3, 1), 9, np.uint8))})['image']
  assert out.shape == (2, 3, 3) and (out == 9).all()


def test_decode_then_crop_differs_from_v_moes_decode_and_crop_only_on_the_crop_edge():
  # V-MoE's decode_jpeg_and_inception_crop decodes only its crop window
  # (tf.image.decode_and_crop_jpeg); the project decodes the whole image, then crops (fidelity
  # D18). For a 4:4:4 JPEG both give the same pixels. For a 4:2:0 one (chroma at half
  # resolution, most photographs) the window's decode upsamples the chroma without the
  # neighbours outside it, so the crop's outermost rows and columns differ; every other pixel is
  # equal.
  rng = np.random.default_rng(0)
  smooth = tf.image.resize(rng.uniform(0, 255, (1, 16, 16, 3)), (64, 64))[0]
  image = tf.cast(tf.clip_by_value(smooth + rng.normal(0, 20, (64, 64, 3)), 0, 255), tf.uint8)
  window = [13, 7, 37, 41]                            # Odd offsets: not on a chroma block edge.
  y, x, h, w = window
  for chroma_downsampling in (False, True):
    data = tf.io.encode_jpeg(image, quality=90, chroma_downsampling=chroma_downsampling)
    theirs = tf.image.decode_and_crop_jpeg(data, window, channels=3).numpy().astype(int)
    ours = run('decode', {'image': data.numpy()})['image'][y:y + h, x:x + w].astype(int)
    differs = np.abs(theirs - ours).max(axis=-1) > 0
    np.testing.assert_array_equal(differs[1:-1, 1:-1], False)
    assert differs.any() == chroma_downsampling


def test_inception_crop_flip_shapes_and_determinism():
  image = np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)
  pp = 'inception_crop(16)|flip_lr'
  a = run(pp, {'image': image})['image']
  b = run(pp, {'image': image})['image']
  c = run(pp, {'image': image}, seed=tf.constant([1, 3], tf.int64))['image']
  assert a.shape == (16, 16, 3) and a.dtype == np.uint8
  np.testing.assert_array_equal(a, b)        # Same seed, same crop and flip.
  assert not np.array_equal(a, c)            # Another seed, another crop.


def test_inception_crop_samples_as_v_moe_does(monkeypatch):
  # V-MoE's inception_crop (vmoe/data/pp_ops.py) calls TF's box sampler with its defaults:
  # aspect ratios 3/4..4/3, 100 attempts, then the whole image; area 5-100%.
  seen = {}
  sampler = tf.image.stateless_sample_distorted_bounding_box

  def spy(*args, **kwargs):
    seen.update(kwargs)
    return sampler(*args, **kwargs)
  monkeypatch.setattr(tf.image, 'stateless_sample_distorted_bounding_box', spy)
  run('inception_crop(16)', {'image': np.zeros((40, 30, 3), np.uint8)})
  assert seen['area_range'] == (0.05, 1.0) and seen['aspect_ratio_range'] == (3 / 4, 4 / 3)
  assert seen['max_attempts'] == 100 and seen['use_image_if_no_bounding_boxes']
  assert seen['min_object_covered'] == 0.0


def test_flip_lr_flips_about_half_the_time():
  image = np.arange(6, dtype=np.uint8).reshape(1, 6, 1)
  flips = 0
  for i in range(40):
    out = run('flip_lr', {'image': image}, seed=tf.constant([i, 0], tf.int64))['image']
    assert np.array_equal(out, image) or np.array_equal(out, image[:, ::-1])
    flips += int(np.array_equal(out, image[:, ::-1]))
  assert 8 <= flips <= 32                    # Binomial(40, 1/2): 8..32 is beyond 3.7 sigma.


def test_keep():
  out = run('keep("a", "c")', {'a': 1, 'b': 2, 'c': 3})
  assert sorted(out) == ['a', 'c']
  with pytest.raises(ValueError, match=r"no key \['d'\]"):
    run('keep("a", "d")', {'a': 1})


def test_training_pp_string_end_to_end():
  pp = ('decode|inception_crop(24)|flip_lr|randaug(2, 20)|value_range(-1, 1)|onehot(5)|'
        'keep("image", "labels")')
  image = np.random.default_rng(1).integers(0, 256, (30, 40, 3), dtype=np.uint8)
  out = run(pp, {'image': png(image), 'label': np.int64(3), 'file_name': b'x'})
  assert sorted(out) == ['image', 'labels']
  assert out['image'].shape == (24, 24, 3) and out['image'].dtype == np.float32
  assert -1 <= out['image'].min() and out['image'].max() <= 1


def test_registry_and_argument_errors():
  with pytest.raises(ValueError, match='unknown pp op .*valid: central_crop, decode'):
    ops.build('decode|rotate(3)')
  with pytest.raises(ValueError, match='signature: resize'):
    ops.build('resize(1, 2, 3, 4, 5)')
  with pytest.raises(ValueError, match='Python literals'):
    ops.build('resize(size)')
  with pytest.raises(ValueError, match='cannot parse'):
    ops.build('decode|(')
  with pytest.raises(ValueError, match='channels must be 1'):
    ops.build('decode(channels=2)')
  with pytest.raises(ValueError, match='empty'):
    ops.build('')


def test_encoded_image_needs_decode_first():
  with pytest.raises(ValueError, match='start the pp string with decode'):
    run('value_range(-1, 1)', {'image': png(np.zeros((2, 2, 1), np.uint8))})
  with pytest.raises(ValueError, match='before value_range'):
    run('value_range(0, 1)|randaug(1, 5)', {'image': np.zeros((4, 4, 1), np.uint8)})
