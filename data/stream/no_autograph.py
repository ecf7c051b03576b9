"""Functions the input pipelines hand to tf.data, traced without AutoGraph, as they are written.

tf.data runs AutoGraph over every function given to Dataset.map or flat_map: it rewrites Python
`if`, `for` and `while` on tensors into graph control flow, and pays for that in Python (its
converters load on first use) in every process that builds a pipeline. The pipelines here need no
rewriting: their control flow is graph ops already (tf.where, tf.while_loop, tf.switch_case in
data/pp/randaug.py), and their Python `if`s test static facts (dtypes, shapes, pp arguments). So
they are traced without it. A function that branched in Python on a tensor's value would fail to
trace here, with TensorFlow's error, rather than be rewritten.
"""
import tensorflow as tf


def without_autograph(fn):
  """`fn`, for tf.data to trace without AutoGraph's conversion (of it or what it calls)."""
  return tf.autograph.experimental.do_not_convert(fn)
