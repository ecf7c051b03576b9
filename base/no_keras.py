"""Imported before TensorFlow: TensorFlow without Keras, which this project never uses.

TensorFlow serves here as tf.data, tf.image, TFDS and TensorBoard's tf.summary only. On import it
loads Keras eagerly (Keras 3 brings scikit-learn's and matplotlib's imports along) unless
TF_USE_LEGACY_KERAS asks for tf_keras; tf_keras is not installed, so TensorFlow skips the import
(and `tf.keras` would raise ImportError). That is a large part of `import tensorflow`, paid by
every process that trains or reads data. A user's own TF_USE_LEGACY_KERAS setting is kept: code
of theirs that needs tf.keras in the same process sets TF_USE_LEGACY_KERAS=0. The setting is
in os.environ, so processes started from here inherit it.
data/__init__.py and vmoe/run/observability.py import this module before anything imports
TensorFlow.
"""
import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')
