"""`config.model`: the ViT variants and the model's config, free of JAX (configs/ build
`config.model` from `ModelConfig`; vit.py builds the model from it).

Shapes: P patch size, N tokens per image.
"""
import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Size:
  """Width D, depth (blocks), MLP hidden dim and attention heads of a ViT size."""
  width: int
  depth: int
  mlp_dim: int
  num_heads: int


# ViT sizes (Dosovitskiy et al. 2021, Table 1; Ti from Touvron et al. 2021). The paper uses B/32,
# B/16 and L/16. 'VMoE-S' is V-MoE's own "S" (google-research/vmoe configs/vmoe_paper/common.py
# get_vmoe_config, variant index 0: width 512, 8 blocks, MLP 2048, 8 heads), which its ImageNet-1k
# S/32 config warns is not ViT's 'S' (12 blocks of width 384). Two CPU sizes: 'mu' (after
# big_vision's test size, with depth 2 so that Every-2 places one MoE layer) backs the runlocal
# modes and tests; 'XS' is the embedded Fashion-MNIST study of configs/tiny.py (two MoE layers out
# of four blocks).
SIZES = {
    'mu': Size(width=32, depth=2, mlp_dim=128, num_heads=2),
    'XS': Size(width=64, depth=4, mlp_dim=128, num_heads=4),
    'Ti': Size(width=192, depth=12, mlp_dim=768, num_heads=3),
    'S': Size(width=384, depth=12, mlp_dim=1536, num_heads=6),
    'B': Size(width=768, depth=12, mlp_dim=3072, num_heads=12),
    'L': Size(width=1024, depth=24, mlp_dim=4096, num_heads=16),
    'VMoE-S': Size(width=512, depth=8, mlp_dim=2048, num_heads=8),
}
POOLS = ('tok', 'gap')
# Compute dtypes (config.model.dtype, config.moe.dispatch_dtype). Parameters and the optimizer
# state are float32 whatever the compute dtype (flax's param_dtype default).
DTYPE_NAMES = ('float32', 'bfloat16')
_VARIANT = re.compile(r'^(?P<size>[A-Za-z][A-Za-z-]*)(/(?P<patch>[0-9]+))?$')


def decode_variant(variant: str) -> dict:
  """'B/32' -> {'width': 768, 'depth': 12, 'mlp_dim': 3072, 'num_heads': 12, 'patch_size': 32}.

  The patch size is None when the variant names only a size ('B'); an unknown size fails listing
  the valid ones.
  """
  match = _VARIANT.match(variant or '')
  if match is None or match['size'] not in SIZES:
    raise ValueError(f'unknown ViT variant {variant!r}; use SIZE/PATCH with SIZE one of '
                     f'{", ".join(SIZES)} (e.g. B/32, L/16).')
  patch = match['patch']
  return {**dataclasses.asdict(SIZES[match['size']]),
          'patch_size': int(patch) if patch else None}


def moe_layer_indices(depth: int, every: int, last: int = 0) -> tuple[int, ...]:
  """0-based blocks whose MLP is an MoE layer: Every-`every`, i.e. every-1, 2*every-1, ..., or,
  when last > 0, only the last `last` of those.

  every=2 is V-MoE's "Every-2" (blocks 1, 3, 5, ...), the placement the paper uses; every=2 with
  last=2 is V-MoE's "Last 2" (its get_vmoe_config: range(1, depth, 2)[-2:], blocks 5 and 7 of 8).
  """
  every_k = tuple(range(every - 1, depth, every))
  return every_k[-last:] if last else every_k


def block_name(index: int) -> str:
  """Name of encoder block `index` (0-based), also the key of its router metrics: 'block_01'."""
  return f'block_{index:02d}'


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """`config.model`: a ViT variant ('B/32') at an image size, with its head and pooling.

  patch_size overrides the variant's patch (None: take it from the variant). The defaults are
  V-MoE's (no dropout, no pre-logits layer, class-token pooling); configs/common.py builds
  `config.model` from this class.
  dtype: the compute dtype of the encoder and the experts ('float32' or 'bfloat16');
  parameters, the router, the head's logits, the loss and the few-shot features stay float32.
  remat: recompute each encoder block in the backward pass (vit.REMAT_POLICY) to save memory.
  """
  variant: str
  num_classes: int
  image_size: int
  channels: int
  head_bias_init: float
  patch_size: int | None = None
  dropout_rate: float = 0.0
  representation_size: int | None = None
  pool: str = 'tok'
  dtype: str = 'float32'
  remat: bool = False

  def __post_init__(self):
    if self.dtype not in DTYPE_NAMES:
      raise ValueError(f'unknown model.dtype {self.dtype!r}; valid: {", ".join(DTYPE_NAMES)}.')
    if self.patch is None:   # decode_variant fails first on an unknown variant.
      raise ValueError(f'model.variant={self.variant!r} names no patch size; set '
                       'model.patch_size or use SIZE/PATCH (e.g. B/32).')
    if self.patch < 1 or self.image_size % self.patch:
      raise ValueError(f'patch size {self.patch} does not divide model.image_size='
                       f'{self.image_size}; change model.patch_size (or the variant\'s /PATCH) '
                       'or model.image_size.')
    if self.pool not in POOLS:
      raise ValueError(f'unknown model.pool {self.pool!r}; valid: {", ".join(POOLS)}.')
    if self.num_classes < 1 or self.channels < 1:
      raise ValueError(f'model.num_classes={self.num_classes} and model.channels={self.channels} '
                       'must be >= 1.')
    if not 0 <= self.dropout_rate < 1:
      raise ValueError(f'model.dropout_rate must be in [0, 1), got {self.dropout_rate}.')

  @property
  def size(self) -> Size:
    """Width, depth, MLP dim and heads of the variant."""
    return SIZES[_VARIANT.match(self.variant)['size']]

  @property
  def patch(self) -> int | None:
    """The patch size: model.patch_size, else the variant's."""
    return self.patch_size or decode_variant(self.variant)['patch_size']

  @property
  def image_shape(self) -> tuple[int, int, int]:
    """(H, W, C) of one input image."""
    return (self.image_size, self.image_size, self.channels)

  @property
  def tokens_per_image(self) -> int:
    """Patches of one image, plus the class token when pool = 'tok'."""
    return (self.image_size // self.patch) ** 2 + (self.pool == 'tok')
