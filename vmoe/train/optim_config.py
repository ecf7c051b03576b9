"""`config.optimizer` and `config.schedule`, free of JAX (configs/ build them from these classes;
optim.py builds the optax chain and schedule from them)."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """`config.optimizer`: Adam (b1, b2) with decoupled weight decay on kernels, after clipping the
  global gradient norm at grad_clip_norm (V-MoE's recipe; configs/common.py builds it)."""
  weight_decay: float
  b1: float = 0.9
  b2: float = 0.999
  grad_clip_norm: float = 1.0

  def __post_init__(self):
    if not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
      raise ValueError(f'optimizer.b1={self.b1} and optimizer.b2={self.b2} must be in [0, 1).')
    if self.weight_decay < 0 or self.grad_clip_norm <= 0:
      raise ValueError(f'optimizer.weight_decay={self.weight_decay} must be >= 0 and '
                       f'optimizer.grad_clip_norm={self.grad_clip_norm} > 0.')


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
  """`config.schedule`: linear warm-up to peak_lr over warmup_steps, linear decay to end_lr."""
  peak_lr: float
  warmup_steps: int
  end_lr: float = 1e-5

  def __post_init__(self):
    if self.peak_lr <= 0 or self.end_lr < 0 or self.warmup_steps < 0:
      raise ValueError(f'schedule: need peak_lr > 0, end_lr >= 0 and warmup_steps >= 0; got '
                       f'{self.peak_lr}, {self.end_lr}, {self.warmup_steps}.')
