"""A run checkpointed on 8 devices resumes on 4 and ends as the uninterrupted 8-device run does.

Two main.py processes on simulated CPU devices (XLA reads --xla_force_host_platform_device_count
only when jax starts, and the trainer builds its mesh over all of a process's devices, so each
device count is a process of its own; main.py is also the user's path, the workdir's claim
included): the 8-device run trains NUM_STEPS steps and saves checkpoints at STOP and NUM_STEPS.
Its checkpoint at STOP is what a run stopped there leaves (the same program saved it from the
same state), so the resumed workdir holds it and the recorded config.json alone; main.py on 4
devices resumes there and trains the rest. The mesh is data=2 x expert=4 on 8 devices and
data=1 x expert=4 on 4: the experts keep their split and the images' split halves.

The model is multidevice_test's: configs/tiny.py shrunk to mu/7 with routing groups of 2 images
and batches of 16, one group per device on 8 devices and two on 4, so the groups, and with them
the routing, are the same on both. The 4-device program sums in another order (partial sums over
4 devices, not 8), so the two runs agree to float32 rounding, not bit for bit.
"""
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from vmoe.run import checkpointing
from vmoe.run import observability
from vmoe.run import run_outputs
from vmoe.train import experiment as experiment_lib
from vmoe.train import multidevice_test
from vmoe.train import train_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_STEPS, STOP = 20, 10
OVERRIDES = {
    'model.variant': 'mu/7', 'moe.group_size': 2, 'mesh.expert': 4, 'num_train_steps': NUM_STEPS,
    'batch_size': 16, 'schedule.warmup_steps': 0, 'log_every_steps': 1,
    'checkpoint.every_steps': STOP, 'data.train_split': 'train[:512]',
    'data.eval_split': 'test[:64]', 'data.shuffle_buffer': 512, 'eval.every_steps': NUM_STEPS,
    'eval.batch_size': 16, 'fewshot.datasets': '{}', 'wandb.mode': 'disabled',
}
# Each remaining step's sums (the weight gradients' over the batch's 16 x 17 tokens are the
# longest) differ between the two programs by at most multidevice_test's REDUCTION_RTOL, and
# what a step leaves in the state carries on into the steps after it: over the NUM_STEPS - STOP
# steps the differences add up to at most that many REDUCTION_RTOLs (3.2e-4), provided no step
# amplifies them, which a small learning rate over ten steps does not.
RESUME_RTOL = (NUM_STEPS - STOP) * multidevice_test.REDUCTION_RTOL
# A gradient that is rounding on both sides (the attention keys' bias: softmax ignores a shift
# shared by all keys) moves its parameter by Adam's up-to-lr steps in either direction, and the
# loss does not depend on it: those leaves, and their Adam moments, are not compared.
ROUNDING_ONLY = "['key']['bias']"


def main_py(workdir, num_devices: int) -> subprocess.CompletedProcess:
  """main.py on `num_devices` simulated CPU devices, the same command line for both runs."""
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': (
      f'{os.environ.get("XLA_FLAGS", "")} --xla_force_host_platform_device_count={num_devices}')}
  command = [sys.executable, 'main.py', '--config=configs/tiny.py:router=sinkhorn_ec',
             f'--workdir={workdir}', *[f'--config.{k}={v}' for k, v in OVERRIDES.items()]]
  return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                        check=False)


@pytest.fixture(scope='module')
def runs(tmp_path_factory) -> dict:
  """{'whole': the uninterrupted 8-device workdir, 'resumed': its step-STOP checkpoint resumed
  on 4 devices}, trained once for the module's tests."""
  root = tmp_path_factory.mktemp('device_count_resume')
  whole, resumed = root / 'whole', root / 'resumed'
  check(main_py(whole, 8))
  shutil.copytree(whole / 'checkpoints' / str(STOP), resumed / 'checkpoints' / str(STOP))
  shutil.copy(whole / run_outputs.CONFIG_FILE, resumed)
  check(main_py(resumed, 4))
  return {'whole': whole, 'resumed': resumed}


def check(run: subprocess.CompletedProcess) -> None:
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


SHARES_RUNS = pytest.mark.xdist_group('device_count_resume')


def losses(workdir) -> dict:
  return {s: m['loss'] for s, m in observability.read_metrics(str(workdir)).items() if 'loss' in m}


def summary(workdir) -> dict:
  with open(workdir / run_outputs.SUMMARY_FILE, encoding='utf-8') as f:
    return json.load(f)


def final_state(workdir) -> dict:
  """{leaf path: float64 array} of the state of the workdir's last checkpoint, read as a resumed
  run reads it (checksums checked) onto this process's one device."""
  with open(workdir / run_outputs.CONFIG_FILE, encoding='utf-8') as f:
    recorded = json.load(f)
  program = train_program.build(experiment_lib.parse(
      {**recorded, 'mesh': {'data': 1, 'expert': 1}}, num_devices=1))
  step, state, _ = checkpointing.read_latest(str(workdir), checkpointing.abstract_with_shardings(
      program.abstract_state, program.state_shardings))
  assert step == NUM_STEPS
  return multidevice_test.leaves(jax.device_get(state))


@SHARES_RUNS
def test_the_resumed_run_trains_on_4_devices_and_records_both_segments(runs):
  assert sorted(losses(runs['whole'])) == list(range(1, NUM_STEPS + 1))
  assert sorted(losses(runs['resumed'])) == list(range(STOP + 1, NUM_STEPS + 1))
  cpu = {'device_kind': 'cpu'}
  assert summary(runs['whole'])['segments'] == [
      {'first_step': 1, 'last_step': NUM_STEPS, 'mesh': {'data': 2, 'expert': 4},
       'num_devices': 8, **cpu}]
  assert summary(runs['resumed'])['segments'] == [
      {'first_step': 1, 'last_step': STOP, 'mesh': {'data': 2, 'expert': 4}, 'num_devices': 8,
       **cpu},
      {'first_step': STOP + 1, 'last_step': NUM_STEPS, 'mesh': {'data': 1, 'expert': 4},
       'num_devices': 4, **cpu}]


@SHARES_RUNS
def test_the_remaining_losses_equal_the_uninterrupted_runs(runs):
  whole, resumed = losses(runs['whole']), losses(runs['resumed'])
  steps = range(STOP + 1, NUM_STEPS + 1)
  np.testing.assert_allclose([resumed[s] for s in steps], [whole[s] for s in steps],
                             rtol=RESUME_RTOL)


@SHARES_RUNS
def test_the_final_state_equals_the_uninterrupted_runs_leaf_by_leaf(runs):
  whole, resumed = final_state(runs['whole']), final_state(runs['resumed'])
  assert sorted(whole) == sorted(resumed)
  for path in whole:
    if ROUNDING_ONLY not in path:
      # Each leaf to RESUME_RTOL of its largest entry.
      scale = np.max(np.abs(whole[path]))
      assert np.max(np.abs(resumed[path] - whole[path])) <= RESUME_RTOL * scale, path
