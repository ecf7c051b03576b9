"""Input pipelines, in subpackages by concern, lowest first:
  pp/        preprocessing: the pp string's syntax, the host's TensorFlow ops, RandAugment on the
             host and on the accelerator, and the split of a pp string into host head and
             accelerator tail;
  config.py  the data section of a config (no TensorFlow: configs/ import it);
  datasets/  where examples come from: the sources by name, the TFDS builders (ImageNet-21k, the
             embedded sets), the record formats and the build-time image checks;
  stream/    a split as a stream of batches: orders, the reader, the split cache, batching, what
             the host ships to the accelerator and the pipeline that joins them;
  prepare.py the one-time preparation command (`python -m data.prepare`).
Each imports only those listed before it (testing/layers.py ranks them).
"""
from base import no_keras  # pylint: disable=unused-import  (before any TensorFlow import)
