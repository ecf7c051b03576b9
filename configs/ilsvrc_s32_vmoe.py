"""V-MoE S/32 on ImageNet-1k, the published cell: 'ViT-S/32, E=8, K=2, Last 2, 300 Epochs'.

google-research/vmoe configs/vmoe_paper/vmoe_s32_last2_ilsvrc2012_randaug_light1.py, mean of 3
seeds (its docstring), each number on its split:
  train[99%:] (V-MoE's "validation")          76.8%
  ILSVRC2012 validation (V-MoE's "test")      73.1%
  ReaL (imagenet2012_real validation)         74.4%
  ImageNet-V2 (imagenet_v2 test)              59.2%
Pre-training took 5 h 50 min on a TPUv3-32; docs/accelerators.md estimates 8 H100s.

The rung's recipe (configs/ilsvrc_s32.py) with V-MoE's own router: Softmax Token Choice with
k = 2 experts per token at capacity factor 1.05, C computed on 2T/E and rounded up to a multiple
of 4 (T = 400 tokens, E = 8: C = 108), evaluated at capacity factor 4.0 (C = 400), router noise
1/E and importance and load losses of 0.005 each (the router's presets). docs/fidelity.md, "The
ImageNet-1k rung", traces every value; results/ tables the runs beside the numbers above.

  python main.py --config=configs/ilsvrc_s32_vmoe.py --workdir=runs/ilsvrc_s32/vmoe
  for seed in 1 2: ... --config.seed=$seed (V-MoE's get_hyper sweeps seeds 0, 1, 2)
Without ImageNet the run stops (status 2) with the steps to prepare it (docs/data.md).
CPU mode (a 'mu' model on embedded data, 2 steps):
  python main.py --config=configs/ilsvrc_s32_vmoe.py:runlocal=True --workdir=/tmp/ilsvrc_s32_vmoe
"""
from configs import common
from configs import ilsvrc_s32

ROUTER = 'softmax_tc'      # V-MoE's NoisyTopExpertsPerItemRouter, batch priority off.
K, CAPACITY_FACTOR, EVAL_CAPACITY_FACTOR = 2, 1.05, 4.0


def get_config(arg=None):
  """arg: runlocal=True for CPU."""
  arg = common.parse_arg(arg, runlocal=False)
  config = ilsvrc_s32.rung_config(ROUTER, float(K), arg.runlocal)
  config.config_arg = arg.canonical
  config.moe.router.capacity_factor = CAPACITY_FACTOR
  config.moe.router.num_selected_experts = K
  config.moe.router.eval_capacity_factor = EVAL_CAPACITY_FACTOR
  config.moe.router.capacity_rounding = 'ceil_multiple_of_4'    # V-MoE compute_capacity.
  return config
