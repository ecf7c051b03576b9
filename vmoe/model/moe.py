"""The MoE layer of the paper's unified formulation (eq. minibatch-moe), for every router.

Axis letters: b = image, n = token of an image, g = routing group, s = token of a group,
d = model dim, f = expert MLP hidden dim, e = expert, c = buffer slot of an expert.

  MoE(X)[t] = sum_{e, c} C[t, e, c] * MLP_e( sum_t' D[t', e, c] X[t'] )

Sparse routers (binary D) are run by index: buffers are gathered from the tokens each slot holds
and expert outputs are scatter-added back with their combine weights, so no (S, E, C) tensor is
built. Soft MoE, and the `dispatch='einsum'` reference path, contract the dense tensors instead.
Buffers are laid out expert-major (E, G, C, D) so that the experts run as one batched matmul and
an expert-sharded mesh moves tokens with a single all-to-all.

Precision, as V-MoE's Bfloat16Dispatcher (its vmoe/moe.py) under the paper configs' bfloat16
dispatch: the router computes in float32 whatever the model's dtype (router.py), so routing
decisions do not depend on it, and its dispatch and combine weights stay float32. The tokens are
cast to the dispatch dtype (`buffer_dtype`) before the dispatch, and the experts return their
outputs in it. Every contraction of a float32 weight with those tokens or outputs computes in
float32, as V-MoE's einsums of float32 weights with bfloat16 data promote to float32: Soft MoE's
dispatch (so its buffers, and its all-to-all to the experts, are float32) and every combine
(products and sums over a token's slots in float32, then cast to the model's dtype). A sparse
router's buffers are the tokens themselves, gathered in the dispatch dtype; the einsum path's
one-hot dispatch tensor is cast to it, as V-MoE's boolean dispatch mask is. The experts compute in
the model's dtype from float32 parameters.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from vmoe.model import moe_config
from vmoe.model import sharding
from vmoe.routing import allocation
from vmoe.routing import router as router_lib
from vmoe.routing import router_config


def dispatch_by_index(x: jax.Array, slot_token: jax.Array) -> jax.Array:
  """Gathers expert buffers: x (G, S, D), slot_token (G, E, C) -> (E, G, C, D); empty slots are 0.

  The gather is vmapped over groups, so an SPMD partitioner sees G as a batch dimension and keeps
  it local to the devices that hold the group.
  """
  gather = lambda xg, tg: xg.at[tg].get(mode='fill', fill_value=0)     # (S, D), (E, C) -> (E, C, D)
  return jnp.transpose(jax.vmap(gather)(x, slot_token), (1, 0, 2, 3))


# The dtype every combine multiplies and sums in: V-MoE's combine einsum of its float32 weights
# with bfloat16 expert outputs promotes to float32 (docs/fidelity.md D3).
COMBINE_DTYPE = jnp.float32


def combine_by_index(outputs: jax.Array, slot_token: jax.Array, slot_weight: jax.Array,
                     num_tokens: int) -> jax.Array:
  """Scatter-adds weighted expert outputs (E, G, C, D) back to their tokens -> (G, S, D), each
  product and the sum over a token's slots in COMBINE_DTYPE."""
  def combine(yg, tg, wg):  # (E, C, D), (E, C), (E, C) -> (S, D); empty slots (index S) drop.
    weighted = wg[..., None].astype(COMBINE_DTYPE) * yg.astype(COMBINE_DTYPE)
    return jnp.zeros((num_tokens, yg.shape[-1]), COMBINE_DTYPE).at[tg].add(weighted, mode='drop')
  return jax.vmap(combine)(jnp.transpose(outputs, (1, 0, 2, 3)), slot_token, slot_weight)


