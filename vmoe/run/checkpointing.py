"""Checkpoints with orbax: periodic, asynchronous, keep the last N, resume from the newest one.

A checkpoint holds the train state (parameters, optimizer, step) and a small JSON record of
everything else a resumed run needs to continue exactly: the data iterator position, the training
seconds spent so far and the evaluation history (the RNG keys need no record: each step's key is
derived from config.seed and the step). orbax writes every step into a
temporary directory (STEP.orbax-checkpoint-tmp) and renames it when complete, so a killed run never
leaves a half checkpoint that restore would pick up; orbax removes that directory when it saves
the same step again.

A complete checkpoint can still be damaged later (a disk, a copy). The record also holds checksums
of the state (vmoe/run/state_checksum.py) and restore_latest reads the newest checkpoint in full and
checks them: one that fails is moved aside to checkpoints/corrupt-STEP, never deleted, and the
run resumes from the one before (hence keep = 2 by default).

A checkpoint whose tree of arrays differs from the state the run expects is not corrupt: the
code or the config changed. Before reading one, its stored tree (orbax's metadata) is compared
with the target's. Leaves it lacks under a state field named in FIELDS_ADDED (a field the train
state gained after checkpoints existed) take the run's freshly initialised values, and the
checksums cover the leaves it holds; any other difference is a UserError naming the missing,
extra and reshaped leaves, and the checkpoint stays where it is.

A full disk during a save (`save`, or `wait_until_finished` for a save in the background) is a
UserError naming the directory, the intact checkpoint a rerun resumes from, and how much to free;
the save's unfinished temporary directory is never taken for a checkpoint, as above.
"""
import contextlib
import gc
import logging as std_logging
import os
import sys
import types

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import utils as ocp_utils

from base import errors
from vmoe.run import checkpoint_config
from vmoe.run import state_checksum

CHECKSUMS = 'state_checksums'   # The record's key for the state's checksums.
# The prefix of a checkpoint set aside: orbax lists only directories named by a bare step
# number, so it neither restores nor garbage-collects (max_to_keep) these.
CORRUPT_PREFIX = 'corrupt-'
ITEMS = ('state', 'record')     # What each checkpoint holds: the train state, a JSON record.
# Train state fields added after checkpoints already existed: a checkpoint without them restores,
# with these fields at their initial values. A field is listed here when it is added, with a test
# that the committed fixtures (vmoe/train/checkpoint_fixtures_test.py) restore with it.
FIELDS_ADDED: tuple[str, ...] = ('router_state',)   # The routers' state (router lab).
SHOWN_LEAVES = 3                # Leaves a tree mismatch names, per kind of difference.


def make_manager(workdir: str,
                 config: checkpoint_config.CheckpointConfig) -> ocp.CheckpointManager:
  """A manager over WORKDIR/checkpoints keeping the last `config.keep` steps.

  config.asynchronous: save in a background thread while training goes on (on in every config).
  That thread needs the GIL like any other, so anything holding it for long stalls the save too:
  one reason the input pipeline keeps tf.data's autotuning off (data/stream/reader.py
  parallel_calls).
  """
  options = ocp.CheckpointManagerOptions(max_to_keep=config.keep, create=True,
                                         enable_async_checkpointing=config.asynchronous)
  # A failed save's other reports of its error go to the log file, or nowhere: the error is
  # raised to `save` or `wait_until_finished`, which report it once.
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _FullDiskReportsToLogFile) for f in handler.filters):
    handler.addFilter(_FullDiskReportsToLogFile())
  if not getattr(sys.unraisablehook, 'drops_orphaned_io_reports', False):
    sys.unraisablehook = _without_orphaned_io_reports(sys.unraisablehook)
  return ocp.CheckpointManager(checkpoints_dir(workdir), options=options, item_names=ITEMS)


def checkpoints_dir(workdir: str) -> str:
  """WORKDIR/checkpoints as an absolute path: orbax refuses a relative one."""
  return os.path.join(os.path.abspath(workdir), 'checkpoints')


def save(manager: ocp.CheckpointManager, step: int, state, record: dict):
  """Starts saving (asynchronously) the state and the JSON record at `step`; the saved record
  also holds the state's checksums (computed here, on device, before the save starts). Raises a
  UserError if the disk is full, now or in the previous save (which orbax waits for first)."""
  record = {**record, CHECKSUMS: state_checksum.checksums(state)}
  with _disk_full_is_user_error(manager):
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                               record=ocp.args.JsonSave(record)), force=True)


