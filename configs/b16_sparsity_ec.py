"""B/16 V-MoE, E=32, Every-2: Sparsity-constrained Expert Choice router (c = 1 or 2).

The paper's cells (Table 2: JFT-300M prec@1, training TPUv3-days; Table 5: ImageNet 10-shot):
  c=1: JFT prec@1 48.67%, 231.66 TPUv3-days; ImageNet 10-shot 71.28%.
  c=2: JFT prec@1 50.29%, 279.89 TPUv3-days; ImageNet 10-shot 72.76%.
Pretraining here follows V-MoE's ImageNet-21k recipe instead of the private JFT-300M (see
configs/common.py), so upstream accuracy is not comparable; the 10-shot numbers and the ranking of
routers are the targets. The TPUv3-days above are the paper's, for JFT.

  python main.py --config=configs/b16_sparsity_ec.py --workdir=runs/b16_sparsity_ec_c1
  python main.py --config=configs/b16_sparsity_ec.py:c=2 --workdir=runs/b16_sparsity_ec_c2
CPU mode (a 'mu' model, 2 steps):
  python main.py --config=configs/b16_sparsity_ec.py:runlocal=True --workdir=/tmp/b16_sparsity_ec
"""
from configs import common


def get_config(arg=None):
  """arg: c=1 (default) or c=2; runlocal=True for CPU."""
  return common.get_paper_config('B/16', 'sparsity_ec', arg)
