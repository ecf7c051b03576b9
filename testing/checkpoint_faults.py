"""Damage done to a saved checkpoint, as disks, copies and kill -9 do it, for the recovery tests
(vmoe/run/checkpointing_test.py, vmoe/train/trainer_test.py)."""
import glob
import os
import shutil

from orbax.checkpoint import utils as ocp_utils


def largest_array_file(step_dir: str) -> str:
  """The biggest TensorStore data file of the checkpoint's state (the largest array's chunk)."""
  files = glob.glob(os.path.join(step_dir, 'state', '**', 'd', '*'), recursive=True)
  return max(files, key=os.path.getsize)


def flip_bytes(path: str, count: int = 16):
  """Inverts `count` bytes in the middle of the file, keeping its size."""
  with open(path, 'r+b') as f:
    f.seek(os.path.getsize(path) // 2)
    data = f.read(count)
    f.seek(-len(data), os.SEEK_CUR)
    f.write(bytes(b ^ 0xFF for b in data))


def truncate(path: str):
  """Cuts the file to half its size."""
  os.truncate(path, os.path.getsize(path) // 2)


def leave_half_written(step_dir: str, final: bool):
  """Turns a complete checkpoint into what a save killed midway leaves: its largest array file
  missing and no commit marker, under orbax's temporary name (final=False: what orbax itself
  leaves) or under the step's own name (final=True: a non-atomic copy or file system)."""
  os.remove(largest_array_file(step_dir))
  os.remove(os.path.join(step_dir, 'commit_success.txt'))    # Written by orbax just before rename.
  if not final:
    shutil.move(step_dir, step_dir + ocp_utils.TMP_DIR_SUFFIX)
