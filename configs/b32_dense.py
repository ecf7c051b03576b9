"""B/32 ViT without MoE layers: the dense baseline of the B/32 V-MoE configs.

The same model, recipe and data as configs/b32_*.py, with a dense MLP in every block
(moe.num_experts = 0). The paper reports no dense row; V-MoE's premise is that its MoE models
beat this one at about the same cost per step, and the sweep runs it beside the routers
(launch/sweep.py) so that every table and figure can set the routers against it.

  python main.py --config=configs/b32_dense.py --workdir=runs/b32_dense
CPU mode (a 'mu' model, 2 steps):
  python main.py --config=configs/b32_dense.py:runlocal=True --workdir=/tmp/b32_dense
"""
from configs import common
from vmoe.routing import declarations


def get_config(arg=None):
  """arg: runlocal=True for CPU (c is accepted and ignored: a dense model routes nothing)."""
  return common.get_paper_config('B/32', declarations.DENSE, arg)
