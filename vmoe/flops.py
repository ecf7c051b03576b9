"""FLOPs of a compiled computation, from XLA's cost analysis (the trainer's header, launch/plan.py,
bench/).

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
"""


def compiled_flops(compiled) -> float:
  """The 'flops' of a compiled computation's cost analysis (dict, or a list of one dict)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0]
  return float(analysis['flops'])
