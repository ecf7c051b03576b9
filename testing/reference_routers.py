"""Independent float64 NumPy references of the built-in routers' routing tensors.

Written from the paper's formulas and algorithms (Token Choice, Algorithm 1; Expert Choice,
Algorithm 2; the Sinkhorn and sparsity-constrained affinities; Soft MoE) and from the published
descriptions of the routers after the paper (DeepSeek-V3's `Gate`, BASE layers, top-p routing,
fixed random routing). Nothing here imports vmoe/ or JAX: vmoe/routing/reference_test.py compares
the project's routers against these functions.

Every sparse router takes one group's logits (T, E) as a float64 array and the buffer capacity C,
and returns the dense `dispatch` (T, E, C), 0/1, and `combine` (T, E, C) = dispatch * the weight of
that token at that expert. Ties are broken towards the lower index (expert for a token's choices,
token for an expert's choices), as a stable sort does.
"""
from typing import NamedTuple

import numpy as np
from scipy import optimize


class Routing(NamedTuple):
  """Dense routing tensors of one group, each (T, E, C)."""
  dispatch: np.ndarray
  combine: np.ndarray


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
  shifted = np.exp(logits - np.max(logits, axis=axis, keepdims=True))
  return shifted / np.sum(shifted, axis=axis, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
  return 1.0 / (1.0 + np.exp(-logits))


def ranked(scores: np.ndarray) -> np.ndarray:
  """Each row's column indices by decreasing score, ties to the lower index: (N, M) -> (N, M)."""
  return np.argsort(-scores, axis=-1, kind='stable')


def from_slots(slots: list[list[int]], num_tokens: int, weights: np.ndarray,
               capacity: int) -> Routing:
  """Per-expert lists of tokens (in slot order) and weights (T, E) -> dense dispatch, combine."""
  dispatch = np.zeros((num_tokens, len(slots), capacity))
  for expert, tokens in enumerate(slots):
    for slot, token in enumerate(tokens):
      dispatch[token, expert, slot] = 1.0
  return Routing(dispatch, dispatch * weights[:, :, None])


# The paper's two allocations.


def token_choice(scores: np.ndarray, capacity: int, k: int, weights: np.ndarray,
                 num_choices: np.ndarray | None = None) -> Routing:
  """Algorithm 1: for choice i = 1..k, for token t = 0..T-1, token t's i-th best expert by
  `scores` takes it into its next free slot if it holds fewer than C tokens. num_choices (T,):
  token t makes only its first num_choices[t] requests (top-p routing); default k each."""
  num_tokens, num_experts = scores.shape
  order = ranked(scores)
  made = np.full(num_tokens, k) if num_choices is None else num_choices
  slots = [[] for _ in range(num_experts)]
  for choice in range(k):
    for token in range(num_tokens):
      expert = order[token, choice]
      if choice < made[token] and len(slots[expert]) < capacity:
        slots[expert].append(token)
  return from_slots(slots, num_tokens, weights, capacity)


def expert_choice(scores: np.ndarray, capacity: int, weights: np.ndarray) -> Routing:
  """Algorithm 2: slot c of expert e holds its c-th best token by `scores`."""
  best = ranked(scores.T)[:, :capacity]
  return from_slots([list(tokens) for tokens in best], scores.shape[0], weights, capacity)


# The paper's affinities.


def sinkhorn(logits: np.ndarray, num_iters: int) -> np.ndarray:
  """Entropic OT plan exp(logits + f + g) toward rows 1 and columns T/E: from f = 0, each of
  num_iters >= 1 iterations sets g so the columns sum to T/E, then f so the rows sum to 1 (log
  domain), so the rows sum to 1 exactly."""
  num_tokens, num_experts = logits.shape
  row_potential = np.zeros((num_tokens, 1))
  for _ in range(num_iters):
    column = np.log(num_tokens / num_experts) - _logsumexp(logits + row_potential, axis=0)
    row_potential = -_logsumexp(logits + column, axis=1)
  return np.exp(logits + row_potential + column)


def _logsumexp(values: np.ndarray, axis: int) -> np.ndarray:
  top = np.max(values, axis=axis, keepdims=True)
  return top + np.log(np.sum(np.exp(values - top), axis=axis, keepdims=True))


def simplex_projection(values: np.ndarray, mass: float) -> np.ndarray:
  """Euclidean projection of each row of `values` (N, M) onto {p >= 0, sum p = mass}."""
  top = -np.sort(-values, axis=-1)
  excess = np.cumsum(top, axis=-1) - mass
  count = np.arange(1, values.shape[-1] + 1)
  kept = np.sum(top - excess / count > 0, axis=-1, keepdims=True)   # The support's size.
  threshold = np.take_along_axis(excess, kept - 1, axis=-1) / kept
  return np.maximum(values - threshold, 0.0)


def sparse_plan(scores: np.ndarray, potentials: np.ndarray, capacity: int) -> np.ndarray:
  """The semi-dual's plan at token potentials alpha (T,): column e is the argmax over
  {p >= 0, sum p = T/E, ||p||_0 <= C} of <p, S[:, e] - alpha> - |p|^2 / 2, the simplex
  projection of its C largest entries (Kyrillidis et al. 2013), zero elsewhere."""
  num_tokens, num_experts = scores.shape
  values = (scores - potentials[:, None]).T                        # (E, T)
  best = ranked(values)[:, :capacity]
  plan = np.zeros_like(values)
  top = np.take_along_axis(values, best, axis=1)
  np.put_along_axis(plan, best, simplex_projection(top, num_tokens / num_experts), axis=1)
  return plan.T


def sparsity_objective(plan: np.ndarray, scores: np.ndarray) -> float:
  """The sparsity-constrained primal objective <Pi, S> - ||Pi||_F^2 / 2."""
  return float(np.sum(plan * scores) - 0.5 * np.sum(plan**2))


def semi_dual(potentials: np.ndarray, scores: np.ndarray, capacity: int):
  """F(alpha) = <alpha, 1> + sum_e max_p <p, S[:, e] - alpha> - |p|^2 / 2 (p as in sparse_plan)
  and its gradient 1 - (row sums of the plan), by Danskin's theorem."""
  plan = sparse_plan(scores, potentials, capacity)
  value = np.sum(potentials) + sparsity_objective(plan, scores - potentials[:, None])
  return value, 1.0 - plan.sum(axis=1)


class SparsityReference(NamedTuple):
  """The converged sparsity-constrained solve. potentials: a minimiser alpha* of the semi-dual
  F; dual_value: F(alpha*), which bounds <Pi, S> - |Pi|^2 / 2 + <alpha*, 1 - Pi 1> from above
  for every plan Pi meeting the column constraints, and so the objective of every feasible plan;
  plan: the semi-dual's plan at alpha* (its rows need not sum to 1: F has a kink there);
  stationarity: the largest |entry| of the smallest subgradient of F at alpha* found among the
  pieces active there (0 at an exact minimum; it certifies the solve)."""
  plan: np.ndarray
  dual_value: float
  potentials: np.ndarray
  stationarity: float


def _top_supports(scores: np.ndarray, potentials: np.ndarray, capacity: int) -> list[tuple]:
  """Each column's C largest entries of S - alpha: the support F's column term maximises over."""
  best = ranked((scores - potentials[:, None]).T)[:, :capacity]
  return [tuple(sorted(tokens)) for tokens in best.tolist()]


def _pieces(scores: np.ndarray, potentials: np.ndarray, experts: np.ndarray,
            supports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Smooth pieces of F's column terms, piece i the simplex projection of S[U_i, e_i] -
  alpha[U_i] on a fixed support U_i: (values (N,), plans (N, C)) for experts (N,), supports
  (N, C)."""
  values = scores[supports, experts[:, None]] - potentials[supports]
  plans = simplex_projection(values, scores.shape[0] / scores.shape[1])
  return np.sum(plans * (values - 0.5 * plans), axis=1), plans


def _restricted_minimum(scores: np.ndarray, pieces: list, start: np.ndarray) -> np.ndarray:
  """min over alpha of <alpha, 1> + sum_e max over the given pieces (e, U) of e, in epigraph
  form (variables alpha and one bound u_e per column, each piece a smooth convex constraint) by
  SLSQP -> the minimiser alpha, shifted to mean 0 (F is invariant under alpha + constant)."""
  num_tokens, num_experts = scores.shape
  experts = np.array([e for e, _ in pieces])
  supports = np.array([support for _, support in pieces])
  rows = np.arange(len(pieces))[:, None]

  def slack(x):
    return x[num_tokens + experts] - _pieces(scores, x, experts, supports)[0]

  def slack_jacobian(x):
    jacobian = np.zeros((len(pieces), len(x)))
    jacobian[rows, supports] = _pieces(scores, x, experts, supports)[1]
    jacobian[rows[:, 0], num_tokens + experts] = 1.0
    return jacobian

  bounds = np.full(num_experts, -np.inf)
  np.maximum.at(bounds, experts, _pieces(scores, start, experts, supports)[0])
  box = 10 * (1 + np.ptp(scores) + num_tokens / num_experts)   # Keeps a partial model bounded.
  found = optimize.minimize(
      lambda x: (np.sum(x), np.ones_like(x)), np.concatenate([start, bounds]), jac=True,
      method='SLSQP', constraints=[{'type': 'ineq', 'fun': slack, 'jac': slack_jacobian}],
      bounds=[(-box, box)] * num_tokens + [(None, None)] * num_experts,
      options={'maxiter': 1000, 'ftol': 1e-14})
  return found.x[:num_tokens] - np.mean(found.x[:num_tokens])


def _stationarity(scores: np.ndarray, potentials: np.ndarray, pieces: list) -> float:
  """The smallest subgradient of F at alpha over mixtures of the active pieces' plans (one
  convex combination per column, by NNLS): max_t |1 - row t of the mixed plan|."""
  num_tokens, num_experts = scores.shape
  experts = np.array([e for e, _ in pieces])
  supports = np.array([support for _, support in pieces])
  values, plans = _pieces(scores, potentials, experts, supports)
  tops = np.full(num_experts, -np.inf)
  np.maximum.at(tops, experts, values)
  active = np.nonzero(values >= tops[experts] - 1e-9)[0]
  weight = 1e3                          # Holds each column's mixture weights' sum near 1.
  system = np.zeros((num_tokens + num_experts, len(active)))
  system[supports[active].T, np.arange(len(active))] = plans[active].T
  system[num_tokens + experts[active], np.arange(len(active))] = weight
  target = np.concatenate([np.ones(num_tokens), np.full(num_experts, weight)])
  mixture, _ = optimize.nnls(system, target)
  return float(np.max(np.abs(target - system @ mixture)[:num_tokens]))


def sparsity_constrained(scores: np.ndarray, capacity: int, rounds: int = 50) -> SparsityReference:
  """Minimises the semi-dual F (convex, piecewise smooth) exactly: L-BFGS-B first, recording the
  top-C supports of every evaluation (the pieces it switched between near its end), then
  column generation: the minimum of F restricted to the recorded pieces (_restricted_minimum),
  adding the top-C supports at that minimum until F there equals the restricted model's value.
  Then alpha* minimises a lower model of F that F touches at alpha*: a minimiser of F."""
  visited = []

  def recorded(potentials):
    visited.append(_top_supports(scores, potentials, capacity))
    return semi_dual(potentials, scores, capacity)

  found = optimize.minimize(recorded, np.zeros(scores.shape[0]), jac=True, method='L-BFGS-B',
                            options={'maxiter': 200, 'ftol': 1e-15, 'gtol': 1e-12})
  pieces = sorted({(e, support) for supports in visited[-200:]
                   for e, support in enumerate(supports)})
  potentials = found.x - np.mean(found.x)
  for _ in range(rounds):
    potentials = _restricted_minimum(scores, pieces, potentials)
    new = set(enumerate(_top_supports(scores, potentials, capacity))) - set(pieces)
    if not new:
      break
    pieces = sorted(set(pieces) | new)
  return SparsityReference(sparse_plan(scores, potentials, capacity),
                           float(semi_dual(potentials, scores, capacity)[0]), potentials,
                           _stationarity(scores, potentials, pieces))


def marginals(plan: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(row sums (T,), column sums (E,)) of a plan."""
  return plan.sum(axis=1), plan.sum(axis=0)


# The paper's six sparse routers (and sparsity_tc). Without noise, dispatch and combine both come
# from the clean logits; combine is softmax(logits) (the paper's trick) or the affinity itself.


def _affinity(name: str, logits: np.ndarray, capacity: int, sinkhorn_iters: int) -> np.ndarray:
  if name == 'softmax':
    return softmax(logits)
  if name == 'sinkhorn':
    return sinkhorn(logits, sinkhorn_iters)
  return sparsity_constrained(softmax(logits), capacity).plan


def paper_router(name: str, logits: np.ndarray, capacity: int, k: int = 1,
                 softmax_combine: bool = True, sinkhorn_iters: int = 20,
                 scores: np.ndarray | None = None) -> Routing:
  """softmax_tc, sinkhorn_tc, sparsity_tc, softmax_ec, sinkhorn_ec or sparsity_ec (`name`); k is
  token choice's experts per token. scores, when given, replaces the affinity (e.g. another
  solver's sparsity-constrained plan, to check the allocation alone)."""
  affinity_name, allocation = name.rsplit('_', 1)
  if scores is None:
    scores = _affinity(affinity_name, logits, capacity, sinkhorn_iters)
  weights = softmax(logits) if softmax_combine else scores
  if allocation == 'tc':
    return token_choice(scores, capacity, k, weights)
  return expert_choice(scores, capacity, weights)


# Soft MoE (Puigcerver et al. 2023).


def soft_moe(x: np.ndarray, phi: np.ndarray, scale: float | None) -> Routing:
  """x (T, D), phi (D, E, C): Z = x phi (after L2-normalising both along D and scaling phi, when
  scale is given); dispatch = softmax of Z over tokens, combine = softmax over all slots."""
  if scale is not None:
    x = x / np.sqrt(np.sum(x**2, axis=1, keepdims=True) + 1e-6)
    phi = scale * phi / np.sqrt(np.sum(phi**2, axis=0, keepdims=True) + 1e-6)
  logits = np.einsum('td,dec->tec', x, phi)
  num_tokens = logits.shape[0]
  combine = softmax(logits.reshape(num_tokens, -1)).reshape(logits.shape)
  return Routing(softmax(logits, axis=0), combine)


# DeepSeek-V3's sigmoid gate: sigmoid_tc (no bias) and lossfree_tc (the bias is its state).


def sigmoid_choice_scores(logits: np.ndarray, bias: np.ndarray | None = None, n_groups: int = 1,
                          topk_groups: int = 1) -> np.ndarray:
  """sigmoid(logits) + bias, with every expert outside the token's topk_groups best groups at
  -inf; a group scores the sum of its top 2 when there is a bias, its max otherwise."""
  choice = sigmoid(logits) + (0.0 if bias is None else bias)
  if n_groups == 1:
    return choice
  grouped = choice.reshape(choice.shape[0], n_groups, -1)
  top = -np.sort(-grouped, axis=-1)
  group_score = top[..., :2].sum(-1) if bias is not None else top[..., 0]
  kept = np.zeros(group_score.shape, bool)
  np.put_along_axis(kept, ranked(group_score)[:, :topk_groups], True, axis=1)
  return np.where(kept[..., None], grouped, -np.inf).reshape(choice.shape)


def gate(logits: np.ndarray, k: int, bias: np.ndarray | None = None, n_groups: int = 1,
         topk_groups: int = 1, route_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
  """DeepSeek-V3's Gate on the router's logits: (weights (T, k), experts (T, k)). The experts
  are the top k of sigmoid_choice_scores (the bias and the groups choose); the weights are the
  unbiased s = sigmoid(logits) there, over their sum (at k > 1), times route_scale."""
  experts = ranked(sigmoid_choice_scores(logits, bias, n_groups, topk_groups))[:, :k]
  scores = np.take_along_axis(sigmoid(logits), experts, axis=1)
  total = scores.sum(axis=1, keepdims=True) if k > 1 else 1.0
  return route_scale * scores / total, experts


def sigmoid_gate(logits: np.ndarray, capacity: int, k: int, bias: np.ndarray | None = None,
                 n_groups: int = 1, topk_groups: int = 1, route_scale: float = 1.0) -> Routing:
  """Token choice of the Gate's experts (gate), each combined with its weight."""
  gate_weights, experts = gate(logits, k, bias, n_groups, topk_groups, route_scale)
  choice = sigmoid_choice_scores(logits, bias, n_groups, topk_groups)
  weights = np.zeros(logits.shape)
  np.put_along_axis(weights, experts, gate_weights, axis=1)
  return token_choice(choice, capacity, k, weights)


# BASE layers (Lewis et al. 2021).


def balanced_assignment(affinity: np.ndarray, capacity: int) -> tuple[list[list[int]], float]:
  """The assignment of tokens to E*C slots (each token at most one) of maximal total affinity:
  (each expert's tokens in increasing order, the total)."""
  num_tokens, num_experts = affinity.shape
  tokens, slots = optimize.linear_sum_assignment(np.repeat(affinity, capacity, axis=1),
                                                 maximize=True)
  experts = slots // capacity
  per_expert = [sorted(tokens[experts == e].tolist()) for e in range(num_experts)]
  return per_expert, float(affinity[tokens, experts].sum())


def base(logits: np.ndarray, capacity: int, train: bool = True) -> Routing:
  """The balanced assignment in training, greedy top-1 token choice in evaluation; combine
  sigmoid(logits)."""
  weights = sigmoid(logits)
  if not train:
    return token_choice(logits, capacity, 1, weights)
  per_expert, _ = balanced_assignment(logits, capacity)
  return from_slots(per_expert, logits.shape[0], weights, capacity)


def assignment_gap(affinity: np.ndarray, capacity: int) -> float:
  """How much lower the best assignment whose token-to-expert map differs from the optimum's is:
  the minimum, over the optimum's (token, expert) pairs, of the optimum minus the best total
  with that pair forbidden (every other map moves or drops one of them, or places no extra
  token: the optimum fills every slot or places every token). inf when nothing else exists."""
  per_expert, best = balanced_assignment(affinity, capacity)
  gap = np.inf
  for expert, tokens in enumerate(per_expert):
    for token in tokens:
      forbidden = affinity.copy()
      forbidden[token, expert] = -1e9 * (1 + np.abs(affinity).max())
      _, total = balanced_assignment(forbidden, capacity)
      if total > -1e8:
        gap = min(gap, best - total)
  return gap


# Top-p routing (Huang et al. 2024) and fixed random routing.


def topp_num_choices(probs: np.ndarray, top_p: float, k_max: int) -> np.ndarray:
  """n = min(k_max, 1 + #{j : P_(1) + ... + P_(j) <= p}) per token, P sorted decreasing. (T,)"""
  cumulative = np.cumsum(-np.sort(-probs, axis=1), axis=1)
  return np.minimum(k_max, 1 + np.sum(cumulative <= top_p, axis=1))


def topp(logits: np.ndarray, capacity: int, k_max: int, top_p: float = 0.4) -> Routing:
  """Token choice with k = k_max where token t makes only its first n_t requests; combine P."""
  probs = softmax(logits)
  return token_choice(probs, capacity, k_max, probs, topp_num_choices(probs, top_p, k_max))


def random_tc(logits: np.ndarray, capacity: int, k: int) -> Routing:
  """Token choice top-k on the (frozen random kernel's) logits; combine 1/k."""
  return token_choice(logits, capacity, k, np.full(logits.shape, 1.0 / k))
