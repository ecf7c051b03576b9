"""The classification losses against V-MoE's own (testing/goldens/losses.py)."""
import numpy as np

from testing import goldens
from vmoe.train import losses

U32 = 2.0**-24   # float32's unit roundoff.


def _bound(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """(B,) bound on two float32 evaluations of one cross-entropy formula.

  Each class's term y log p (softmax's log_softmax, or log sigmoid(+-x) for the sigmoid) is
  computed from x, the largest logit and a sum of C exponentials: at most C + 4 roundings, each
  relative to at most |x| + |max x| + log C + 1, weighted by |y| (and 1 - y); summing C terms
  adds C roundings of the running total. Two programs: twice that.
  """
  classes = logits.shape[-1]
  scale = np.abs(logits) + np.max(np.abs(logits), -1, keepdims=True) + np.log(classes) + 1
  weight = np.abs(labels) + np.abs(1 - labels)
  return 2 * (2 * classes + 4) * U32 * np.sum(weight * scale, axis=-1)


def test_sigmoid_and_softmax_cross_entropy_equal_v_moes():
  g = goldens.load('losses')
  logits = g['logits']
  cases = [('sigmoid_xent', kind) for kind in ('onehot', 'multihot', 'mixed')]
  cases += [('softmax_xent', kind) for kind in ('onehot', 'mixed')]
  for name, kind in cases:
    labels = g[f'labels_{kind}']
    ours = np.asarray(losses.get_loss(name)(logits, labels))
    bound = _bound(logits, labels)
    difference = np.abs(ours - g[f'{name}_{kind}'])
    assert np.all(difference <= bound), (name, kind, difference, bound)
    # The batch mean adds B roundings of sums of the per-example values.
    mean = losses.classification_loss(logits, labels, name)
    mean_bound = np.mean(bound) + 2 * len(labels) * U32 * np.mean(np.abs(ours))
    np.testing.assert_allclose(mean, g[f'{name}_{kind}_mean'], rtol=0, atol=mean_bound)
