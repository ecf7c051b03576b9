"""Tests of the pp ops and the pp-string builder: hand-worked numbers, shapes, errors."""
import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from data.pp import ops
from data.pp import randaug

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


def photo(height: int, width: int) -> np.ndarray:
  """A smooth random RGB image plus noise: chroma that 4:2:0 or 4:2:2 subsampling changes."""
  rng = np.random.default_rng(0)
  smooth = tf.image.resize(rng.uniform(0, 255, (1, 8, 8, 3)), (height, width))[0]
  return np.clip(smooth + rng.normal(0, 20, (height, width, 3)), 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray, subsampling: str) -> bytes:
  """Pillow's JPEG of `image` (H, W, 1 or 3) with chroma '4:4:4', '4:2:2' or '4:2:0'."""
  buffer = io.BytesIO()
  Image.fromarray(image.squeeze(-1) if image.shape[-1] == 1 else image).save(
      buffer, format='JPEG', quality=90, subsampling=subsampling)
  return buffer.getvalue()


def unfused(pp: str, example: dict, seed=SEED) -> dict:
  """run(pp) with each op run on its own, as before the fusion: decode, then inception_crop."""
  steps = [step._replace(fused=None) for step in ops.build(pp)]
  out = ops.apply(steps, {k: tf.constant(v) for k, v in example.items()}, seed)
  return {k: v.numpy() for k, v in out.items()}


def v_moe_crop(data: bytes, seed, size: int, channels: int) -> np.ndarray:
  """V-MoE's decode_jpeg_and_inception_crop on the window today's inception_crop draws: that op's
  box sampler on the decoded image's shape with the crop's seed (place 1 of the pp string), only
  the window decoded by tf.io.decode_and_crop_jpeg, then the bilinear resize rounded to uint8."""
  shape = tf.shape(tf.io.decode_image(data, channels=channels))
  begin, window, _ = tf.image.stateless_sample_distorted_bounding_box(
      shape, tf.zeros([0, 0, 4]), seed=tf.random.experimental.stateless_fold_in(seed, 1),
      area_range=(0.05, 1.0), aspect_ratio_range=(3 / 4, 4 / 3), min_object_covered=0.0,
      use_image_if_no_bounding_boxes=True, max_attempts=100)
  crop = tf.io.decode_and_crop_jpeg(data, tf.concat([begin[:2], window[:2]], 0), channels=channels)
  return np.clip(np.round(tf.image.resize(crop, (size, size)).numpy()), 0, 255).astype(np.uint8)


SEEDS = [tf.constant([s, 7], tf.int64) for s in range(4)]


@pytest.mark.parametrize('subsampling', ['4:4:4', '4:2:2', '4:2:0'])
def test_decode_and_inception_crop_decodes_the_window_as_v_moe(subsampling):
  # Fidelity D18: the training pp's decode|inception_crop decodes a JPEG's crop window only, as
  # V-MoE's decode_jpeg_and_inception_crop does, on the window today's ops draw for the seed.
  data = jpeg(photo(40, 48), subsampling)
  fused = [run('decode|inception_crop(16)', {'image': data}, seed)['image'] for seed in SEEDS]
  for seed, out in zip(SEEDS, fused):
    np.testing.assert_array_equal(out, v_moe_crop(data, seed, 16, channels=3))
  # Cropping the whole decode, as before, gives the same pixels without subsampled chroma
  # (4:4:4): there the fused output is the unfused one, so the window is too. With it, the
  # window's edge differs (unless it falls on chroma block edges).
  before = [unfused('decode|inception_crop(16)', {'image': data}, seed)['image'] for seed in SEEDS]
  same = [np.array_equal(a, b) for a, b in zip(fused, before)]
  assert all(same) == (subsampling == '4:4:4')
  assert len({out.tobytes() for out in fused}) == len(SEEDS)     # Each seed its own window.


