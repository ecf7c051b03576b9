"""The numbers the paper and V-MoE published, as data: appendix Tables 1-6 of Liu et al., "Routers
in Vision Mixture of Experts" (TMLR 2024), and the ImageNet-1k rung's published cell.

Below everything that reads them (configs/ build the paper's cells from ARCHS and CAPACITIES,
results/ sets runs beside them), so it imports nothing of the project. Routers are the registry's
names (vmoe/routing/declarations.py takes its PAPER_ROUTERS from ROUTERS here).

Units as printed: precision@1 and 10-shot accuracy in percent, training cost in TPUv3-days.
Rows are in the tables' order (routers as in `ROUTERS`, the c = 1 block then the c = 2 block);
the paper's '-' (L/16 sparsity-constrained c = 1, and L/16 Soft MoE c = 2, unstable in training)
is None. For token choice routers the capacity c is k, the number of experts per token.
"""
import dataclasses

ARCHS = ('B/32', 'B/16', 'L/16')
CAPACITIES = (1, 2)
# The paper's six routers in its row order.
ROUTERS = ('softmax_tc', 'sinkhorn_tc', 'softmax_ec', 'sinkhorn_ec', 'sparsity_ec', 'soft_moe')

# Tables 1-3 (JFT-300M): (precision@1 %, training TPUv3-days), one pair per router.
_JFT = {
    'B/32': {1: [(41.23, 34.31), (41.63, 34.73), (43.83, 33.73),
                 (43.65, 34.40), (43.43, 56.88), (45.23, 36.95)],
             2: [(43.47, 41.46), (44.26, 41.88), (44.40, 40.60),
                 (44.30, 41.21), (44.30, 65.13), (45.28, 43.59)]},
    'B/16': {1: [(46.35, 122.12), (47.37, 123.04), (48.64, 118.31),
                 (48.64, 119.80), (48.67, 231.66), (50.00, 116.31)],
             2: [(48.86, 153.96), (49.80, 157.93), (50.23, 153.42),
                 (50.52, 155.03), (50.29, 279.89), (50.53, 148.47)]},
    'L/16': {1: [(56.07, 818.80), (56.19, 827.70), (57.51, 805.60),
                 (57.84, 818.95), (None, None), (58.51, 790.57)],
             2: [(58.05, 1023.92), (57.69, 1033.43), (58.43, 1014.71),
                 (58.88, 1028.06), (58.26, 1537.41), (None, None)]},
}
# Tables 4-6 (ImageNet-1k 10-shot accuracy %), one value per router.
_IMAGENET_10SHOT = {
    'B/32': {1: [62.77, 63.42, 64.99, 65.34, 64.50, 67.37],
             2: [65.91, 65.87, 66.38, 66.52, 65.75, 67.85]},
    'B/16': {1: [69.62, 70.04, 71.74, 71.95, 71.28, 72.84],
             2: [72.12, 72.26, 72.68, 72.74, 72.76, 73.26]},
    'L/16': {1: [77.42, 77.18, 77.91, 78.08, None, 78.72],
             2: [78.00, 78.10, 78.38, 78.19, 78.24, None]},
}
# Where each architecture's numbers are printed.
SOURCES = {'B/32': ('Table 1', 'Table 4'), 'B/16': ('Table 2', 'Table 5'),
           'L/16': ('Table 3', 'Table 6')}


@dataclasses.dataclass(frozen=True)
class PaperCell:
  """One (arch, router, capacity) cell of the paper; None where the paper prints '-'."""
  jft_prec1: float | None          # JFT-300M precision@1, percent.
  tpuv3_days: float | None         # Pre-training cost, TPUv3-days.
  imagenet_10shot: float | None    # ImageNet-1k 10-shot accuracy, percent.


def _build() -> dict:
  cells = {}
  for arch in ARCHS:
    for c in CAPACITIES:
      for i, router in enumerate(ROUTERS):
        prec1, days = _JFT[arch][c][i]
        cells[arch, router, c] = PaperCell(prec1, days, _IMAGENET_10SHOT[arch][c][i])
  return cells


PAPER = _build()    # {(arch, router, capacity): PaperCell}


# The ImageNet-1k rung's published cell (configs/ilsvrc_s32_vmoe.py): V-MoE S/32, Softmax Token
# Choice at k = 2 and c = 1.05 (summary.json's capacity), precision@1 in percent, mean of 3 seeds
# (google-research/vmoe vmoe_s32_last2_ilsvrc2012_randaug_light1.py), keyed as the run's metrics
# ('upstream' and its eval.sets), each on the split named in RUNG_SPLITS.
RUNG_ARCH = 'VMoE-S/32'
RUNG_CELL = ('softmax_tc', 1.05)
RUNG_SPLITS = {'upstream': 'imagenet2012 train[99%:]', 'test': 'imagenet2012 validation',
               'imagenet_real': 'ReaL (imagenet2012_real validation)',
               'imagenet_v2': 'imagenet_v2 test'}


@dataclasses.dataclass(frozen=True)
class RungCell:
  """V-MoE's published ImageNet-1k numbers: precision@1 (%) by metric name (RUNG_SPLITS)."""
  prec1: dict


RUNG_PUBLISHED = RungCell({'upstream': 76.8, 'test': 73.1, 'imagenet_real': 74.4,
                           'imagenet_v2': 59.2})


def lookup(arch: str, router: str, capacity) -> PaperCell | RungCell | None:
  """The paper's cell (V-MoE's published cell for the ImageNet-1k rung), or None when there is
  no such run (another arch, router, capacity or the softmax-combine ablation, which the paper
  only plots)."""
  if arch == RUNG_ARCH:
    return RUNG_PUBLISHED if (router, capacity) == RUNG_CELL else None
  if capacity not in CAPACITIES:
    return None
  return PAPER.get((arch, router, int(capacity)))
