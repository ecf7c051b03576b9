"""XLA:CPU settings that compile fast and run slower: for tests and for the memory plan.

Without LLVM optimisation and the fusion emitters XLA:CPU compiles small functions several times
faster while the compiled code runs slower, and it assigns the same buffers (the same
memory_analysis), so memory plans made under these settings hold. Timings (bench/) must not use
them.

XLA:CPU also splits a module's generated code into pieces that threads compile in parallel; here it
compiles in one piece, which saves the split's own CPU where the cores are busy anyway (two pytest
workers on two cores). Results can differ in their last bits from those of other flags, as with
the settings above: compare runs made under the same flags.
"""

# As compiler options of jax's `Lowered.compile(options)`.
OPTIONS = {'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True,
           'xla_cpu_use_fusion_emitters': False,
           'xla_cpu_parallel_codegen_split_count': 1}


def as_xla_flags() -> str:
  """OPTIONS as XLA_FLAGS text ('--name=value ...'), for a process that has not started jax."""
  return ' '.join(f'--{name}={str(value).lower()}' for name, value in OPTIONS.items())
