"""FLOPs per image of a config's model, from XLA's cost analysis of the compiled computation.

What is counted: the 'flops' entry of `jax.jit(f).lower(...).compile().cost_analysis()` (a dict in
jax 0.10.2; older versions returned a one-element list) on the current backend, after XLA's
optimisations. XLA counts 2 FLOPs per multiply-add of dots and convolutions and 1 per elementwise
arithmetic op (adds, the LayerNorm and softmax arithmetic, comparisons); transcendentals (exp,
tanh, erf) are tallied separately by XLA and are not included; gathers, scatters, sorts and
collectives count as (nearly) zero, and the body of a loop (lax.fori_loop / while) is counted once,
not once per iteration (checked: ten 64x64 matmuls in a fori_loop count as one). So the sparse
routers' dispatch/combine by index costs ~0 here, Soft MoE's dispatch/combine einsums are counted,
and the Sinkhorn iterations and the sparsity-constrained solver's L-BFGS steps count one
iteration each. Both are tiny next to the matmuls (20 Sinkhorn iterations on a 400 x 32 group of
B/32 are ~2e6 FLOPs per group, 0.02% of the forward), but sorting is not arithmetic: the
sparsity-constrained router's extra cost shows in wall-clock time, not here.

Two kinds: 'forward' is `model.apply(..., train=False)`; 'train' is `jax.value_and_grad` of the
training loss (the classification loss `loss` + the MoE auxiliary loss, router noise on), i.e.
forward + backward without the optimizer update (a few FLOPs per parameter). Both are divided by
the batch, which is one routing group (moe.group_size images; 1 for a dense model):
routing cost is per group, so the per-image figure does not depend on the batch size.
"""
import jax
import jax.numpy as jnp

from vmoe import moe as moe_lib
from vmoe import train_step
from vmoe import vit


def compiled_flops(compiled) -> float:
  """The 'flops' of a compiled computation's cost analysis (dict, or a list of one dict)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0]
  return float(analysis['flops'])


def _batch_size(moe: moe_lib.MoeConfig) -> int:
  return moe.group_size if moe.num_experts > 0 else 1


def _forward(model):
  def forward(params, images):
    return model.apply({'params': params}, images, train=False)[0]
  return forward


def _train(model, loss_kind: str):
  def loss_and_grad(params, images, labels, rng):
    loss_fn = lambda p: train_step.training_loss(model, p, images, labels, rng, loss_kind)
    (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return loss, grads   # The aux outputs are dropped, so XLA counts no work for them.
  return loss_and_grad


KINDS = ('forward', 'train')


def flops_per_image(model_config: vit.ModelConfig, moe: moe_lib.MoeConfig, loss: str,
                    kind: str = 'forward') -> float:
  """FLOPs per image of a model: kind 'forward' (inference) or 'train' (fwd + bwd of `loss`).

  Nothing is allocated: parameters and inputs are abstract (jax.eval_shape); only compilation runs.
  """
  if kind not in KINDS:
    raise ValueError(f'unknown FLOPs kind {kind!r}; valid: {", ".join(KINDS)}.')
  model = vit.build_model(model_config, moe)
  batch = _batch_size(moe)
  images = jax.ShapeDtypeStruct((batch,) + model_config.image_shape, jnp.float32)
  rng = jax.random.PRNGKey(0)
  params = jax.eval_shape(lambda r, x: model.init(r, x, train=False)['params'], rng, images)
  if kind == 'forward':
    lowered = jax.jit(_forward(model)).lower(params, images)
  else:
    labels = jax.ShapeDtypeStruct((batch, model_config.num_classes), jnp.float32)
    lowered = jax.jit(_train(model, loss)).lower(params, images, labels, rng)
  return compiled_flops(lowered.compile()) / batch
