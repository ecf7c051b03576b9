"""B/32 V-MoE, E=32, Every-2: Sinkhorn Token Choice router (k = 1 or 2).

The paper's cells (Table 1: JFT-300M prec@1, training TPUv3-days; Table 4: ImageNet 10-shot):
  k=1: JFT prec@1 41.63%, 34.73 TPUv3-days; ImageNet 10-shot 63.42%.
  k=2: JFT prec@1 44.26%, 41.88 TPUv3-days; ImageNet 10-shot 65.87%.
Pretraining here follows V-MoE's ImageNet-21k recipe instead of the private JFT-300M (see
configs/common.py), so upstream accuracy is not comparable; the 10-shot numbers and the ranking of
routers are the targets. The TPUv3-days above are the paper's, for JFT.

  python main.py --config=configs/b32_sinkhorn_tc.py --workdir=runs/b32_sinkhorn_tc_k1
  python main.py --config=configs/b32_sinkhorn_tc.py:c=2 --workdir=runs/b32_sinkhorn_tc_k2
CPU mode (a 'mu' model, 2 steps):
  python main.py --config=configs/b32_sinkhorn_tc.py:runlocal=True --workdir=/tmp/b32_sinkhorn_tc
"""
from configs import common


def get_config(arg=None):
  """arg: c=1 (default) or c=2 (c is k, experts per token); runlocal=True for CPU."""
  return common.get_paper_config('B/32', 'sinkhorn_tc', arg)
