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

from vmoe.routing import declarations

BIAS_UPDATE_RATE = declarations.BIAS_UPDATE_RATE    # DeepSeek-V3's gamma (the option's default).


def check_groups(num_experts: int, k: int, n_groups: int, topk_groups: int,
                 route_scale: float) -> None:
  """Raises ValueError, saying what to change, for a gate that cannot run: the E experts split
  into n_groups equal groups of at least 2 (a group's score with a bias sums its top 2), of which
  each token keeps 1 <= topk_groups <= n_groups, holding at least its k choices."""
  if n_groups < 1 or num_experts % n_groups:
    raise ValueError(f'n_groups={n_groups} must divide the E={num_experts} experts '
                     '(moe.router.options.n_groups).')
  if n_groups > 1 and num_experts // n_groups < 2:
    raise ValueError(f'n_groups={n_groups} leaves {num_experts // n_groups} expert a group; a '
                     'group needs at least 2 (its score sums its top 2 biased scores): lower '
                     'moe.router.options.n_groups.')
  if not 1 <= topk_groups <= n_groups:
    raise ValueError(f'topk_groups={topk_groups} must be in 1..n_groups={n_groups} '
                     '(moe.router.options.topk_groups).')
  if k > topk_groups * (num_experts // n_groups):
    raise ValueError(f'k={k} choices do not fit in topk_groups={topk_groups} groups of '
                     f'{num_experts // n_groups} experts; raise moe.router.options.topk_groups.')
  if not route_scale > 0:
    raise ValueError(f'route_scale must be > 0, got {route_scale} '
                     '(moe.router.options.route_scale).')


def choice_scores(logits: jax.Array, bias: jax.Array | None = None, n_groups: int = 1,
                  topk_groups: int = 1) -> jax.Array:
  """The scores a token's top k is taken from: logits (T, E) -> s + b (T, E), s = sigmoid(logits)
  (DeepSeek-V3 eq. 15; b = 0 when bias is None; eq. 16).

  With n_groups > 1 the experts form n_groups consecutive groups; each token keeps its
  topk_groups best groups and the other groups' experts score -inf. A group's score is, as
  DeepSeek-V3's `Gate` computes it, the sum of its top 2 biased scores when there is a bias, and
  its largest score otherwise.
  """
  scores = jax.nn.sigmoid(logits.astype(jnp.float32))          # (T, E)
  choice = scores if bias is None else scores + bias[None, :].astype(jnp.float32)
  if n_groups == 1:
    return choice
  num_tokens, num_experts = choice.shape
  grouped = choice.reshape(num_tokens, n_groups, num_experts // n_groups)   # (T, groups, E/g)
  if bias is None:
    group_score = jnp.max(grouped, axis=-1)
  else:
    group_score = jnp.sum(jax.lax.top_k(grouped, 2)[0], axis=-1)
  _, kept = jax.lax.top_k(jax.lax.stop_gradient(group_score), topk_groups)    # (T, topk_groups)
  keep = jnp.sum(jax.nn.one_hot(kept, n_groups, dtype=jnp.int32), axis=1) > 0  # (T, groups)
  return jnp.where(keep[:, :, None], grouped, -jnp.inf).reshape(num_tokens, num_experts)


def combine_weights(logits: jax.Array, choice: jax.Array, k: int,
                    route_scale: float = 1.0) -> jax.Array:
  """The combine weights (T, E): route_scale * s / (sum of s over the token's k chosen experts)
  for k >= 2 (DeepSeek-V3 eqs. 13-14 and `Gate`), where the chosen experts are the top k of
  `choice` (the biased, group-limited scores that dispatched) and s = sigmoid(logits) is
  unbiased. The router gathers them at the dispatched slots only, so the other entries do not
  matter. The normalisation counts every chosen expert, also one whose buffer turns out full, as
  the Gate does (it has no buffers).

  At k = 1 the weight is route_scale * s: normalising over one chosen expert makes every weight
  s / s = 1, a constant, so no gradient would reach W through the combine and the router would
  never learn. The choice is discrete and carries no gradient; the combine carries it.
  """
  scores = jax.nn.sigmoid(logits.astype(jnp.float32))          # (T, E)
  if k == 1:
    return route_scale * scores
  _, chosen = jax.lax.top_k(jax.lax.stop_gradient(choice), k)  # (T, k)
  total = jnp.sum(jnp.take_along_axis(scores, chosen, axis=1), axis=1, keepdims=True)  # (T, 1)
  return route_scale * scores / total


def sigmoid_gate(logits: jax.Array, k: int, bias: jax.Array | None = None, n_groups: int = 1,
                 topk_groups: int = 1, route_scale: float = 1.0):
  """DeepSeek-V3's sigmoid gate for one group: logits (T, E) -> (choice_scores, combine_scores),
  `choice_scores` and `combine_weights` above; token choice takes each token's top k of the
  first and weighs its slots with the second.
  """
  if logits.ndim != 2:
    raise ValueError(f'logits must be (T, E), got shape {logits.shape}; vmap over groups.')
  num_experts = logits.shape[1]
  if not 1 <= k <= num_experts:
    raise ValueError(f'the sigmoid gate needs 1 <= k <= E={num_experts} experts per token, '
                     f'got k={k}.')
  check_groups(num_experts, k, n_groups, topk_groups, route_scale)
  choice = choice_scores(logits, bias, n_groups, topk_groups)
  return choice, combine_weights(logits, choice, k, route_scale)


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
