"""Committed checkpoints of an earlier state layout restore with today's code.

vmoe/train/testdata/checkpoint_v1 is a workdir's config.json and checkpoints/ after a 2-step run of
configs/tiny.py shrunk to the 'mu' size with 2 experts and no warm-up (36,394 parameters; 530 kB
on disk), written by the trainer's own save path (main.py, FIXTURE_ARGS). It was made with

  .venv/bin/python -m vmoe.checkpoint_fixtures_test vmoe/train/testdata/checkpoint_v1

which runs main.py in a temporary workdir and copies those two files out. A fixture is never
regenerated: when the train state's layout changes, the new layout gets a new fixture beside the
old ones (checkpoint_v2, ...), and every committed one must keep restoring.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import jax
import numpy as np

from vmoe.run import checkpointing
from vmoe.run import run_outputs
from vmoe.run import state_checksum
from vmoe.train import experiment as experiment_lib
from vmoe.train import loop_actions
from vmoe.train import train_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, 'vmoe', 'train', 'testdata')
FIXTURE_ARGS = ('--config=configs/tiny.py:router=softmax_tc,runlocal=True',
                '--config.model.variant=mu/7', '--config.moe.num_experts=2',
                # The head starts at zero: with no warm-up the first step moves it, so the second
                # step's gradient, hence the Adam moments, reach every parameter.
                '--config.schedule.warmup_steps=0')
RECORD_DIR = 'record'   # The checkpoint's JSON record (checkpointing.ITEMS).


def copy_fixture(name: str, destination: str) -> str:
  """A writable copy of fixture `name` under `destination` (restore may set a checkpoint
  aside): returns the copy's workdir."""
  workdir = os.path.join(destination, name)
  shutil.copytree(os.path.join(FIXTURES, name), workdir)
  return workdir


def restore_fixture(workdir: str, router: str | None = None):
  """(experiment, state, record) of a fixture workdir, read as a resumed run reads it: its
  recorded config parsed (with another router of the same parameters, if given), the state
  restored into that experiment's layout on one device, new fields from a fresh init."""
  with open(os.path.join(workdir, run_outputs.CONFIG_FILE), encoding='utf-8') as f:
    recorded = json.load(f)
  if router is not None:
    recorded['moe']['router']['name'] = router
  experiment = experiment_lib.parse(recorded, num_devices=1)
  program = train_program.build(experiment)
  manager = checkpointing.make_manager(workdir, experiment.checkpoint)
  restored = checkpointing.restore_latest(
      manager, checkpointing.abstract_with_shardings(program.abstract_state,
                                                     program.state_shardings),
      fresh_state=lambda: program.init_state(jax.random.PRNGKey(0)))
  assert restored is not None
  return (experiment, *restored)


def saved_checksums(workdir: str, step: int) -> dict:
  """The state checksums a checkpoint's record holds, read from its JSON file directly."""
  checkpoint = os.path.join(checkpointing.checkpoints_dir(workdir), str(step))
  with open(os.path.join(checkpoint, RECORD_DIR, 'metadata'), encoding='utf-8') as f:
    return json.load(f)[checkpointing.CHECKSUMS]


def test_checkpoint_v1_restores_intact(tmp_path):
  workdir = copy_fixture('checkpoint_v1', str(tmp_path))
  experiment, state, record = restore_fixture(workdir)
  assert int(state.step) == 2
  assert os.listdir(checkpointing.checkpoints_dir(workdir)) == ['2']    # Nothing set aside.
  num_params = sum(x.size for x in jax.tree.leaves(state.params))
  assert num_params == 36_394
  # Every leaf is covered by a saved checksum, and each matches what was read back.
  expected = saved_checksums(workdir, 2)
  assert len(expected) == len(jax.tree.leaves(state))
  assert state_checksum.checksums(state) == expected
  # Every Adam moment is non-zero (FIXTURE_ARGS' warm-up), so each checksum tests real values.
  assert all(np.any(np.asarray(m) != 0) for m in jax.tree.leaves(state.opt_state))
  # Saved before its step's evaluation (vmoe/train/trainer.py), after the iterator read 2 batches.
  assert record['eval_history'] == [] and record['data'] is not None
  assert experiment.num_train_steps == 2
  # Its record predates the segments: the trainer reads it with none (summary.json then lists
  # the segments trained since).
  assert loop_actions.RunRecord(**record).segments == []


def test_checkpoint_v1_restores_with_the_router_state_at_its_initial_value(tmp_path):
  # checkpoint_v1 predates TrainState.router_state. Read into a router with state and the same
  # parameters (lossfree_tc's gating kernel is softmax_tc's), its bias comes from the fresh
  # init (zeros), and every leaf the checkpoint holds is its own, checksums checked.
  assert 'router_state' in checkpointing.FIELDS_ADDED
  workdir = copy_fixture('checkpoint_v1', str(tmp_path))
  _, state, _ = restore_fixture(workdir, router='lossfree_tc')
  _, plain, _ = restore_fixture(copy_fixture('checkpoint_v1', str(tmp_path / 'again')))
  assert os.listdir(checkpointing.checkpoints_dir(workdir)) == ['2']    # Nothing set aside.
  biases = jax.tree.leaves(state.router_state)
  assert len(biases) == 1 and biases[0].shape == (2,) and not np.any(biases[0])
  assert plain.router_state == {}
  jax.tree.map(np.testing.assert_array_equal, state.params, plain.params)
  jax.tree.map(np.testing.assert_array_equal, state.opt_state, plain.opt_state)


def write_fixture(destination: str) -> None:
  """Runs main.py with FIXTURE_ARGS in a temporary workdir; copies its config.json and
  checkpoints/ to `destination`, which must not exist."""
  with tempfile.TemporaryDirectory() as scratch:
    run = os.path.join(scratch, 'run')
    subprocess.run([sys.executable, 'main.py', *FIXTURE_ARGS, f'--workdir={run}'], cwd=REPO,
                   check=True)
    os.makedirs(destination)
    shutil.copy(os.path.join(run, run_outputs.CONFIG_FILE), destination)
    shutil.copytree(checkpointing.checkpoints_dir(run),
                    checkpointing.checkpoints_dir(destination))


if __name__ == '__main__':
  write_fixture(sys.argv[1])
