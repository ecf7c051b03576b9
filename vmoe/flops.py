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
training loss (classification loss of config.loss + the MoE auxiliary loss, router noise on),
i.e. forward + backward without the optimizer update (a few FLOPs per parameter). Both are divided
by the batch, which is one routing group (config.moe.group_size images; 1 for a dense model):
routing cost is per group, so the per-image figure does not depend on the batch size.
"""
import jax
import jax.numpy as jnp

from vmoe import train_step
from vmoe import vit


def compiled_flops(compiled) -> float:
  """The 'flops' of a compiled computation's cost analysis (dict, or a list of one dict)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0]
  return float(analysis['flops'])


def _batch_size(config) -> int:
  return config.moe.group_size if config.moe.num_experts > 0 else 1


def _forward(model):
  def forward(params, images):
    return model.apply({'params': params}, images, train=False)[0]
  return forward


def _train(model, config):
  def loss_and_grad(params, images, labels, rng):
    dropout_rng, gating_rng = jax.random.split(rng)

    def loss_fn(p):
      logits, aux = model.apply({'params': p}, images, train=True,
                                rngs={'dropout': dropout_rng, 'gating': gating_rng})
      return train_step.classification_loss(logits, labels, config.loss) + aux['aux_loss']

    return jax.value_and_grad(loss_fn)(params)
  return loss_and_grad


KINDS = ('forward', 'train')


def flops_per_image(config, kind: str = 'forward') -> float:
  """FLOPs per image of the config's model: kind 'forward' (inference) or 'train' (fwd + bwd).

  Nothing is allocated: parameters and inputs are abstract (jax.eval_shape); only compilation runs.
  """
  if kind not in KINDS:
    raise ValueError(f'unknown FLOPs kind {kind!r}; valid: {", ".join(KINDS)}.')
  model = vit.build_model(config)
  batch = _batch_size(config)
  images = jax.ShapeDtypeStruct((batch,) + vit.image_shape(config), jnp.float32)
  rng = jax.random.PRNGKey(0)
  params = jax.eval_shape(lambda r, x: model.init(r, x, train=False)['params'], rng, images)
  if kind == 'forward':
    lowered = jax.jit(_forward(model)).lower(params, images)
  else:
    labels = jax.ShapeDtypeStruct((batch, config.model.num_classes), jnp.float32)
    lowered = jax.jit(_train(model, config)).lower(params, images, labels, rng)
  return compiled_flops(lowered.compile()) / batch
