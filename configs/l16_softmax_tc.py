"""L/16 V-MoE, E=32, Every-2: Softmax Token Choice router (k = 1 or 2).

The paper's cells (Table 3: JFT-300M prec@1, training TPUv3-days; Table 6: ImageNet 10-shot):
  k=1: JFT prec@1 56.07%, 818.80 TPUv3-days; ImageNet 10-shot 77.42%.
  k=2: JFT prec@1 58.05%, 1023.92 TPUv3-days; ImageNet 10-shot 78.00%.
Pretraining here follows V-MoE's ImageNet-21k recipe instead of the private JFT-300M (see
configs/common.py), so upstream accuracy is not comparable; the 10-shot numbers and the ranking of
routers are the targets. The TPUv3-days above are the paper's, for JFT.

  python main.py --config=configs/l16_softmax_tc.py --workdir=runs/l16_softmax_tc_k1
  python main.py --config=configs/l16_softmax_tc.py:c=2 --workdir=runs/l16_softmax_tc_k2
CPU mode (a 'mu' model, 2 steps):
  python main.py --config=configs/l16_softmax_tc.py:runlocal=True --workdir=/tmp/l16_softmax_tc
"""
from configs import common


def get_config(arg=None):
  """arg: c=1 (default) or c=2 (c is k, experts per token); runlocal=True for CPU."""
  return common.get_paper_config('L/16', 'softmax_tc', arg)
