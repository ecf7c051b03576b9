"""XLA's FLOP count (vmoe/train/flops.py) against hand-counted matmul FLOPs, per image of a model.

Two kinds: 'forward' is `model.apply(..., train=False)`; 'train' is `jax.value_and_grad` of the
training loss (the classification loss + the MoE auxiliary loss, router noise on), i.e. forward +
backward without the optimizer update. Both are divided by the batch, which is one routing group
(moe.group_size images; 1 for a dense model): routing cost is per group, so the per-image figure
does not depend on the batch size.
"""
import jax
import jax.numpy as jnp

from vmoe.model import vit
from vmoe.train import flops
from vmoe.train import train_step
from vmoe.model.vit_test import make_config

# mu/7 on 28x28x1: width 32, 2 blocks, MLP 128, 16 patches + class token = 17 tokens, 10 classes.
# Multiply-adds: patch embedding 16 * 49 * 32 = 25,088; per block, projections 4 * 17 * 32 * 32 =
# 69,632, attention 2 * 17 * 17 * 32 = 18,496, MLP 2 * 17 * 32 * 128 = 139,264, so 227,392;
# head 32 * 10 = 320. Total 25,088 + 2 * 227,392 + 320 = 480,192 MACs = 960,384 FLOPs.
MU7_MATMUL_FLOPS = 960_384


def mu7(router='softmax_ec', c=1.0, num_experts=8):
  return make_config('mu/7', router, num_experts=num_experts, c=c, image_size=28, group_size=16)


def per_image(config, kind='forward') -> float:
  """FLOPs per image of the config's model: kind 'forward' or 'train' (module docstring), from
  abstract parameters and inputs (only compilation runs)."""
  model = vit.build_model(config.model, config.moe)
  batch = config.moe.group_size if config.moe.num_experts > 0 else 1
  images = jax.ShapeDtypeStruct((batch,) + config.model.image_shape, jnp.float32)
  rng = jax.random.PRNGKey(0)
  params = jax.eval_shape(lambda r, x: model.init(r, x, train=False)['params'], rng, images)
  if kind == 'forward':
    forward = lambda p, x: model.apply({'params': p}, x, train=False)[0]
    lowered = jax.jit(forward).lower(params, images)
  else:
    def loss_and_grad(p, x, labels, key):
      loss_fn = lambda q: train_step.training_loss(model, q, x, labels, key, config.loss)
      (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(p)
      return loss, grads   # The aux outputs are dropped, so XLA counts no work for them.
    labels = jax.ShapeDtypeStruct((batch, config.model.num_classes), jnp.float32)
    lowered = jax.jit(loss_and_grad).lower(params, images, labels, rng)
  return flops.compiled_flops(lowered.compile()) / batch


def test_dense_forward_is_the_matmul_count_plus_elementwise():
  forward = per_image(mu7(num_experts=0))
  # XLA adds the elementwise work (LayerNorm, softmax, GELU, biases, residuals): a few percent.
  assert MU7_MATMUL_FLOPS <= forward <= 1.2 * MU7_MATMUL_FLOPS


def test_capacity_two_adds_one_tokens_worth_of_expert_mlp():
  # Block 1 is an MoE layer; a group is 16 images x 17 tokens = 272 tokens, E = 8: C = 34 slots per
  # expert at c=1 and 68 at c=2. c=2 adds 8 * 34 = 272 slots per group = 17 per image, each through
  # an expert MLP of 2 * 2 * 32 * 128 = 16,384 FLOPs: 278,528 FLOPs per image.
  extra = per_image(mu7(c=2.0)) - per_image(mu7(c=1.0))
  assert 278_528 <= extra <= 1.15 * 278_528


def test_training_costs_about_three_forwards():
  config = mu7('sinkhorn_tc')
  ratio = per_image(config, 'train') / per_image(config)
  assert 2.5 <= ratio <= 3.5    # Backward = two matmuls per forward matmul.


def test_compiled_and_lowered_flops_count_two_per_multiply_add():
  # (8, 16) @ (16, 4): 8 * 4 outputs of 16 multiply-adds = 512 MACs = 1,024 FLOPs.
  lowered = jax.jit(jnp.matmul).lower(jnp.ones((8, 16)), jnp.ones((16, 4)))
  assert flops.compiled_flops(lowered.compile()) == flops.lowered_flops(lowered) == 1024


def test_lowered_count_is_the_compiled_one_within_its_fusions():
  # Before XLA's passes the count holds the same matmuls and nearly the same elementwise work
  # (simplification removes or merges a few ops): within 1% on the MoE model's training step.
  model = vit.build_model(mu7('sinkhorn_ec').model, mu7('sinkhorn_ec').moe)
  images = jnp.zeros((16,) + mu7().model.image_shape)
  params = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x, train=False)['params'],
                          images)
  grad = jax.grad(lambda p, x: model.apply({'params': p}, x, train=False)[0].sum())
  lowered = jax.jit(grad).lower(params, images)
  compiled = flops.compiled_flops(lowered.compile())
  assert abs(flops.lowered_flops(lowered) / compiled - 1) < 0.01