def wait_until_finished(manager: ocp.CheckpointManager):
  """Waits for the save in the background; a UserError if the disk filled up during it."""
  with _disk_full_is_user_error(manager):
    manager.wait_until_finished()


class _FullDiskReportsToLogFile(std_logging.Filter):
  """orbax reports a full disk at ERROR, with a traceback, from each thread of a save (some ten
  reports), and asyncio once more for each of its futures that held the error; orbax then raises
  it to `save` or `wait_until_finished`, whose UserError says it once. The other reports are kept
  for the log file at INFO, below the console's threshold (vmoe/run/run_log.py)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno > std_logging.INFO and (
        (record.exc_info and errors.is_disk_full(record.exc_info[1]))
        or ('/orbax/' in record.pathname and errors.NO_SPACE in record.getMessage())):
      record.levelno, record.levelname = std_logging.INFO, 'INFO'
    return True


@contextlib.contextmanager
def _disk_full_is_user_error(manager: ocp.CheckpointManager):
  directory = str(manager.directory)
  try:
    with errors.disk_full_is_user_error(directory, 'saving a checkpoint',
                                        lambda: _what_to_free(directory)):
      yield
  except errors.UserError:
    gc.collect()   # The save's futures report the error when collected: now, to the log file.
    raise


def _what_to_free(directory: str) -> str:
  """What is intact in a full checkpoint directory, and how much to free to save again."""
  names = os.listdir(directory)
  complete = sorted(int(name) for name in names if name.isdigit())
  partial = sorted(name for name in names if ocp_utils.TMP_DIR_SUFFIX in name)
  unfinished = f'; the unfinished {", ".join(partial)} can go too' if partial else ''
  if not complete:
    return f'No checkpoint was complete yet: free space there{unfinished}, and rerun.'
  size = _directory_bytes(os.path.join(directory, str(complete[-1])))
  return (f'The checkpoint of step {complete[-1]} is intact and a rerun of the same command '
          f'resumes from it: first free at least {size / 2**20:.1f} MiB there (the size of one '
          f'checkpoint{unfinished}).')


def _directory_bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(root, name))
             for root, _, files in os.walk(path) for name in files)


def restore_latest(manager: ocp.CheckpointManager, abstract_state, fresh_state=None):
  """Returns (state, record) of the newest checkpoint that reads back intact, or None when there
  is none.

  abstract_state: the state's pytree of jax.ShapeDtypeStruct with shardings, so every array is
  restored directly onto its devices. fresh_state: () -> a freshly initialised state, called only
  when a checkpoint lacks leaves under FIELDS_ADDED (their values come from it). Checkpoints are
  tried newest first; one that fails to read or to match its checksums is named in a warning,
  moved aside (`_set_aside`) and the one before is tried. Raises errors.UserError when
  checkpoints were found but none reads back, or when one holds another tree (module docstring).
  """
  set_aside = []
  while (step := manager.latest_step()) is not None:
    restored, problem = _read_verified(manager, step, abstract_state, fresh_state)
    # Every process must take the same branch: they restore and rename collectively.
    if not _on_any_process(problem is not None):
      return restored
    set_aside.append(_set_aside(manager, step, problem or 'unreadable on another process'))
  if set_aside:
    directory = str(manager.directory)
    raise errors.UserError(
        f'No readable checkpoint in {directory}: {", ".join(set_aside)} could not be read back '
        f'(moved aside, not deleted). To train from step 0 in this workdir, delete {directory} '
        '(move the corrupt-* directories elsewhere first to keep them); or use a new --workdir.')
  return None


def read_latest(workdir: str, abstract_state, fresh_state=None):
  """(step, state, record) of the newest checkpoint in WORKDIR/checkpoints that reads back
  intact, or None when none does: for tools that read a finished run (launch/routing_maps.py).

  It reads as restore_latest does (in full, checksums checked, fresh_state as there) but writes
  nothing: a checkpoint that fails is named in a warning and left where it is (a run resumed in
  that workdir sets it aside), and the one before is tried. One process: no collective agreement.
  """
  # Not orbax's read_only mode, which warns on every use; this manager only lists and restores.
  manager = ocp.CheckpointManager(checkpoints_dir(workdir), item_names=ITEMS,
                                  options=ocp.CheckpointManagerOptions(create=False))
  for step in sorted(manager.all_steps(), reverse=True):
    restored, problem = _read_verified(manager, step, abstract_state, fresh_state)
    if problem is None:
      return (step, *restored)
    logging.warning('Checkpoint %s/%d is corrupt (%s); left in place, reading the one before.',
                    manager.directory, step, problem)
  return None


def read_run_state(workdir: str, program):
  """(step, state) of the newest intact checkpoint of the run in WORKDIR, read into `program`'s
  (vmoe/train/train_program.py) state and shardings as `read_latest` reads (fresh values stand in
  only for FIELDS_ADDED); a UserError when none reads back intact."""
  restored = read_latest(
      workdir, abstract_with_shardings(program.abstract_state, program.state_shardings),
      fresh_state=lambda: program.init_state(jax.random.PRNGKey(0)))
  if restored is None:
    raise errors.UserError(f'No checkpoint in {workdir} reads back intact; rerun its training.')
  step, state, _ = restored
  return step, state


def _read_verified(manager: ocp.CheckpointManager, step: int, abstract_state, fresh_state):
  """((state, record), None) of checkpoint `step` read in full with matching checksums, else
  (None, what went wrong); a UserError if it holds another tree (`_leaves_to_fill`)."""
  state_dir = epath.Path(manager.directory) / str(step) / ITEMS[0]
  # The state through a handler of its own, whose partial_restore takes the leaves a checkpoint
  # lacks from the target; the manager keeps its StandardSave for 'state'.
  with _quiet_orphaned_reads(), contextlib.closing(
      ocp.Checkpointer(ocp.PyTreeCheckpointHandler())) as reader:
    try:
      stored = reader.handler.metadata(state_dir).tree
    except Exception as error:  # pylint: disable=broad-exception-caught
      return None, _first_line(error)
    fill = _leaves_to_fill(stored, abstract_state, f'{manager.directory}/{step}')
    target = abstract_state
    if fill:
      if fresh_state is None:
        raise ValueError(f'checkpoint {step} lacks {", ".join(sorted(fill))}: pass fresh_state.')
      target = jax.tree_util.tree_map_with_path(
          lambda path, a, f: f if _leaf_name(path) in fill else a, abstract_state, fresh_state())
    try:
      state = reader.restore(state_dir, args=ocp.args.PyTreeRestore(
          target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
          # Every difference but leaves under FIELDS_ADDED failed above; a partial restore also
          # takes a field added without leaves (a run whose routers keep no state).
          partial_restore=True))
      state = jax.block_until_ready(state)    # Every array read, not just scheduled.
      record = dict(manager.restore(step, args=ocp.args.Composite(
          record=ocp.args.JsonRestore())).record)
    # orbax and TensorStore raise ValueError, OSError and bare Exception for missing, truncated
    # or undecodable files alike; any failure to read means this checkpoint cannot be resumed.
    except Exception as error:  # pylint: disable=broad-exception-caught
      return None, _first_line(error)
  expected = record.pop(CHECKSUMS, None)   # None: a checkpoint saved before checksums existed.
  if expected is not None:
    differ = state_checksum.mismatches(expected, state, skip=_checksum_keys(state, fill))
    if differ:
      return None, f'checksums differ from the saved ones in {", ".join(differ[:5])}'
  return (state, record), None


def _first_line(error: Exception) -> str:
  """The error's type and the start of its first line (TensorStore's run to pages)."""
  first_line = str(error).splitlines()[0].split(' See full TensorStore details')[0]
  return f'{type(error).__name__}: {first_line[:200]}'


def _leaf_name(path) -> str:
  """A leaf's path as orbax names it on disk, '/'-joined: 'opt_state/1/0/mu/head/kernel'."""
  return '/'.join(str(getattr(k, 'name', getattr(k, 'key', getattr(k, 'idx', k))))
                  for k in path)