def dispatch_dense(x: jax.Array, dispatch: jax.Array) -> jax.Array:
  """Buffers from the dense dispatch tensor: x (G, S, D), dispatch (G, S, E, C) -> (E, G, C, D).

  One batched matmul per group, (E*C, S) @ (S, D), in the layout of XLA's dot output (batch,
  free, free), then one transpose to expert-major; Soft MoE's dispatch, whose cost over its
  experts bench/moe_layer.py reports (`vs_own_experts`). It computes in the promoted dtype of the
  two, as V-MoE's einsum does: float32 for Soft MoE's float32 weights on bfloat16 tokens, the
  tokens' dtype for a one-hot tensor cast to it.
  """
  num_groups, num_tokens, num_experts, capacity = dispatch.shape
  dtype = jnp.result_type(dispatch, x)
  slots = dispatch.reshape(num_groups, num_tokens, num_experts * capacity).astype(dtype)
  buffers = jax.lax.dot_general(slots, x.astype(dtype), (((1,), (1,)), ((0,), (0,))))  # (G, E*C, D)
  buffers = buffers.reshape(num_groups, num_experts, capacity, x.shape[-1])
  return jnp.transpose(buffers, (1, 0, 2, 3))


def combine_dense(outputs: jax.Array, combine: jax.Array) -> jax.Array:
  """Outputs (E, G, C, D) combined with the dense combine tensor (G, S, E, C) -> (G, S, D); a
  batched matmul per group, (S, E*C) @ (E*C, D), as dispatch_dense, in COMBINE_DTYPE."""
  num_experts, num_groups, capacity, dim = outputs.shape
  slots = jnp.transpose(outputs, (1, 0, 2, 3)).reshape(num_groups, num_experts * capacity, dim)
  weights = combine.reshape(num_groups, -1, num_experts * capacity).astype(COMBINE_DTYPE)
  return jax.lax.dot_general(weights, slots.astype(COMBINE_DTYPE), (((2,), (1,)), ((0,), (0,))))


def routing_metrics(route, num_tokens: int, capacity: int) -> dict:
  """Router health, averaged over groups: dropped-token fraction, experts per token, expert load,
  unfilled slots.

  expert_load[e] is the fraction of expert e's C buffer slots that hold a token (Soft MoE slots
  always hold a full convex combination of tokens, so its load is 1); unfilled_slots is the
  fraction of all E C slots that hold none, 1 - mean(expert_load).
  """
  if isinstance(route, router_lib.SparseRouting):
    num_groups = route.slot_token.shape[0]
    group = jnp.arange(num_groups)[:, None, None]
    count = jnp.zeros((num_groups, num_tokens), jnp.int32).at[group, route.slot_token].add(
        1, mode='drop')                                      # (G, S) experts processing each token.
    load = jnp.mean(route.slot_token < num_tokens, axis=(0, 2))
  else:
    count = jnp.sum(jnp.any(route.dispatch > 0, axis=-1), axis=-1)   # (G, S)
    load = jnp.sum(route.dispatch, axis=(0, 1, 3)) / (route.dispatch.shape[0] * capacity)
  count = count.astype(jnp.float32)
  return {
      'dropped_tokens': jnp.mean(count == 0),
      'experts_per_token_mean': jnp.mean(count),
      'experts_per_token_min': jnp.min(count),
      'experts_per_token_max': jnp.max(count),
      'expert_load': load,
      'unfilled_slots': 1.0 - jnp.mean(load),
  }


def buffer_dtype(compute_dtype, dispatch_dtype: str):
  """The dtype of the tokens entering the dispatch and of the expert outputs leaving the experts:
  `dispatch_dtype` ('float32' or 'bfloat16') under a float32 model, and bfloat16 under a bfloat16
  one (float32 tokens around bfloat16 experts would only add casts). Under a float32 model,
  'bfloat16' is V-MoE's Bfloat16Dispatcher: a sparse router's tokens travel to and from the
  experts in bfloat16, the experts compute in float32, and the weights and the combine stay
  float32 (module docstring)."""
  if jnp.dtype(compute_dtype) == jnp.bfloat16:
    return jnp.bfloat16
  return DISPATCH_DTYPES[dispatch_dtype]


