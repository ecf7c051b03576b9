"""Preprocessing: the syntax of a pp string (syntax.py), one description of each op and of
RandAugment's recipe that both executors read (op_specs.py, randaug_spec.py), the host's
registered TensorFlow ops (ops.py) and RandAugment (randaug.py), the split of a pp string into
the host's head and the accelerator's tail (device_split.py) and the tail in JAX
(device_augment.py, randaug_device.py).

May import base/ only: the rest of data/ builds on it. syntax.py, op_specs.py, randaug_spec.py
and device_split.py load neither TensorFlow nor JAX (data/config.py and the training program
import them), and nor does this file.
"""
