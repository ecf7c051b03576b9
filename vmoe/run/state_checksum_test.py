"""Tests of the state checksums: hand-worked sums, wrap-around, the leaves that differ."""
import jax.numpy as jnp
import numpy as np

from vmoe.run import state_checksum


def test_sums_weight_the_bits_by_odd_row_major_weights():
  tree = {'u': jnp.array([1, 2, 3], jnp.uint32),             # 1*1 + 2*3 + 3*5
          'i': jnp.array([[1, 2], [3, 4]], jnp.int32),        # 1*1 + 2*3 + 3*5 + 4*7
          'f': jnp.array([[1.0]], jnp.float32),               # 1.0 is 0x3F800000
          'h': jnp.array(1.0, jnp.bfloat16),                  # 1.0 is 0x3F80
          'b': jnp.array([True, False, True])}                # 1*1 + 1*5
  assert state_checksum.checksums(tree) == {
      "['u']": 22, "['i']": 50, "['f']": 0x3F800000, "['h']": 0x3F80, "['b']": 6}


def test_sums_wrap_around_modulo_two_to_the_32():
  # (2**32 - 1) * (1 + 3) = 4 * 2**32 - 4.
  assert state_checksum.checksums([jnp.full(2, 2**32 - 1, jnp.uint32)]) == {'[0]': 2**32 - 4}


def test_a_changed_or_swapped_element_is_found_in_its_leaf():
  tree = {'a': jnp.arange(6.0).reshape(2, 3), 'b': jnp.zeros(4)}
  expected = state_checksum.checksums(tree)
  assert state_checksum.mismatches(expected, tree) == []
  flipped = {**tree, 'b': tree['b'].at[3].set(np.float32(-0.0))}   # Only the sign bit differs.
  assert state_checksum.mismatches(expected, flipped) == ["['b']"]
  swapped = {**tree, 'a': tree['a'][:, ::-1]}
  assert state_checksum.mismatches(expected, swapped) == ["['a']"]
  assert state_checksum.mismatches(expected, {'a': tree['a']}) == ["['b']"]
