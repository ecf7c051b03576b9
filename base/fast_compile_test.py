"""The fast-compile settings in both spellings XLA reads."""
from base import fast_compile


def test_as_xla_flags_spells_every_option():
  assert fast_compile.as_xla_flags() == ('--xla_backend_optimization_level=0 '
                                         '--xla_llvm_disable_expensive_passes=true '
                                         '--xla_cpu_use_fusion_emitters=false '
                                         '--xla_cpu_parallel_codegen_split_count=1')
