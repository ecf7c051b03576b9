"""FLOPs of a compiled computation, from XLA's cost analysis (the trainer's header, launch/plan.py,
bench/).

What is counted: the 'flops' entry of XLA's cost analysis (a dict in jax 0.10.2; older versions
returned a one-element list), of a compiled program (`compiled_flops`: one device's, after XLA's
optimisations) or of a lowered one (`lowered_flops`: the whole program, before them; what the
trainer and bench/step report, since XLA:GPU's compiled count misses cuBLAS's matmuls). XLA
counts 2 FLOPs per multiply-add of dots and convolutions and 1 per elementwise arithmetic op
(adds, the LayerNorm and softmax arithmetic, comparisons); transcendentals (exp, tanh, erf) are
tallied separately by XLA and are not included; gathers, scatters, sorts and
collectives count as (nearly) zero, and the body of a loop (lax.fori_loop / while) is counted once,
not once per iteration (checked: ten 64x64 matmuls in a fori_loop count as one). So the sparse
routers' dispatch/combine by index costs ~0 here, Soft MoE's dispatch/combine einsums are counted,
and the Sinkhorn iterations and the sparsity-constrained solver's L-BFGS steps count one
iteration each. Both are tiny next to the matmuls (20 Sinkhorn iterations on a 400 x 32 group of
B/32 are ~2e6 FLOPs per group, 0.02% of the forward), but sorting is not arithmetic: the
sparsity-constrained router's extra cost shows in wall-clock time, not here.
"""


def compiled_flops(compiled) -> float:
  """The 'flops' of a compiled computation's cost analysis (dict, or a list of one dict): one
  device's program after XLA's optimisations. Right on XLA:CPU and XLA:TPU; not on XLA:GPU, whose
  count leaves out the matmuls it hands to cuBLAS (`lowered_flops` serves there)."""
  return _flops(compiled.cost_analysis())


def lowered_flops(lowered) -> float:
  """The 'flops' of a lowered computation's cost analysis: the whole program over all devices,
  before the backend's passes, so the same count on every platform.

  Measured: B/32's dense training step at 512 images counts 26.7 GFLOPs an image lowered and
  compiled on XLA:CPU (within 0.5% of each other on configs/tiny.py), but 0.43 GFLOPs compiled on
  an H200 (jax 0.11.2), where cuBLAS runs the matmuls outside XLA's count."""
  return _flops(lowered.cost_analysis())


def _flops(analysis) -> float:
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0]
  return float(analysis['flops'])
