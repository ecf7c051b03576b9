"""Sigmoid gating with a selection-only bias: the `sigmoid_tc` and `lossfree_tc` routers.

Axis letters: t = token (T per routing group), e = expert (E), k = choice rank.

DeepSeek-V3 (arXiv 2412.19437, Sec. 2.1.2) scores every expert independently with a sigmoid,
s = sigmoid(x W) (eq. 15), chooses each token's top k of s + b, where b is a per-expert bias used
for the choice only (eq. 16), and combines with s at the chosen experts normalised over them
(eqs. 13-14). The bias comes from auxiliary-loss-free balancing (Wang et al., arXiv 2408.15664,
Algorithm 1): after each step, b_e += u * sign(mean load - load_e), so an overloaded expert is
chosen less and an idle one more, without a loss term and so without a gradient that fights the
task's. `sigmoid_tc` is the same gate with b = 0 and no update.

The dispatch and the combine use different scores, so `sigmoid_gate` returns both; the router
feeds the first to allocation.token_choice_slots and the second to allocation.slot_weights.
"""
import jax
import jax.numpy as jnp

# DeepSeek-V3's bias update speed gamma (Sec. 4.2, "Hyper-Parameters"): 0.001 for most of
# training, the u = 1e-3 that Wang et al. also choose.
BIAS_UPDATE_RATE = 1e-3


def sigmoid_gate(logits: jax.Array, k: int, bias: jax.Array | None = None):
  """Scores of the sigmoid gate for one group: logits (T, E) -> (choice_scores, combine_scores).

  choice_scores (T, E) = s + b with s = sigmoid(logits) (DeepSeek-V3 eq. 15; b = 0 when bias is
  None): token choice takes each token's top k of it (eq. 16). combine_scores (T, E) = s / (sum
  of s over the token's k chosen experts) for k >= 2 (eqs. 13-14), the weights DeepSeek-V3's `Gate`
  takes from the unbiased scores; the router gathers them at the dispatched slots only, so the
  other entries do not matter. The normalisation counts every chosen expert, also one whose
  buffer turns out full, as the Gate does (it has no buffers).

  At k = 1, combine_scores = s itself: normalising over one chosen expert makes every weight
  s / s = 1, a constant, so no gradient would reach W through the combine and the router would
  never learn. The choice is discrete and carries no gradient; the combine carries it.
  """
  if logits.ndim != 2:
    raise ValueError(f'logits must be (T, E), got shape {logits.shape}; vmap over groups.')
  num_experts = logits.shape[1]
  if not 1 <= k <= num_experts:
    raise ValueError(f'the sigmoid gate needs 1 <= k <= E={num_experts} experts per token, '
                     f'got k={k}.')
  scores = jax.nn.sigmoid(logits.astype(jnp.float32))          # (T, E)
  choice_scores = scores if bias is None else scores + bias[None, :].astype(jnp.float32)
  if k == 1:
    return choice_scores, scores
  _, chosen = jax.lax.top_k(jax.lax.stop_gradient(choice_scores), k)   # (T, k)
  total = jnp.sum(jnp.take_along_axis(scores, chosen, axis=1), axis=1, keepdims=True)  # (T, 1)
  return choice_scores, scores / total


def requested_load(choice_scores: jax.Array, k: int) -> jax.Array:
  """Requests per expert before any token is dropped: (T, E) -> (E,) int32.

  The number of tokens whose top k of choice_scores include the expert (the c_i of Wang et al.'s
  Algorithm 1, counted from the choices rather than from the tokens a full buffer kept). Counts of
  several groups add up: sum them over groups, and over devices, before `update_bias`.
  """
  num_experts = choice_scores.shape[-1]
  _, chosen = jax.lax.top_k(choice_scores, k)                   # (T, k)
  return jnp.sum(jax.nn.one_hot(chosen, num_experts, dtype=jnp.int32), axis=(0, 1))


def update_bias(bias: jax.Array, load: jax.Array, rate: float = BIAS_UPDATE_RATE) -> jax.Array:
  """One step of Wang et al.'s Algorithm 1: b_e += u * sign(mean(load) - load_e). (E,) -> (E,).

  An expert at exactly the mean load keeps its bias (sign 0). `load` is the step's total
  `requested_load`, summed over all groups and devices.
  """
  load = load.astype(jnp.float32)
  return bias + rate * jnp.sign(jnp.mean(load) - load)
