"""RandAugment's recipe: the level table's wrapped reference arguments and the op-table checks."""
import pytest

from data.pp import randaug_spec


def test_the_reference_arguments_wrap_as_its_uint8_casts_do():
  # Solarize: int(256 * level) % 256; level 1 -> 256 -> 0, level 1.5 -> 384 -> 128, 2 -> 512 -> 0.
  assert [randaug_spec.reference_solarize_threshold(v) for v in (0.5, 1.0, 1.5, 2.0)] == [
      128, 0, 128, 0]
  # Posterize: min((8 - int(4 * level)) % 256, 7); level 0 -> 8 -> 7, 1.5 -> 2, 2.5 -> -2 -> 254
  # -> 7.
  assert [randaug_spec.reference_posterize_shift(v) for v in (0.0, 1.5, 2.5)] == [7, 2, 7]
  # At 224 px the fractions give the reference's 100 and 40 px a level.
  assert randaug_spec.translate_fraction(1.0) * 224 == 100.0
  assert randaug_spec.cutout_fraction(1.0) * 224 == 40.0


def test_an_op_table_is_put_in_the_reference_order_and_must_cover_every_op():
  table = {name: i for i, name in enumerate(reversed(randaug_spec.OPS))}
  assert tuple(randaug_spec.in_order(table)) == randaug_spec.OPS
  with pytest.raises(ValueError, match='not the ops'):
    randaug_spec.in_order({name: 0 for name in randaug_spec.OPS[1:]})
  with pytest.raises(ValueError, match='arithmetic must be one of'):
    randaug_spec.check_arithmetic('pil')