def _leaf_shapes(tree) -> dict:
  """{leaf name: (shape, dtype)} of a tree of arrays, ShapeDtypeStructs or orbax metadata."""
  return {_leaf_name(path): (tuple(leaf.shape), np.dtype(leaf.dtype))
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def _leaves_to_fill(stored, abstract_state, where: str) -> set[str]:
  """The target's leaves that the stored tree lacks under FIELDS_ADDED; any other difference
  (a leaf missing elsewhere, an extra leaf, another shape or dtype) is a UserError."""
  saved, wanted = _leaf_shapes(stored), _leaf_shapes(abstract_state)
  missing = sorted(set(wanted) - set(saved))
  fill = {name for name in missing if name.split('/')[0] in FIELDS_ADDED}
  differences = {
      'missing from it': [name for name in missing if name not in fill],
      'not in this run\'s state': sorted(set(saved) - set(wanted)),
      'of another shape or dtype': sorted(name for name in set(saved) & set(wanted)
                                          if saved[name] != wanted[name]),
  }
  said = [f'{len(names)} {"leaf" if len(names) == 1 else "leaves"} {kind} '
          f'({", ".join(names[:SHOWN_LEAVES])}'
          f'{", ..." if len(names) > SHOWN_LEAVES else ""})'
          for kind, names in differences.items() if names]
  if said:
    raise errors.UserError(
        f'Checkpoint {where} holds another state than this run\'s: {"; ".join(said)}. It was '
        'written by another config or code version: resume it with those, or use a new '
        '--workdir (the checkpoint is left in place).')
  return fill


def _checksum_keys(state, names: set[str]) -> set[str]:
  """The state_checksum keys of the leaves called `names` (_leaf_name)."""
  return {jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(state)
          if _leaf_name(path) in names}


@contextlib.contextmanager
def _quiet_orphaned_reads():
  """Drops Python's 'Exception ignored in: <coroutine ...>' reports of orbax's reads.

  When one array fails to read, orbax 0.12.8 closes the other reads still pending, and each
  closed read raises again (serialization.py turns its GeneratorExit into an Exception), which
  Python reports with a TensorStore spec of some 60 lines apiece. The failure that counts is the
  one restore raised; other unraisable exceptions pass to the previous hook.
  """
  previous = sys.unraisablehook
  sys.unraisablehook = _without_orphaned_io_reports(previous)
  try:
    yield
  finally:
    gc.collect()      # The closed reads are reported when collected: here, under the hook.
    sys.unraisablehook = previous


def _without_orphaned_io_reports(hook):
  """sys.unraisablehook `hook` less the reports of orbax I/O left running after another part of
  the same read or write failed: a closed read's coroutine (above), or TensorStore's completion
  callback into the event loop orbax closed when a write failed ('Event loop is closed')."""
  def without(unraisable):
    source, error = unraisable.object, unraisable.exc_value
    orphaned_read = (isinstance(source, types.CoroutineType)
                     and '/orbax/' in source.cr_code.co_filename)
    orphaned_write = (source is None and isinstance(error, RuntimeError)
                      and str(error) == 'Event loop is closed')
    if not (orphaned_read or orphaned_write):
      hook(unraisable)
  without.drops_orphaned_io_reports = True
  return without


def _on_any_process(flag: bool) -> bool:
  """Whether `flag` holds on any process (True everywhere if so)."""
  return bool(np.any(multihost_utils.process_allgather(np.array(flag))))


def _set_aside(manager: ocp.CheckpointManager, step: int, problem: str) -> str:
  """Moves checkpoint `step` to CORRUPT_PREFIX + step (+ .N if taken), warns, returns the name."""
  directory = str(manager.directory)
  name, n = f'{CORRUPT_PREFIX}{step}', 1
  while os.path.exists(os.path.join(directory, name)):
    n += 1
    name = f'{CORRUPT_PREFIX}{step}.{n}'
  multihost_utils.sync_global_devices(f'checkpoint {step} named')   # Before any process renames.
  if jax.process_index() == 0:
    os.rename(os.path.join(directory, str(step)), os.path.join(directory, name))
  multihost_utils.sync_global_devices(f'checkpoint {step} set aside')
  manager.reload()
  logging.warning('Checkpoint %s/%d is corrupt (%s); moved it to %s and trying the one before.',
                  directory, step, problem, name)
  return name


def abstract_with_shardings(abstract_tree, shardings):
  """ShapeDtypeStructs carrying the target shardings, for restore."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract_tree, shardings)
