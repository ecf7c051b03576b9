"""Input pipelines: TFDS sources, tf.data readers, preprocessing and batches."""
from base import no_keras  # pylint: disable=unused-import  (before any TensorFlow import)
