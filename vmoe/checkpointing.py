"""Checkpoints with orbax: periodic, asynchronous, keep the last N, resume from the newest one.

A checkpoint holds the train state (parameters, optimizer, step) and a small JSON record of
everything else a resumed run needs to continue exactly: the data iterator position, the training
seconds spent so far and the evaluation history (the RNG keys need no record: each step's key is
derived from config.seed and the step). orbax writes every step into a
temporary directory and renames it when complete, so a killed run never leaves a half checkpoint
that restore would pick up.
"""
import dataclasses
import os

import jax
import orbax.checkpoint as ocp


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """`config.checkpoint`: save every `every_steps` (and at the end), keep the last `keep`, in the
  background when `asynchronous` (V-MoE: every 1000 steps, keep 1, asynchronous)."""
  every_steps: int
  keep: int = 1
  asynchronous: bool = True

  def __post_init__(self):
    if self.every_steps < 1 or self.keep < 1:
      raise ValueError(f'checkpoint.every_steps={self.every_steps} and checkpoint.keep='
                       f'{self.keep} must be >= 1.')


def make_manager(workdir: str, config: CheckpointConfig) -> ocp.CheckpointManager:
  """A manager over WORKDIR/checkpoints keeping the last `config.keep` steps.

  config.asynchronous: save in a background thread while training goes on (on in every config).
  That thread needs the GIL like any other, so anything holding it for long stalls the save too:
  one reason data/pipeline.py keeps tf.data's autotuning off (PARALLEL_CALLS).
  """
  options = ocp.CheckpointManagerOptions(max_to_keep=config.keep, create=True,
                                         enable_async_checkpointing=config.asynchronous)
  return ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), 'checkpoints'),
                               options=options, item_names=('state', 'record'))


def save(manager: ocp.CheckpointManager, step: int, state, record: dict):
  """Starts saving (asynchronously) the state and the JSON record at `step`."""
  manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                             record=ocp.args.JsonSave(record)), force=True)


def restore_latest(manager: ocp.CheckpointManager, abstract_state):
  """Returns (state, record) of the newest complete checkpoint, or None when there is none.

  abstract_state: the state's pytree of jax.ShapeDtypeStruct with shardings, so every array is
  restored directly onto its devices.
  """
  step = manager.latest_step()
  if step is None:
    return None
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state), record=ocp.args.JsonRestore()))
  return restored.state, restored.record


def abstract_with_shardings(abstract_tree, shardings):
  """ShapeDtypeStructs carrying the target shardings, for restore."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract_tree, shardings)
