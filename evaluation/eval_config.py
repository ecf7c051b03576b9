"""`config.eval`: the upstream evaluation's schedule, batches and held-out sets, free of JAX
(configs/ build `config.eval` from `EvalConfig`; classify.py evaluates)."""
import dataclasses
from typing import Mapping

UPSTREAM = 'upstream'   # The metrics' prefix for data.eval_split.


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """`config.eval`: upstream evaluation on data.eval_split every `every_steps` steps and at the
  end, in batches of `batch_size` images (V-MoE: every 1000 steps, batch 4096).

  sets: more held-out sets evaluated with it, name -> (data.name of the source, split, pp
  string), each reported as 'NAME/prec@1' and 'NAME/loss' (V-MoE's ImageNet-1k 'test',
  'imagenet_v2', 'imagenet_real'); read from the data section's directories, and skipped with a
  warning where not prepared (vmoe/train/train_evals.py). None by default.
  """
  every_steps: int
  batch_size: int
  sets: Mapping[str, tuple[str, str, str]] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.every_steps < 1 or self.batch_size < 1:
      raise ValueError(f'eval.every_steps={self.every_steps} and eval.batch_size='
                       f'{self.batch_size} must be >= 1.')
    sets = {name: tuple(entry) for name, entry in dict(self.sets).items()}
    bad = [name for name, entry in sets.items() if len(entry) != 3 or name == UPSTREAM]
    if bad:
      raise ValueError(f'eval.sets must map each name but {UPSTREAM!r} to (source, split, pp '
                       f'string); check {", ".join(bad)}.')
    object.__setattr__(self, 'sets', sets)