def test_decode_and_inception_crop_grayscale():
  # decode(channels=1) of a colour JPEG is its luma, at full resolution in every subsampling, so
  # the window's decode equals the whole decode's crop; a grey JPEG read as RGB is replicated.
  colour, grey = jpeg(photo(40, 48), '4:2:0'), jpeg(photo(40, 48)[..., :1], '4:4:4')
  for seed in SEEDS[:2]:
    out = run('decode(channels=1)|inception_crop(16)', {'image': colour}, seed)['image']
    assert out.shape == (16, 16, 1)
    np.testing.assert_array_equal(out, v_moe_crop(colour, seed, 16, channels=1))
    np.testing.assert_array_equal(
        out, unfused('decode(channels=1)|inception_crop(16)', {'image': colour}, seed)['image'])
    out = run('decode|inception_crop(16)', {'image': grey}, seed)['image']
    assert out.shape == (16, 16, 3) and (out == out[..., :1]).all()
    np.testing.assert_array_equal(out, v_moe_crop(grey, seed, 16, channels=3))


def test_non_jpeg_images_and_later_seeds_are_as_before_fusion():
  # A PNG is decoded whole, then cropped, as before; flip_lr and randaug keep their seeds (their
  # places 2 and 3 in the pp string): every output is the unfused one, flips included.
  pp = 'decode|inception_crop(32)|flip_lr'
  data = png(photo(40, 48))
  seeds = SEEDS + [tf.constant([s, 8], tf.int64) for s in range(4)]
  outs = [run(pp, {'image': data}, seed)['image'] for seed in seeds]
  crops = [run('decode|inception_crop(32)', {'image': data}, seed)['image'] for seed in seeds]
  flipped = [not np.array_equal(out, crop) for out, crop in zip(outs, crops)]
  assert any(flipped) and not all(flipped)
  for seed, out in zip(seeds, outs):
    np.testing.assert_array_equal(out, unfused(pp, {'image': data}, seed)['image'])
  pp += '|randaug(2, 20)'
  np.testing.assert_array_equal(run(pp, {'image': data})['image'],
                                unfused(pp, {'image': data})['image'])


def test_fusion_keeps_one_step_per_op_and_runs_in_graphs():
  pp = 'decode|inception_crop(16)|flip_lr'
  steps = ops.build(pp)
  assert [s.index for s in steps] == [0, 1, 2] and steps[0].fused and not steps[1].fused
  assert not ops.build('decode|resize(16)|inception_crop(16)')[0].fused
  # The pipeline's cached decode runs steps[:1] then steps[1:]: the whole decode, then the crop.
  for data in (png(photo(40, 48)), jpeg(photo(40, 48), '4:2:0')):
    example = {'image': tf.constant(data)}
    split = ops.apply(steps[1:], ops.apply(steps[:1], example, SEED), SEED)['image']
    np.testing.assert_array_equal(split, unfused(pp, {'image': data})['image'])
    # In a graph (tf.data's map) tf.cond picks the JPEG or the other branch the same way.
    graph = tf.function(lambda example: ops.apply(steps, example, SEED)['image'])
    np.testing.assert_array_equal(graph(example), run(pp, {'image': data})['image'])


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


def test_randaug_takes_its_arithmetic_and_refuses_an_unknown_one():
  # The pp op runs data/pp/randaug.py's distort with the arithmetic it names (the project's by
  # default): the same seed gives the same image as distort given that arithmetic.
  image = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
  op_seed = tf.random.experimental.stateless_fold_in(SEED, 0)   # Its place in the string.
  outs = []
  for arithmetic in randaug.ARITHMETICS:
    outs.append(run(f"randaug(2, 20, arithmetic='{arithmetic}')", {'image': image})['image'])
    np.testing.assert_array_equal(
        outs[-1], randaug.distort(tf.constant(image), op_seed, 2, 20.0, arithmetic))
  np.testing.assert_array_equal(run('randaug(2, 20)', {'image': image})['image'], outs[0])
  with pytest.raises(ValueError, match='arithmetic must be one of'):
    ops.build("randaug(2, 20, arithmetic='pil')")


def test_encoded_image_needs_decode_first():
  with pytest.raises(ValueError, match='start the pp string with decode'):
    run('value_range(-1, 1)', {'image': png(np.zeros((2, 2, 1), np.uint8))})
  with pytest.raises(ValueError, match='before value_range'):
    run('value_range(0, 1)|randaug(1, 5)', {'image': np.zeros((4, 4, 1), np.uint8)})
