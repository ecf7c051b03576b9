"""Vision Transformer with MoE layers (V-MoE; Riquelme et al. 2021), the paper's model family.

Shapes: B images, P patch size, N tokens per image, D model width, R representation size.

images (B, H, W, C) -> conv patch embedding (B, H/P * W/P, D) -> [class token] + learned position
embedding -> `depth` pre-LayerNorm blocks (self-attention, then an MLP or an MoE layer) -> final
LayerNorm -> pooling ('tok': the class token, as V-MoE; 'gap': mean over tokens) -> optional
pre-logits layer (Dense + tanh) -> linear head.

`VisionTransformer.__call__` returns (logits, aux) with aux = {'encoded': (B, N, D) after the final
LayerNorm, 'pre_logits': (B, R) the few-shot representation, 'aux_loss': sum of the MoE layers'
weighted balance losses, 'router': {'block_01': metrics of that MoE layer, ...}}.

A model is dense when `moe` is None (`build_model` with moe.num_experts = 0).
"""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmoe.model import moe as moe_lib
from vmoe.model import moe_config
from vmoe.model import vit_config

# The compute dtypes by name (vit_config.DTYPE_NAMES).
DTYPES = {name: getattr(jnp, name) for name in vit_config.DTYPE_NAMES}
# What an encoder block keeps for its backward pass under config.model.remat: nothing but its
# input. Each block's activations are recomputed from the (B, N, D) residual stream entering it,
# at the cost of one more forward pass of the encoder (about a third more step FLOPs). The
# alternative, jax.checkpoint_policies.dots_with_no_batch_dims_saveable, keeps every Dense output
# (the (B, N, mlp_dim) hidden layer is the largest activation of a block), so it would save little
# of what remat is for: fitting the recipe's per-device batch on a smaller accelerator.
REMAT_POLICY = jax.checkpoint_policies.nothing_saveable


class MlpBlock(nn.Module):
  """The dense transformer MLP: Dense(mlp_dim) -> GELU -> Dense(D), dropout after each; computed
  in `dtype` from float32 parameters."""
  mlp_dim: int
  dropout_rate: float = 0.0
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
    # ViT's initialisation: Xavier-uniform kernels, near-zero biases (as the MoE experts).
    dense = lambda features, name: nn.Dense(
        features, kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6), dtype=self.dtype, name=name)
    dropout = lambda h: nn.Dropout(self.dropout_rate, deterministic=not train)(h)
    h = dropout(nn.gelu(dense(self.mlp_dim, 'fc1')(x)))
    return dropout(dense(x.shape[-1], 'fc2')(h))


class EncoderBlock(nn.Module):
  """Pre-LayerNorm block: x + Attention(LN(x)), then + MLP(LN(.)) or + MoE(LN(.)).

  Returns (x, metrics): metrics is the MoE layer's router metrics dict, or None for a dense MLP.
  Computes in `dtype` (LayerNorm statistics and the attention softmax in float32); `train` is
  positional so that nn.remat can treat it as static.
  """
  num_heads: int
  mlp_dim: int
  dropout_rate: float = 0.0
  moe: moe_config.MoeConfig | None = None
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool):
    y = nn.LayerNorm(dtype=self.dtype, name='norm1')(x)
    y = nn.MultiHeadDotProductAttention(
        num_heads=self.num_heads, kernel_init=nn.initializers.xavier_uniform(),
        dtype=self.dtype, force_fp32_for_softmax=True,
        deterministic=True, name='attention')(y, y)   # No attention dropout (V-MoE: 0.0).
    x = x + nn.Dropout(self.dropout_rate, deterministic=not train)(y)
    y = nn.LayerNorm(dtype=self.dtype, name='norm2')(x)
    if self.moe is None:
      mlp = MlpBlock(self.mlp_dim, self.dropout_rate, self.dtype, name='mlp')
      return x + mlp(y, train=train), None
    y, metrics = moe_lib.moe_mlp(
        num_experts=self.moe.num_experts, mlp_dim=self.mlp_dim, router=self.moe.router,
        group_size=self.moe.group_size, dispatch=self.moe.dispatch,
        expert_init=self.moe.expert_init, dropout_rate=self.moe.expert_dropout(self.dropout_rate),
        dtype=self.dtype,
        dispatch_dtype=moe_lib.buffer_dtype(self.dtype, self.moe.dispatch_dtype), name='moe')(
            y, train=train)
    return x + y, metrics


