"""Checkpoints with orbax: periodic, asynchronous, keep the last N, resume from the newest one.

A checkpoint holds the train state (parameters, optimizer, step) and a small JSON record of
everything else a resumed run needs to continue exactly: the data iterator position, the base RNG
key, the device-seconds spent so far and the evaluation history. orbax writes every step into a
temporary directory and renames it when complete, so a killed run never leaves a half checkpoint
that restore would pick up.
"""
import os

import jax
import orbax.checkpoint as ocp


def make_manager(workdir: str, keep: int, asynchronous: bool = True) -> ocp.CheckpointManager:
  """A manager over WORKDIR/checkpoints keeping the last `keep` steps.

  asynchronous: save in a background thread while training goes on (config.checkpoint
  .asynchronous, on in every config). A stalled async save seen once on this CPU matches a
  tf.data stall found later: an iterator's destructor holding the GIL for tens of seconds
  (data/pipeline.py PARALLEL_CALLS), which freezes the save's thread with every other one.
  """
  if keep < 1:
    raise ValueError(f'checkpoint.keep must be >= 1, got {keep}.')
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                         enable_async_checkpointing=asynchronous)
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
