"""The routers' auxiliary losses against V-MoE's own (testing/goldens/losses.py)."""
import numpy as np
from scipy import stats

from testing import goldens
from vmoe.routing import losses

U32 = 2.0**-24   # float32's unit roundoff.


def _cv_squared_bound(totals: np.ndarray, error: np.ndarray) -> float:
  """Bound on |CV^2(q) - CV^2(q')| for per-expert totals q' within `error` of q, plus the
  formula's own roundings.

  CV^2 = mean(q^2) / mean(q)^2 - 1, so d CV^2 / d q_e = (2 / E) (q_e / m^2 - mean(q^2) / m^3),
  m = mean(q): a first-order bound sum_e |d / d q_e| error_e (the errors are ~1e-6 of q, so the
  second-order terms are ~1e-12 of it). V-MoE computes (std / mean)^2 and the project
  var / (mean^2 + 1e-10): the variance, the mean and the quotient round at most 2 E + 6 times,
  relative to mean(q^2) / m^2; the 1e-10 moves the quotient by 1e-10 / m^2 of it.
  """
  num = totals.size
  m = np.mean(totals)
  gradient = (2 / num) * np.abs(totals / m**2 - np.mean(totals**2) / m**3)
  scale = np.mean(totals**2) / m**2
  return float(np.sum(gradient * error) + (2 * num + 6) * U32 * scale * 2 + 1e-10 / m**2 * scale)


def test_importance_loss_equals_v_moes_per_group():
  g = goldens.load('losses')
  for group, gates in enumerate(g['router_gates']):
    ours = float(losses.importance_loss(gates))
    # Both sides sum T probabilities (each <= 1) per expert: within T u q_e each.
    totals = gates.astype(np.float64).sum(axis=0)
    bound = _cv_squared_bound(totals, 2 * len(gates) * U32 * totals)
    np.testing.assert_allclose(ours, g['importance_loss'][group], rtol=0, atol=bound)


def test_load_loss_equals_v_moes_per_group_at_k_1_and_2():
  g = goldens.load('losses')
  std = float(g['noise_std'])
  for k in (1, 2):
    for group, (logits, noisy) in enumerate(zip(g['router_logits'], g['router_logits_noisy'])):
      ours = float(losses.load_loss(logits, noisy, std, k))
      # V-MoE's probability is 1 - Phi((threshold - logit) / std), the project's
      # Phi((logit - threshold) / std): the same number, but the complement rounds once more
      # (an absolute u), and each side's argument and Phi carry a few roundings (4 u absolute
      # on a probability). Summing T of them adds T u of the total.
      threshold = np.sort(noisy, axis=-1)[:, -k][:, None]
      totals = stats.norm.cdf((logits.astype(np.float64) - threshold) / std).sum(axis=0)
      error = len(logits) * (2 * 5 * U32) + 2 * len(logits) * U32 * totals
      bound = _cv_squared_bound(totals, error)
      np.testing.assert_allclose(ours, g[f'load_loss_k{k}'][group], rtol=0, atol=bound,
                                 err_msg=f'group {group}, k = {k}')
