"""Golden: V-MoE's mixup at device granularity, given its key and a batch.

vmoe/train/trainer.py `wrap_train_step_with_mixup` (granularity 'device', size 2) reshapes the
global batch to (devices, per-device batch, ...) and calls `mixup(rng, (images, labels),
concentration, shape=(devices, 1, 2), roll_axis=1)`: one Dirichlet draw per device, sorted
descending, each example mixed with the next one of its device. trainer.py does not import here
(clu, vit_jax), so `mixup` is compiled alone from the checkout's file. The concentrations are the
paper configs' (pretrain_imagenet21k.py, 0.5) and the rung's ('light1' of
configs/vmoe_paper/common.py, 0.2), read from the reference's config files.
"""
from typing import Any, Optional, Tuple

import numpy as np

REFERENCE = ('vmoe/train/trainer.py mixup (as wrap_train_step_with_mixup calls it, '
             'granularity device)')

DEVICES, PER_DEVICE, CLASSES = 4, 3, 10
KEYS = (0, 1, 55)


def batch() -> dict:
  """A (12, 4, 4, 3) float32 image batch in [-1, 1] and one-hot labels."""
  rng = np.random.default_rng(552)
  images = rng.uniform(-1, 1, (DEVICES * PER_DEVICE, 4, 4, 3)).astype(np.float32)
  labels = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, DEVICES * PER_DEVICE)]
  return {'image': images, 'labels': labels}


def generate(context) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  partitioning = context.module('vmoe.partitioning', 'vmoe')
  i21k = context.module('vmoe.configs.vmoe_paper.pretrain_imagenet21k', 'vmoe')
  paper_common = context.module('vmoe.configs.vmoe_paper.common', 'vmoe')
  mixup = context.function_alone(
      'vmoe', 'vmoe/train/trainer.py', 'mixup',
      {'jax': jax, 'jnp': jnp, 'partitioning': partitioning, 'Any': Any, 'Optional': Optional,
       'Tuple': Tuple, 'PRNGKey': jax.Array, 'PyTree': Any,
       'PartitionSpec': partitioning.PartitionSpec})
  concentrations = {'i21k': i21k.get_config().mixup.concentration,
                    'light1': paper_common.get_mixup_config('light1').concentration}
  arrays = batch()
  for name, concentration in concentrations.items():
    arrays[f'{name}_concentration'] = np.float64(concentration)
    for seed in KEYS:
      key = jax.random.PRNGKey(seed)
      images = arrays['image'].reshape((DEVICES, PER_DEVICE) + arrays['image'].shape[1:])
      labels = arrays['labels'].reshape((DEVICES, PER_DEVICE, CLASSES))
      mixed_images, mixed_labels = mixup(key, (images, labels), concentration=concentration,
                                         shape=(DEVICES, 1, 2), roll_axis=1)
      arrays[f'key{seed}'] = np.asarray(jax.random.key_data(key), np.uint32)
      arrays[f'{name}_key{seed}_image'] = np.asarray(mixed_images, np.float32).reshape(
          arrays['image'].shape)
      arrays[f'{name}_key{seed}_labels'] = np.asarray(mixed_labels, np.float32).reshape(
          arrays['labels'].shape)
  arrays['devices'] = np.int64(DEVICES)
  return arrays
