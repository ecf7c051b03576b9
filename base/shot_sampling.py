"""Few-shot sets: exactly `shots` examples of every class, drawn reproducibly from a labelled pool.

The data pipeline draws the few-shot training sets from a split's labels, and the few-shot
evaluator draws them from features already in memory; both draw the same way, here.
"""
import numpy as np


def class_counts(labels: np.ndarray, num_classes: int) -> np.ndarray:
  """(C,) number of examples of each class; labels outside [0, C) fail."""
  labels = np.asarray(labels)
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise ValueError(f'labels must lie in [0, {num_classes}); got {labels.min()}..{labels.max()}.')
  return np.bincount(labels, minlength=num_classes)


def sample_shots(labels: np.ndarray, num_classes: int, shots: int, seed: int,
                 where: str = 'the pool') -> np.ndarray:
  """Sorted indices of `shots` examples of every class, drawn without replacement (seeded).

  Fails if a class has fewer than `shots` examples (`where` names the source): such a set is not
  `shots`-shot.
  """
  if shots < 1:
    raise ValueError(f'shots must be >= 1, got {shots}.')
  counts = class_counts(labels, num_classes)
  if counts.min() < shots:
    small = int(np.argmin(counts))
    raise ValueError(f'class {small} has {counts[small]} examples in {where}, fewer than '
                     f'shots={shots}; use fewer shots or a larger split to draw from.')
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(labels))
  # A stable sort by class of a random permutation keeps each class's members in random order.
  by_class = order[np.argsort(np.asarray(labels)[order], kind='stable')]
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
  return np.sort(np.concatenate([by_class[s:s + shots] for s in starts]))
