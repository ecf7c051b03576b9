"""`config.moe`: where the MoE layers go, their experts, routing groups and router, free of JAX
(configs/ build `config.moe` from `MoeConfig`; moe.py and vit.py build the layers from it)."""
import dataclasses

from vmoe.routing import declarations
from vmoe.routing import router_config

DISPATCH_DTYPE_NAMES = ('float32', 'bfloat16')   # moe.DISPATCH_DTYPES, by name.
EXPERT_INITS = ('shared', 'independent')          # moe.Experts says what each means.
DISPATCHES = ('indices', 'einsum')


def images_per_routing_group(router: router_config.RouterConfig, group_size: int) -> int:
  """Images routed together: group_size, or 1 for Soft MoE (every image alone)."""
  soft = declarations.get(router.name).allocation == declarations.SOFT_ALLOCATION
  return 1 if soft else group_size


@dataclasses.dataclass(frozen=True)
class MoeConfig:
  """`config.moe`: which blocks are MoE layers, their experts, routing groups and router.

  num_experts = 0 makes a dense model (router None; `config.moe.router` is then ignored).
  every: Every-`every` placement (the paper's Every-2); last: when > 0, only the last `last` of
  those blocks (V-MoE's "Last 2" with every = 2; vit_config.moe_layer_indices; 0: all of them, the
  paper's); group_size: images per routing group (Soft MoE routes each image alone); dispatch:
  'indices' (gather/scatter) or 'einsum' (the dense reference path); dispatch_dtype: the dtype of
  the dispatch and combine buffers under a float32 model (moe.buffer_dtype; the paper configs'
  'bfloat16' is V-MoE's); expert_init: see moe.Experts; dropout_rate: the experts' dropout (V-MoE's
  moe.dropout_rate, 0.2 in its ImageNet-1k S/32 config), None: the model's dropout_rate, as every
  block's MLP (`expert_dropout`).
  The router's capacity factor is any c > 0, or any integer k <= E for token choice (the paper
  configs restrict their argument c to the paper's grid: configs/common.py, which builds
  `config.moe` from this class). The checks that involve the model (placement, an expert choice
  capacity within a routing group's tokens) are vmoe/train/experiment.py `parse`'s.
  """
  num_experts: int
  group_size: int
  router: router_config.RouterConfig | None
  every: int = 2
  dispatch: str = 'indices'
  expert_init: str = 'shared'
  dispatch_dtype: str = 'float32'
  last: int = 0
  dropout_rate: float | None = None

  def __post_init__(self):
    if self.dispatch_dtype not in DISPATCH_DTYPE_NAMES:
      raise ValueError(f'unknown moe.dispatch_dtype {self.dispatch_dtype!r}; valid: '
                       f'{", ".join(DISPATCH_DTYPE_NAMES)}.')
    if self.num_experts < 0:
      raise ValueError(f'moe.num_experts must be >= 0 (0: a dense model), got {self.num_experts}.')
    if self.dispatch not in DISPATCHES:
      raise ValueError(f'unknown moe.dispatch {self.dispatch!r}; valid: {", ".join(DISPATCHES)}.')
    if self.expert_init not in EXPERT_INITS:
      raise ValueError(f'unknown moe.expert_init {self.expert_init!r}; valid: '
                       f'{", ".join(EXPERT_INITS)}.')
    if self.last < 0:
      raise ValueError(f'moe.last must be >= 0 (0: every Every-k block), got {self.last}.')
    if self.dropout_rate is not None and not 0 <= self.dropout_rate < 1:
      raise ValueError(f'moe.dropout_rate must be in [0, 1) or None, got {self.dropout_rate}.')
    if self.num_experts == 0:
      return
    if self.router is None:
      raise ValueError('an MoE model (moe.num_experts > 0) needs moe.router.')
    if self.every < 1:
      raise ValueError(f'moe.every must be >= 1 (2 is the paper\'s Every-2), got {self.every}.')
    if self.group_size < 1:
      raise ValueError(f'moe.group_size must be >= 1 image, got {self.group_size}.')

  @property
  def images_per_group(self) -> int:
    """Images routed together (`images_per_routing_group`)."""
    return images_per_routing_group(self.router, self.group_size)

  def expert_dropout(self, model_dropout_rate: float) -> float:
    """The experts' dropout rate: moe.dropout_rate, or the model's where it is None."""
    return model_dropout_rate if self.dropout_rate is None else self.dropout_rate
