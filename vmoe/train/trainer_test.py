"""End-to-end tests of the trainer and main.py on the tiny Fashion-MNIST config.

Each short run (SHORT, at either precision) is trained once per session (per pytest-xdist
worker), in process, by the `short_run` fixture: the float32 run is checked by the summary test,
copied and resumed from a corrupt checkpoint, and is the uninterrupted run that a killed main.py
run must match step for step. Every other run is the test's own.
"""
import functools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from base import errors
from base import revision
from testing import checkpoint_faults
from testing import full_disk
from testing import runs
from vmoe.run import checkpointing
from vmoe.run import observability
from vmoe.run import run_outputs
from vmoe.train import train_step as train_lib
from vmoe.train import trainer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A short run: 16-image batches (one routing group), upstream eval on 64 test images, few-shot
# with one seed. Its router keeps state (lossfree_tc's bias), so that every resume below checks
# that the state is saved and restored with the rest.
SHORT = ['router=lossfree_tc', {'num_train_steps': 40, 'batch_size': 16, 'log_every_steps': 1,
                               'schedule.warmup_steps': 5, 'eval.every_steps': 20,
                               'eval.batch_size': 16, 'data.eval_split': 'test[:64]',
                               'data.train_split': 'train[:4096]',
                               'fewshot.batch_size': 16, 'fewshot.seeds': 1,
                               'checkpoint.every_steps': 10, 'wandb.mode': 'disabled'}]
# Few-shot sets of a main.py run that reaches the end: 200 test images each (digits has 797,
# Fashion-MNIST 10,000), from the config's shot splits or the first 200 Fashion-MNIST images.
SMALL_FEWSHOT = {'fewshot.datasets.digits': "('train', 'test[:200]')",
                 'fewshot.datasets.fashion_mnist': "('train[:200]', 'test[:200]')"}
# The configs' float32 model, bfloat16 compute with rematerialised blocks (issue 18's run), and
# the float32 model on the device path: the host ships uint8 images, label ids and keys, and the
# step flips, scales and one-hots them (data.augment_on = 'device'; the flip draws from each
# example's key as RandAugment does, which 40 steps of 16 images are too few to learn through).
DEVICE_PP = ('decode(channels=1)|flip_lr|value_range(-1, 1)|'
             'onehot(10, key="label", key_result="labels")|keep("image", "labels")')
PRECISIONS = {'float32': {}, 'bfloat16_remat': {'model.dtype': 'bfloat16', 'model.remat': True},
              'device_augment': {'data.augment_on': 'device', 'data.pp_train': DEVICE_PP}}


@pytest.fixture(scope='session')
def short_config(tiny_experiment):
  """short_config(router='lossfree_tc', **overrides): the short run's record, configs/tiny.py with
  SHORT's overrides and few-shot on 200 digits (tiny_experiment is conftest.py's)."""
  def build(router='lossfree_tc', **overrides):
    return tiny_experiment(f'router={router}', {
        **SHORT[1], 'fewshot.datasets': {'digits': ('train', 'test[:200]')}, **overrides})
  return build


class ShortRun(NamedTuple):
  """A finished short run: its workdir (not to be changed: copy it first) and the RunSummary that
  train_and_evaluate returned."""
  workdir: pathlib.Path
  summary: run_outputs.RunSummary


# The tests that read the short runs run on one pytest-xdist worker (make test: --dist
# loadgroup), whose session trains each run once for all of them.
SHARES_SHORT_RUN = pytest.mark.xdist_group('trainer_test_short_run')


@pytest.fixture(scope='session')
def short_run(short_config, tmp_path_factory):
  """short_run(precision) -> ShortRun of short_config(**PRECISIONS[precision]), trained in process
  once per session (per worker: the tests that use it carry SHARES_SHORT_RUN)."""
  @functools.cache
  def run(precision: str) -> ShortRun:
    workdir = tmp_path_factory.mktemp(f'short_run_{precision}') / 'workdir'
    return ShortRun(workdir, runs.train(
        short_config(**PRECISIONS[precision]), str(workdir), 'configs/tiny.py'))
  return run


def flags(overrides: dict) -> list[str]:
  return [f'--config.{k}={v}' for k, v in overrides.items()]


def losses(workdir: str) -> dict:
  return {step: m['loss'] for step, m in observability.read_metrics(workdir).items() if 'loss' in m}