class VisionTransformer(nn.Module):
  """ViT / V-MoE classifier: images (B, H, W, C) -> (logits (B, num_classes), aux)."""
  num_classes: int
  patch_size: int
  width: int
  depth: int
  mlp_dim: int
  num_heads: int
  pool: str = 'tok'
  representation_size: int | None = None
  head_bias_init: float = 0.0
  dropout_rate: float = 0.0
  moe: moe_config.MoeConfig | None = None   # None: a dense model.
  dtype: jnp.dtype = jnp.float32         # Compute dtype of the encoder (ModelConfig.dtype).
  remat: bool = False                    # Recompute blocks in the backward pass (REMAT_POLICY).

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool = False):
    p = self.patch_size
    x = nn.Conv(self.width, (p, p), strides=(p, p), padding='VALID', dtype=self.dtype,
                name='embedding')(images)
    x = x.reshape(x.shape[0], -1, self.width)                          # (B, H/P * W/P, D)
    if self.pool == 'tok':   # The class token is initialised at zero (ViT, V-MoE).
      cls = self.param('cls', nn.initializers.zeros, (1, 1, self.width)).astype(self.dtype)
      x = jnp.concatenate([jnp.tile(cls, (x.shape[0], 1, 1)), x], axis=1)
    # One learned embedding per token, the class token's included (ViT: stddev 0.02).
    posemb = self.param('pos_embedding', nn.initializers.normal(stddev=0.02),
                        (1,) + x.shape[1:])
    x = nn.Dropout(self.dropout_rate, deterministic=not train)(x + posemb.astype(self.dtype))

    moe_layers = () if self.moe is None else vit_config.moe_layer_indices(
        self.depth, self.moe.every, self.moe.last)
    router_metrics, aux_loss = {}, jnp.zeros((), jnp.float32)
    # static_argnums counts the module: (self, x, train).
    block = nn.remat(EncoderBlock, policy=REMAT_POLICY, static_argnums=(2,)) if self.remat else (
        EncoderBlock)
    for i in range(self.depth):
      name = vit_config.block_name(i)
      x, metrics = block(
          self.num_heads, self.mlp_dim, self.dropout_rate,
          self.moe if i in moe_layers else None, self.dtype, name=name)(x, train)
      if metrics is not None:
        router_metrics[name] = metrics
        aux_loss = aux_loss + metrics['aux_loss']
    # From here on float32: the features the few-shot evaluation reads, and the logits of the loss.
    encoded = nn.LayerNorm(dtype=jnp.float32, name='encoder_norm')(x)

    pooled = encoded[:, 0] if self.pool == 'tok' else jnp.mean(encoded, axis=1)
    pre_logits = pooled
    if self.representation_size is not None:
      pre_logits = jnp.tanh(nn.Dense(self.representation_size, name='pre_logits')(pooled))
    # Zero kernel (big_vision); the bias starts at head_bias_init (V-MoE: -10, so that sigmoid
    # outputs start near 0 for all ~21k classes).
    logits = nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros,
                      bias_init=nn.initializers.constant(self.head_bias_init), name='head')(
                          pre_logits)
    aux = {'encoded': encoded, 'pre_logits': pre_logits, 'aux_loss': aux_loss,
           'router': router_metrics}
    return logits, aux


def build_model(model: vit_config.ModelConfig, moe: moe_config.MoeConfig) -> VisionTransformer:
  """The ViT of `model`, with MoE layers as `moe` places them (dense when moe.num_experts == 0);
  vmoe/train/experiment.py `parse` checked that they place at least one."""
  size = model.size
  return VisionTransformer(
      num_classes=model.num_classes, patch_size=model.patch, pool=model.pool,
      representation_size=model.representation_size, head_bias_init=model.head_bias_init,
      dropout_rate=model.dropout_rate, moe=moe if moe.num_experts > 0 else None,
      dtype=DTYPES[model.dtype], remat=model.remat, **dataclasses.asdict(size))
