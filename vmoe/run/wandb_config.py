"""`config.wandb`: where a run's metrics go in wandb, free of JAX (configs/ build it from
`WandbConfig`; observability.py logs)."""
import dataclasses

WANDB_MODES = ('offline', 'online', 'disabled')


@dataclasses.dataclass(frozen=True)
class WandbConfig:
  """`config.wandb`: offline by default (no network); 'online' syncs, 'disabled' skips wandb."""
  project: str
  mode: str = 'offline'

  def __post_init__(self):
    if self.mode not in WANDB_MODES:
      raise ValueError(f'unknown wandb.mode {self.mode!r}; valid: {", ".join(WANDB_MODES)}.')
