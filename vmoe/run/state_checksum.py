"""Checksums of a pytree of arrays, to tell a checkpoint read back intact from a corrupt one.

orbax does not detect every damaged array file: bytes flipped inside a zstd-compressed chunk
often decompress without error into other values (measured with orbax-checkpoint 0.12.8, whose
TensorStore chunks carry no checksum). So a checkpoint's record stores these sums of the state
it was written from, and a restore recomputes them on what it read.

Each leaf's sum is computed on device, bit-exactly: the leaf's bits as unsigned integers
(float32 -> uint32, bfloat16 -> uint16, ...), widened to uint32, each times an odd weight
(2 i + 1 for the element at row-major index i), summed modulo 2**32. An odd weight is invertible
modulo 2**32, so changing any one element always changes the sum; the weights depending on i
make swapped elements count too. Integer addition is associative, so the sum does not depend on
the reduction order or on how the leaf is sharded.
"""
from collections.abc import Collection

import jax
from jax import lax
import jax.numpy as jnp


def _leaf_sum(x: jax.Array) -> jax.Array:
  """The weighted uint32 sum of one array's bits (see the module docstring)."""
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  words = lax.bitcast_convert_type(x, jnp.dtype(f'uint{8 * x.dtype.itemsize}')).astype(jnp.uint32)
  # The row-major index from one iota per axis, without a reshape that could move sharded data.
  index = jnp.zeros(x.shape, jnp.uint32)
  stride = 1
  for axis in reversed(range(x.ndim)):
    index = index + lax.broadcasted_iota(jnp.uint32, x.shape, axis) * jnp.uint32(stride % 2**32)
    stride *= x.shape[axis]
  return jnp.sum(words * (2 * index + 1), dtype=jnp.uint32)


_sums = jax.jit(lambda tree: jax.tree.map(_leaf_sum, tree))


def checksums(tree) -> dict[str, int]:
  """{leaf path: checksum} of every array in `tree` (JSON-ready: str keys, int values)."""
  sums = jax.device_get(_sums(tree))
  return {jax.tree_util.keystr(path): int(value)
          for path, value in jax.tree_util.tree_leaves_with_path(sums)}


def mismatches(expected: dict[str, int], tree, skip: Collection[str] = ()) -> list[str]:
  """The leaf paths whose checksum in `tree` differs from `expected` (or that one side lacks),
  except those in `skip` (leaves `expected` was never computed over)."""
  found = {k: v for k, v in checksums(tree).items() if k not in skip}
  return sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
