"""L/16 ViT without MoE layers: the dense baseline of the L/16 V-MoE configs.

The same model, recipe and data as configs/l16_*.py, with a dense MLP in every block
(moe.num_experts = 0). The paper reports no dense row; V-MoE's premise is that its MoE models
beat this one at about the same cost per step, and the sweep runs it beside the routers
(launch/sweep.py) so that every table and figure can set the routers against it.

  python main.py --config=configs/l16_dense.py --workdir=runs/l16_dense
CPU mode (a 'mu' model, 2 steps):
  python main.py --config=configs/l16_dense.py:runlocal=True --workdir=/tmp/l16_dense
"""
from configs import common
from vmoe.routing import declarations


def get_config(arg=None):
  """arg: runlocal=True for CPU (c is accepted and ignored: a dense model routes nothing)."""
  return common.get_paper_config('L/16', declarations.DENSE, arg)
