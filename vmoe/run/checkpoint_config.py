"""`config.checkpoint`: how often to save and how many to keep, free of JAX (configs/ build it
from `CheckpointConfig`; checkpointing.py saves and restores)."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """`config.checkpoint`: save every `every_steps` (and at the end), keep the last `keep`, in the
  background when `asynchronous` (V-MoE: every 1000 steps, keep 1, asynchronous). keep = 2, not
  V-MoE's 1, so that a corrupt newest checkpoint leaves one to resume from (restore_latest)."""
  every_steps: int
  keep: int = 2
  asynchronous: bool = True

  def __post_init__(self):
    if self.every_steps < 1 or self.keep < 1:
      raise ValueError(f'checkpoint.every_steps={self.every_steps} and checkpoint.keep='
                       f'{self.keep} must be >= 1.')
