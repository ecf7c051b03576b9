"""The few-shot ridge against big_vision's own (testing/goldens/fewshot.py)."""
import numpy as np

from evaluation import fewshot
from testing import goldens

U64 = 2.0**-53   # float64's unit roundoff.


def _ambiguous(path: fewshot.RidgePath, test_features: np.ndarray, l2: float,
               train_size: int) -> int:
  """How many test examples two float64 solutions of this ridge could classify differently.

  Both sides form the Gram matrix G (N products a term), decompose it (LAPACK's eigh is backward
  stable: exact for G + E with |E| <= p(n) u |G|; we take p(n) = 10 n) and rescale by
  1 / (e + l2). To first order the weights move by at most
  delta = 10 (n + N) u |G| / (e_min + l2) of |W|, so a score x_i W moves by at most
  delta |x_i| |W|. An example whose two best scores are further apart than twice that gets the
  same class on both sides.
  """
  eigenvalues = path.eigenvalues
  weights = path.weights(l2)
  design = path.design(test_features)
  scores = np.sort(design @ weights, axis=1)
  delta = (10 * (len(eigenvalues) + train_size) * U64 * np.max(eigenvalues)
           / (max(np.min(eigenvalues), 0.0) + l2))
  bound = delta * np.linalg.norm(design, axis=1) * np.linalg.norm(weights)
  return int(np.count_nonzero(scores[:, -1] - scores[:, -2] <= 2 * bound))


def test_ridge_accuracy_equals_big_visions_for_every_l2():
  g = goldens.load('fewshot')
  test_features, test_labels = g['test_features'], g['test_labels']
  for shots in (8, 2):   # 40 examples of 17 design columns (primal form), 10 (kernel form).
    features, labels = g[f'train{shots}_features'], g[f'train{shots}_labels']
    path = fewshot.fit_ridge_path(features, labels, int(g['num_classes']))
    ours = fewshot.accuracy_per_l2(path, test_features, test_labels, tuple(g['l2']))
    for l2, mine, theirs in zip(g['l2'], ours, g[f'train{shots}_accuracy_float64']):
      allowed = _ambiguous(path, test_features, l2, len(labels))
      differ = round(abs(mine - theirs) * len(test_labels))
      assert differ <= allowed, (shots, l2, mine, theirs, allowed)