DISPATCH_DTYPES = {name: getattr(jnp, name) for name in moe_config.DISPATCH_DTYPE_NAMES}


def expert_initializer(init: nn.initializers.Initializer, expert_init: str):
  """An initializer of stacked expert parameters (E, ...) from one of a single expert's (...).

  'shared': every expert starts from the same draw, as V-MoE's ImageNet-21k recipe does (its
  experts' initialisation is vmapped with split_rngs=False for 'params'); 'independent': each
  expert draws its own.
  """
  def stacked(key, shape, dtype=jnp.float32):
    if expert_init == 'shared':
      return jnp.broadcast_to(init(key, shape[1:], dtype), shape)
    return jax.vmap(lambda k: init(k, shape[1:], dtype))(jax.random.split(key, shape[0]))
  return stacked


class Experts(nn.Module):
  """E two-layer GELU MLPs with stacked weights, applied to buffers (E, G, C, D).

  expert_init: 'shared' (one initial draw for all experts, V-MoE's) or 'independent'. The experts
  compute in `dtype` from float32 parameters and return outputs of `output_dtype` (None: the
  buffers' dtype); the cast comes before the outputs leave for the combine, so an expert-sharded
  mesh's all-to-all moves them in that dtype.
  """
  num_experts: int
  mlp_dim: int
  dropout_rate: float = 0.0
  expert_init: str = 'shared'
  dtype: jnp.dtype = jnp.float32
  output_dtype: jnp.dtype | None = None

  @nn.compact
  def __call__(self, buffers: jax.Array, *, train: bool) -> jax.Array:
    # On an expert-sharded mesh each device runs its own experts on every group of its data row:
    # the compiler's all-to-all brings the tokens here and takes the outputs back (sharding.py).
    buffers = sharding.constrain(buffers, sharding.EXPERT_BUFFERS)
    dim = buffers.shape[-1]
    # Each expert is initialised like a ViT MLP (Xavier-uniform kernels, near-zero biases).
    kernel_init = expert_initializer(nn.initializers.xavier_uniform(), self.expert_init)
    bias_init = expert_initializer(nn.initializers.normal(stddev=1e-6), self.expert_init)
    wi = self.param('wi', kernel_init, (self.num_experts, dim, self.mlp_dim))
    bi = self.param('bi', bias_init, (self.num_experts, self.mlp_dim))
    wo = self.param('wo', kernel_init, (self.num_experts, self.mlp_dim, dim))
    bo = self.param('bo', bias_init, (self.num_experts, dim))
    # One (G*C, D) matrix per expert: XLA:CPU runs these batched matmuls faster than with G and C
    # as separate axes. G is the major half of the merged axis, so its 'data' sharding carries
    # over.
    num_experts, num_groups, capacity, _ = buffers.shape
    tokens = buffers.reshape(num_experts, num_groups * capacity, dim).astype(self.dtype)
    wi, bi, wo, bo = (p.astype(self.dtype) for p in (wi, bi, wo, bo))
    h = jnp.einsum('end,edf->enf', tokens, wi) + bi[:, None, :]
    h = nn.Dropout(self.dropout_rate, deterministic=not train)(nn.gelu(h))
    y = jnp.einsum('enf,efd->end', h, wo) + bo[:, None, :]
    y = nn.Dropout(self.dropout_rate, deterministic=not train)(y)
    y = y.astype(self.output_dtype or buffers.dtype)
    return sharding.constrain(y.reshape(buffers.shape), sharding.EXPERT_BUFFERS)