@SHARES_SHORT_RUN
@pytest.mark.parametrize('precision', PRECISIONS)
def test_short_run_learns_and_writes_its_summary(short_config, short_run, precision):
  overrides = PRECISIONS[precision]
  workdir, summary = short_run(precision)
  curve = losses(str(workdir))
  assert sorted(curve) == list(range(1, 41))
  assert np.mean([curve[s] for s in range(31, 41)]) < 0.9 * np.mean([curve[s] for s in range(1, 6)])
  with open(workdir / 'summary.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written == json.loads(json.dumps(summary.to_dict()))
  assert run_outputs.RunSummary.from_dict(written) == summary    # Read through the same record.
  assert summary.steps == 40 and summary.router == 'lossfree_tc'
  assert summary.capacity == 1.0 and summary.arch == 'XS/7'
  # Tables name the router from these, a user's router too (results/summaries.Run.title).
  assert summary.router_title == 'Loss-free balanced Token Choice'
  assert summary.router_allocation == 'token_choice'
  assert summary.config == 'configs/tiny.py'
  assert summary.config_arg == 'router=lossfree_tc,c=1,runlocal=False'
  assert summary.resolved_config == short_config(**overrides).to_dict()
  assert summary.resolved_config['model']['dtype'] == overrides.get('model.dtype', 'float32')
  assert 0.1 < summary.upstream_prec1 <= 1.0
  assert set(summary.fewshot) == {'digits'} and 0.1 < summary.fewshot['digits']['10'] <= 1
  assert summary.num_params > 0 and summary.flops_per_step > 0
  assert summary.train_device_seconds > 0 and summary.device_kind
  assert [h['step'] for h in summary.eval_history] == [20, 40]
  assert summary.segments == [{'first_step': 1, 'last_step': 40, 'mesh': {'data': 1, 'expert': 1},
                               'num_devices': 1, 'device_kind': summary.device_kind}]
  # The router's state moved: after 40 steps each bias is a sum of 40 steps of +-1e-3 or 0, and
  # the checkpoint holds it beside the parameters.
  bias = saved_state(str(workdir), 40)['router_state']['block_01']['moe']['router']['state']['bias']
  assert np.any(bias != 0) and np.all(np.abs(bias) <= 40e-3 + 1e-6)
  # Its source, and its router's training-time health: the means over the 40 logged steps of
  # metrics.jsonl's training rows, per MoE block (the bias range of step s is that before its
  # update). Each step's training row comes first; evaluations at 20 and 40 write the same keys.
  assert summary.commit == revision.source_revision()['commit']
  assert isinstance(summary.uncommitted_changes, bool)
  logged = {}
  with open(workdir / observability.METRICS_FILE, encoding='utf-8') as f:
    for row in map(json.loads, f):
      logged.setdefault(row['step'], row)
  assert set(summary.router_health) == {'block_01', 'block_03'}
  for block, health in summary.router_health.items():
    assert health['logged_steps'] == 40
    for name in ('dropped_tokens', 'unfilled_slots', 'state_bias_range'):
      expected = np.mean([logged[s][f'router/{block}/{name}'] for s in range(1, 41)])
      np.testing.assert_allclose(health[name], expected, rtol=1e-6)


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(short_config, tmp_path,
                                                                           monkeypatch):
  make_step = train_lib.make_train_step

  def poisoned(*args, **kwargs):
    step = make_step(*args, **kwargs)

    def nan_from_step_13(state, batch, rng):
      new_state, metrics = step(state, batch, rng)
      loss = jnp.where(state.step >= 12, jnp.nan, metrics['loss'])
      return new_state, {**metrics, 'loss': loss}
    return nan_from_step_13

  monkeypatch.setattr(train_lib, 'make_train_step', poisoned)
  with pytest.raises(FloatingPointError, match=r'loss is nan at step 13.*last good checkpoint '
                                               r'\(step 10\)'):
    runs.train(short_config(), str(tmp_path))
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['10']
  assert not (tmp_path / 'summary.json').exists()


def test_a_signal_while_compiling_evaluating_or_training_stops_at_the_next_safe_point(
    short_config, tmp_path, monkeypatch, capsys):
  """SIGTERM during the first compile: the run stops before step 1 with nothing to save. During
  an evaluation: it stops before the evaluation's next batch and saves its step; the rerun
  evaluates that step again. Ctrl-C (SIGINT) during step 15 of that rerun: it saves step 15 and
  exits 130. The last rerun ends the run, whose summary lists every evaluation once."""
  config = short_config(**{'num_train_steps': 20, 'eval.every_steps': 10,
                           'checkpoint.every_steps': 20, 'fewshot.every_steps': 20})
  compile_step = trainer.train_program.TrainProgram.compile

  def signalled_while_compiling(program, *args, **kwargs):
    signal.raise_signal(signal.SIGTERM)
    return compile_step(program, *args, **kwargs)

  monkeypatch.setattr(trainer.train_program.TrainProgram, 'compile', signalled_while_compiling)
  with pytest.raises(SystemExit) as stopped:
    runs.train(config, str(tmp_path))
  assert stopped.value.code == run_outputs.PREEMPTED == 0
  assert 'Preempted at step 0: nothing trained yet' in capsys.readouterr().out
  assert not os.listdir(tmp_path / 'checkpoints') and not losses(str(tmp_path))
  monkeypatch.undo()

  make_eval_iterator = trainer.pipeline.make_eval_iterator

  def signalled_after_one_batch(*args, **kwargs):
    for i, batch in enumerate(make_eval_iterator(*args, **kwargs)):
      if i == 1:
        signal.raise_signal(signal.SIGTERM)
      yield batch

  monkeypatch.setattr(trainer.pipeline, 'make_eval_iterator', signalled_after_one_batch)
  with pytest.raises(SystemExit) as stopped:
    runs.train(config, str(tmp_path))
  assert stopped.value.code == 0
  assert 'Preempted at step 10: checkpoint saved' in capsys.readouterr().out
  assert os.listdir(tmp_path / 'checkpoints') == ['10'] and max(losses(str(tmp_path))) == 10
  assert not (tmp_path / 'summary.json').exists()
  monkeypatch.undo()

  log_step = trainer.loop_actions.Actions.log

  def ctrl_c_during_step_15(actions, step, *args, **kwargs):   # Logged every step (SHORT).
    log_step(actions, step, *args, **kwargs)
    if step == 15:
      signal.raise_signal(signal.SIGINT)

  monkeypatch.setattr(trainer.loop_actions.Actions, 'log', ctrl_c_during_step_15)
  with pytest.raises(SystemExit) as interrupted:
    runs.train(config, str(tmp_path))
  assert interrupted.value.code == run_outputs.INTERRUPTED == 130
  assert 'Interrupted at step 15: checkpoint saved' in capsys.readouterr().out
  # keep=2: the interrupt checkpoint is the newer of two, at the last step trained.
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['10', '15']
  assert max(losses(str(tmp_path))) == 15 and not (tmp_path / 'summary.json').exists()
  monkeypatch.undo()

  summary = runs.train(config, str(tmp_path))
  assert [h['step'] for h in summary.eval_history] == [10, 20]
  assert sorted(losses(str(tmp_path))) == list(range(1, 21))


def saved_state(workdir, step: int):
  """The train state checkpoint `step` holds, as a tree of arrays."""
  path = os.path.join(workdir, 'checkpoints', str(step), 'state')
  return ocp.StandardCheckpointer().restore(path)


def saved_params(workdir, step: int):
  """The parameters checkpoint `step` holds."""
  return saved_state(workdir, step)['params']


@SHARES_SHORT_RUN
def test_a_corrupt_newest_checkpoint_resumes_from_the_one_before_to_the_same_end(
    short_config, short_run, tmp_path):
  uninterrupted = short_run('float32').workdir     # Checkpoints 30 and 40 (keep=2).
  workdir = tmp_path / 'workdir'
  shutil.copytree(uninterrupted, workdir)
  checkpoint_faults.flip_bytes(checkpoint_faults.largest_array_file(
      str(workdir / 'checkpoints' / '40')))
  summary = runs.train(short_config(), str(workdir))
  assert summary.steps == 40
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['30', '40', 'corrupt-40']
  # Two segments: the first run's up to its checkpoint 30, this run's from there.
  assert [(s['first_step'], s['last_step']) for s in summary.segments] == [(1, 30), (31, 40)]
  # Steps 31-40 were trained twice (metrics.jsonl has two loss records of each), the second time
  # from step 30's checkpoint, by the same compiled program (the session's compilation cache,
  # conftest.py): bit-identical.
  with open(workdir / observability.METRICS_FILE, encoding='utf-8') as f:
    records = [json.loads(line) for line in f]
  trained = [r['step'] for r in records if 'loss' in r]
  assert sorted(trained) == sorted([*range(1, 41), *range(31, 41)])
  jax.tree.map(np.testing.assert_array_equal, saved_params(str(workdir), 40),
               saved_params(str(uninterrupted), 40))


@SHARES_SHORT_RUN
def test_a_checkpoint_of_another_process_count_is_refused_before_the_step_compiles(
    short_config, short_run, tmp_path, monkeypatch):
  # The short run's checkpoints, as if 2 processes had written them: the data order is per host
  # (data/stream/pipeline.py), so one process cannot go on with it.
  workdir = tmp_path / 'workdir'
  shutil.copytree(short_run('float32').workdir, workdir)
  for step in (30, 40):
    path = workdir / 'checkpoints' / str(step) / 'record' / 'metadata'
    record = json.loads(path.read_text())
    record['data']['process_count'] = 2
    path.write_text(json.dumps(record))
  monkeypatch.setattr(trainer.train_program.TrainProgram, 'compile',
                      lambda *args, **kwargs: pytest.fail('compiled the step'))
  with pytest.raises(errors.UserError, match=(
      r'^The checkpoint of step 40 was written by 2 processes and this run has 1: .* Rerun it on '
      r'2 processes, or use a new --workdir\.$')):
    runs.train(short_config(), str(workdir))


def run_main(workdir, overrides, log=None, main=('main.py',), stderr=None):
  """main.py (or `main`, python's arguments before the flags) on the short tiny config; its output
  goes to a pipe, or to the file `log`, with stderr (or to a pipe of its own: stderr=PIPE). Runs
  share the session's persistent compilation cache (conftest.py) through the environment."""
  command = [sys.executable, *main, f'--config=configs/tiny.py:{SHORT[0]}',
             f'--workdir={workdir}', *flags(overrides)]
  return subprocess.Popen(command, cwd=REPO, stdout=log or subprocess.PIPE,
                          stderr=stderr or subprocess.STDOUT, text=True)


@SHARES_SHORT_RUN
@pytest.mark.parametrize('precision', ['float32', 'device_augment'])
def test_killed_run_resumes_and_matches_an_uninterrupted_run_step_for_step(short_run, tmp_path,
                                                                           precision):
  # The uninterrupted run is the session's short run, trained in process: main.py trains the same
  # program on the same batches (its compiled step from the session's compilation cache,
  # conftest.py), and XLA's results depend neither on the process nor on what else the machine
  # runs. That run is finished, its data sets prepared, before main.py starts. On the device path
  # the resumed run draws each example's augmentation from the key its position gives it.
  uninterrupted = losses(str(short_run(precision).workdir))
  overrides = {**SHORT[1], **SMALL_FEWSHOT, **PRECISIONS[precision]}
  workdir, log = tmp_path / 'workdir', tmp_path / 'killed.log'
  with open(log, 'w', encoding='utf-8') as killed_log:     # A pipe could fill up.
    run = run_main(workdir, overrides, killed_log)
  deadline = time.time() + 300
  # Killed once the first checkpoint is complete (orbax renames it then, some steps after step 10:
  # it saves in the background), with 20-odd steps and step 20's evaluation still to go.
  while not os.path.isdir(workdir / 'checkpoints' / '10'):
    assert run.poll() is None and time.time() < deadline, log.read_text()[-3000:]
    time.sleep(0.01)
  run.send_signal(signal.SIGKILL)
  run.wait()
  killed_at = max(losses(str(workdir)))
  assert run.returncode == -signal.SIGKILL and 10 <= killed_at < 40
  output = run_main(workdir, overrides).communicate()[0]
  assert os.path.exists(workdir / 'summary.json'), output[-3000:]
  resumed = losses(str(workdir))
  assert sorted(resumed) == sorted(uninterrupted) == list(range(1, 41))
  assert resumed == uninterrupted
  # The router's state too (lossfree_tc's bias), restored from checkpoint 10 and updated on.
  jax.tree.map(np.testing.assert_array_equal, saved_state(str(workdir), 40)['router_state'],
               saved_state(str(short_run(precision).workdir), 40)['router_state'])


# main.py with orbax's array writer failing as TensorStore does on a full disk once checkpoint 10
# is complete: the full-disk test's stand-in where it cannot mount a small file system.
SIMULATED_FULL_DISK = textwrap.dedent('''
    import os, runpy, sys
    from orbax.checkpoint._src.serialization import serialization
    from base import errors
    workdir = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--workdir='))
    write = serialization.async_serialize_from_host

    async def full_once_step_10_is_saved(*args, **kwargs):
      if os.path.isdir(os.path.join(workdir, 'checkpoints', '10')):
        raise ValueError(f'RESOURCE_EXHAUSTED: Failed writing: {errors.NO_SPACE}')
      return await write(*args, **kwargs)

    serialization.async_serialize_from_host = full_once_step_10_is_saved
    sys.argv = ['main.py', *sys.argv[1:]]
    runpy.run_path('main.py', run_name='__main__')
''')


def test_a_full_disk_during_a_checkpoint_save_stops_with_one_message_and_exit_2(short_config,
                                                                                tmp_path):
  overrides = {**SHORT[1], 'checkpoint.every_steps': 10, 'eval.every_steps': 40}
  checkpoints = tmp_path / 'checkpoints'
  # A 32 MiB file system for the checkpoints (one takes some 4 MiB), filled once step 10 is saved.
  with full_disk.small_disk(checkpoints, 32 * 2**20) as kind:
    if kind == full_disk.TMPFS:
      run = run_main(tmp_path, overrides, stderr=subprocess.PIPE)
      deadline = time.time() + 300
      while not os.path.isdir(checkpoints / '10'):     # Orbax renames it when complete.
        assert run.poll() is None and time.time() < deadline, run.communicate()
        time.sleep(0.01)
      full_disk.fill(checkpoints)
    else:
      run = run_main(tmp_path, overrides, main=('-c', SIMULATED_FULL_DISK),
                     stderr=subprocess.PIPE)
    stdout, stderr = run.communicate(timeout=600)
    assert run.returncode == 2, stdout[-3000:] + stderr[-3000:]
    assert stderr.startswith(f'Error: No space left on the disk of {checkpoints} while saving a '
                             'checkpoint. The checkpoint of step 10 is intact and a rerun of the '
                             'same command resumes from it: first free at least ')
    assert len(stderr.strip().splitlines()) == 1, stderr         # That message alone.
    program = trainer.train_program.build(short_config())
    state, _ = checkpointing.restore_latest(
        checkpointing.make_manager(str(tmp_path), short_config().checkpoint),
        checkpointing.abstract_with_shardings(program.abstract_state, program.state_shardings))
    assert int(state.step) == 10


def test_a_full_disk_while_writing_the_summary_is_one_user_error_and_loses_nothing(
    tmp_path, monkeypatch):
  disk = tmp_path / 'disk'
  summary = run_outputs.RunSummary(arch='XS/7', dataset='fashion_mnist', router='dense',
                                    capacity=None, steps=40)
  with full_disk.small_disk(disk, 256 * 1024) as kind:
    (disk / 'metrics.jsonl').write_text('{"step": 40, "loss": 0.5}\n')   # Written before.
    if kind == full_disk.TMPFS:
      full_disk.fill(disk)
    else:
      monkeypatch.setattr(trainer.atomic.os, 'fsync',
                          lambda fd: (_ for _ in ()).throw(full_disk.enospc()))
    with pytest.raises(errors.UserError, match=(
        rf'^No space left on the disk of {disk} while writing {disk}/summary.json\. The run is '
        r'finished and its last checkpoint \(step 40\) saved: free some space there and rerun '
        r'the same command')):
      trainer.write_summary(str(disk), summary)
    filler = ['filler'] if kind == full_disk.TMPFS else []
    assert sorted(os.listdir(disk)) == sorted(['metrics.jsonl'] + filler)
    assert losses(str(disk)) == {40: 0.5}


def test_a_run_prints_a_short_report_and_logs_the_rest_in_its_workdir(tmp_path):
  """40 steps with an evaluation, few-shot, two checkpoints and wandb offline (the default, whose
  banners are to be silenced): header, progress, evaluation and summary only, under 40 lines."""
  overrides = {**SHORT[1], 'log_every_steps': 10, 'eval.every_steps': 40,
               'checkpoint.every_steps': 20, 'wandb.mode': 'offline', **SMALL_FEWSHOT}
  run = run_main(tmp_path, overrides)
  output = run.communicate(timeout=300)[0]
  lines = output.splitlines()
  assert run.returncode == 0 and len(lines) < 40, output
  assert lines[0].startswith('configs/tiny.py:router=lossfree_tc,c=1,runlocal=False | XS/7 | '
                             'router lossfree_tc c=1 | ') and ', mesh data=' in lines[0], output
  assert ' parameters | ' in lines[1] and ' FLOPs per step | fresh start | workdir ' in lines[1]
  assert [line.split(' | ')[0] for line in lines if line.startswith('step ')] == [
      'step 10/40', 'step 20/40', 'step 30/40', 'step 40/40']
  evals = [line for line in lines if line.startswith('eval at step ')]
  assert len(evals) == 1 and '10-shot: digits ' in evals[0]
  assert lines[-1].startswith('done: 40 steps | prec@1 ') and ' device-hours ' in lines[-1]
  assert lines[-1].endswith(f'summary: {tmp_path / run_outputs.SUMMARY_FILE}')
  log = (tmp_path / 'log.txt').read_text(encoding='utf-8')
  assert 'checkpoint_manager.py' in log and 'Load dataset info' in log   # orbax's, tfds'.
  assert all(line in log for line in lines)