class MoeMlp(nn.Module):
  """Drop-in replacement for a transformer block's MLP: x (B, N, D) -> (y (B, N, D), metrics).

  Composed of its two modules, whose parameters sit under their field names ('router',
  'experts'): `router` maps routing groups (G, S, D) to (SparseRouting | DenseRouting, metrics
  with 'aux_loss') as router_lib.Router does, and `experts` maps buffers (E, G, C, D) to outputs
  of the same shape as Experts does (`moe_mlp` builds the layer of a router config). Groups are
  `images_per_group` images (S = images_per_group * N tokens; Soft MoE: 1 image, T = N, as in the
  paper). metrics holds the router's (its 'aux_loss': the weighted balance losses, to add to the
  training loss; the sparsity-constrained solver's health when it runs) and the router health of
  `routing_metrics`. Tokens enter the dispatch in `dispatch_dtype` (`buffer_dtype`); the combine
  computes in float32 (module docstring).
  """
  router: nn.Module
  experts: nn.Module
  images_per_group: int
  dispatch: str = 'indices'      # 'indices' (gather/scatter) or 'einsum' (dense reference path).
  dispatch_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool = False):
    # A parsed experiment's batches are whole routing groups on every device
    # (vmoe/train/experiment.py).
    batch, tokens_per_image, dim = x.shape
    groups = x.reshape(batch // self.images_per_group, self.images_per_group * tokens_per_image,
                       dim)
    num_tokens = groups.shape[1]

    route, router_metrics = self.router(groups, train=train)
    tokens = groups.astype(self.dispatch_dtype)    # The router above read them in float32.
    if isinstance(route, router_lib.SparseRouting) and self.dispatch == 'indices':
      outputs = self.experts(dispatch_by_index(tokens, route.slot_token), train=train)
      y = combine_by_index(outputs, route.slot_token, route.slot_weight, num_tokens)
    else:
      dense = route
      if isinstance(route, router_lib.SparseRouting):
        dispatch, combine = jax.vmap(allocation.to_dense, in_axes=(0, 0, None))(
            route.slot_token, route.slot_weight, num_tokens)
        # One-hot, so exact in the tokens' dtype: the buffers hold the tokens themselves (V-MoE
        # dispatches with a boolean mask).
        dense = router_lib.DenseRouting(dispatch.astype(tokens.dtype), combine)
      # The (G, S, E, C) tensors stay with their groups; unconstrained, the partitioner splits
      # them over E and the backward pass all-gathers every image's tokens (Soft MoE, B/32).
      dense = jax.tree.map(lambda a: sharding.constrain(a, sharding.BATCH), dense)
      outputs = self.experts(dispatch_dense(tokens, dense.dispatch), train=train)
      y = combine_dense(outputs, dense.combine)

    y = sharding.constrain(y, sharding.BATCH)   # Combined tokens go back to their images' devices.
    capacity = outputs.shape[2]
    metrics = {**routing_metrics(route, num_tokens, capacity), **router_metrics}
    return y.reshape(batch, tokens_per_image, dim).astype(x.dtype), metrics


def moe_mlp(num_experts: int, mlp_dim: int, router: router_config.RouterConfig, group_size: int, *,
            dispatch: str = 'indices', dropout_rate: float = 0.0, expert_init: str = 'shared',
            dtype=jnp.float32, dispatch_dtype=jnp.float32, name: str | None = None) -> MoeMlp:
  """The MoE layer of `router` over `num_experts` Experts of `mlp_dim` hidden units, routing
  groups of `group_size` images (Soft MoE: each image alone,
  `moe_config.images_per_routing_group`); the experts compute in `dtype` and return their outputs
  in `dispatch_dtype`.

  The router and the experts are made outside any parent (parent=None), so that the MoeMlp, not
  the module building it, adopts them under its field names: the parameter paths stay
  .../moe/router/... and .../moe/experts/..., which checkpoints and the sharding rules key on.
  """
  return MoeMlp(
      router=router_lib.Router(router, num_experts, parent=None),
      experts=Experts(num_experts, mlp_dim, dropout_rate, expert_init, dtype,
                      output_dtype=dispatch_dtype, parent=None),
      images_per_group=moe_config.images_per_routing_group(router, group_size), dispatch=dispatch,
      dispatch_dtype=dispatch_dtype, name=name)
