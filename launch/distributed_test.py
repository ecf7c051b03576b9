"""Multi-process training on this machine: launch/local.sh starts main.py twice, joined by
jax.distributed (CPU collectives through gloo); the launch scripts parse and pass the command on."""
import glob
import json
import os
import re
import signal
import socket
import subprocess
import time

from vmoe.run import observability

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Two processes of one CPU device each; mesh.expert=2 splits the 8 experts over the two processes,
# so the tokens' all-to-all crosses processes. The mu/7 model (one MoE layer), routing groups of 4
# images, 8 images per process; a loss logged every step (which keeps the host in step with the
# devices); a checkpoint at the end (and at a stop); evaluation once, at the end, with one
# few-shot set (digits, 200 images; the summary check reads it).
# 120 steps: enough for a preemption notice sent after step 2 to reach both processes (JAX's
# notifier polls for SIGTERM once a second) before the end on a fast machine; a notice that came
# during the final evaluation would still pass (the stop saves step 120 and the rerun evaluates).
NUM_STEPS = 120
OVERRIDES = {
    'model.variant': 'mu/7', 'moe.group_size': 4, 'batch_size': 16, 'num_train_steps': NUM_STEPS,
    'schedule.warmup_steps': 1, 'log_every_steps': 1, 'mesh.expert': 2,
    'checkpoint.every_steps': NUM_STEPS,
    'data.train_split': 'train[:512]', 'data.eval_split': 'test[:64]', 'data.shuffle_buffer': 512,
    'eval.every_steps': NUM_STEPS, 'eval.batch_size': 16,
    'fewshot.every_steps': NUM_STEPS, 'fewshot.batch_size': 16, 'fewshot.seeds': 1,
    'fewshot.datasets': "{'digits': ('train[:200]', 'test[:200]')}", 'wandb.mode': 'disabled',
}
# The processes inherit the session's fast-compile XLA flags and its persistent compilation cache
# (conftest.py): the stopped run goes first and fills the cache, and the uninterrupted run and the
# rerun load its compiled step from there.


def main_py(workdir) -> list[str]:
  return ['main.py', '--config=configs/tiny.py:router=sinkhorn_ec', f'--workdir={workdir}',
          *[f'--config.{k}={v}' for k, v in OVERRIDES.items()]]


def environment(**variables) -> dict:
  return {**os.environ, 'JAX_PLATFORMS': 'cpu', **variables}


def launch_two_processes(workdir, log) -> subprocess.Popen:
  """launch/local.sh running main.py in two processes, its output to the file `log`."""
  return subprocess.Popen(['launch/local.sh', *main_py(workdir)], cwd=REPO, stdout=log,
                          stderr=subprocess.STDOUT, env=environment(NUM_PROCESSES='2'))


def start_each_process(workdir, logs) -> list[subprocess.Popen]:
  """The two processes local.sh would start, started here so that one can be signalled alone."""
  with socket.socket() as s:
    s.bind(('', 0))
    port = s.getsockname()[1]
  return [subprocess.Popen(
      [os.path.join(REPO, '.venv', 'bin', 'python'), *main_py(workdir)], cwd=REPO, stdout=log,
      stderr=subprocess.STDOUT, env=environment(
          JAX_COORDINATOR_ADDRESS=f'localhost:{port}', JAX_NUM_PROCESSES='2',
          JAX_PROCESS_ID=str(i))) for i, log in enumerate(logs)]


def losses(workdir) -> dict:
  return {s: m['loss'] for s, m in observability.read_metrics(str(workdir)).items() if 'loss' in m}


def final_checksums(workdir) -> dict:
  """The state checksums the last checkpoint's record holds (vmoe/run/checkpointing.py)."""
  with open(os.path.join(workdir, 'checkpoints', str(NUM_STEPS), 'record', 'metadata'),
            encoding='utf-8') as f:
    return json.load(f)['state_checksums']


def test_sigterm_to_one_process_stops_both_at_one_step_and_the_rerun_ends_as_an_uninterrupted_run(
    tmp_path):
  whole, stopped = tmp_path / 'whole', tmp_path / 'stopped'
  logs = {name: tmp_path / f'{name}.log' for name in ('stopped.0', 'stopped.1', 'whole', 'rerun')}
  # Files, not pipes, which could fill up.
  with open(logs['stopped.0'], 'w', encoding='utf-8') as log_0, \
       open(logs['stopped.1'], 'w', encoding='utf-8') as log_1:
    processes = start_each_process(stopped, [log_0, log_1])
  deadline = time.time() + 600
  while f'step 2/{NUM_STEPS} ' not in logs['stopped.0'].read_text():   # Training is under way.
    assert all(p.poll() is None for p in processes) and time.time() < deadline, \
        logs['stopped.0'].read_text()[-3000:] + logs['stopped.1'].read_text()[-3000:]
    time.sleep(0.05)
  processes[1].send_signal(signal.SIGTERM)             # A preemption notice to process 1 only.
  outputs = []
  for process, log in zip(processes, (logs['stopped.0'], logs['stopped.1'])):
    process.wait(timeout=600)
    outputs.append(log.read_text())
    assert process.returncode == 0, outputs[-1][-4000:]
  steps = {int(m[1]) for out in outputs
           for m in re.finditer(r'^Preempted at step (\d+): checkpoint saved', out, re.M)}
  assert len(steps) == 1, outputs       # One line each, the same step.
  step = steps.pop()
  saved = sorted(int(d) for d in os.listdir(stopped / 'checkpoints') if d.isdigit())
  assert 2 <= step <= NUM_STEPS and saved[-1] == step and max(losses(stopped)) == step
  assert not os.path.exists(stopped / 'summary.json')

  # The rerun resumes from that step on both processes and ends where the uninterrupted run did.
  # That run goes on beside the rerun: XLA's results do not depend on what else the machine runs.
  with open(logs['whole'], 'w', encoding='utf-8') as whole_log, \
       open(logs['rerun'], 'w', encoding='utf-8') as rerun_log:
    uninterrupted_run = launch_two_processes(whole, whole_log)
    rerun = launch_two_processes(stopped, rerun_log)
  assert rerun.wait(timeout=600) == 0, logs['rerun'].read_text()[-4000:]
  output = logs['rerun'].read_text()
  # Each process's header (vmoe/run/console.py) says where it resumed; INFO logs are in log[.1].txt.
  assert output.count(f'resumed from step {step}') == 2
  assert '[0] done: ' in output and '[1] done: ' in output
  assert os.path.exists(stopped / 'log.txt') and os.path.exists(stopped / 'log.1.txt')
  assert uninterrupted_run.wait(timeout=600) == 0, logs['whole'].read_text()[-4000:]
  with open(whole / 'summary.json', encoding='utf-8') as f:
    summary = json.load(f)
  assert summary['num_devices'] == 2 and summary['steps'] == NUM_STEPS
  assert 0 <= summary['upstream_prec1'] <= 1 and 'digits' in summary['fewshot']
  assert sorted(losses(whole)) == list(range(1, NUM_STEPS + 1))
  assert losses(stopped) == losses(whole)
  assert final_checksums(stopped) == final_checksums(whole)
  with open(stopped / 'summary.json', encoding='utf-8') as f:
    assert json.load(f)['eval_history'] == summary['eval_history']


def test_launch_scripts_parse():
  scripts = sorted(glob.glob(os.path.join(REPO, 'launch', '*.sh')))
  assert {os.path.basename(s) for s in scripts} >= {'local.sh', 'slurm.sh', 'tpu_pod.sh'}
  for script in scripts:
    subprocess.run(['bash', '-n', script], check=True)
    assert os.access(script, os.X_OK), f'{script} is not executable'


def fake_tool(tmp_path, name: str) -> dict:
  """An environment whose PATH has a `name` that prints its arguments, one per line."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir(exist_ok=True)
  (bin_dir / name).write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
  (bin_dir / name).chmod(0o755)
  return {**os.environ, 'PATH': f'{bin_dir}:{os.environ["PATH"]}'}


def test_tpu_pod_runs_the_same_command_on_every_worker(tmp_path):
  env = {**fake_tool(tmp_path, 'gcloud'), 'TPU': 'v3-32-a', 'ZONE': 'europe-west4-a'}
  run = subprocess.run(['launch/tpu_pod.sh', '-m', 'launch.sweep', '--arch', 'b32',
                        '--workdir-root', '/mnt/shared dir'], cwd=REPO, env=env,
                       capture_output=True, text=True, check=True)
  assert run.stdout.splitlines() == [
      'compute', 'tpus', 'tpu-vm', 'ssh', 'v3-32-a', '--zone=europe-west4-a', '--worker=all',
      r'--command=cd vmoe-routers && .venv/bin/python -m launch.sweep --arch b32 --workdir-root '
      r'/mnt/shared\ dir ']


def test_slurm_starts_one_task_per_gpu_with_the_command(tmp_path):
  env = {**fake_tool(tmp_path, 'srun'), 'SLURM_SUBMIT_DIR': REPO}
  # sbatch runs a copy of the script from its spool directory: only SLURM_SUBMIT_DIR finds the repo.
  run = subprocess.run(['bash', os.path.join(REPO, 'launch', 'slurm.sh'), 'main.py',
                        '--config=configs/b32_softmax_ec.py',
                        '--workdir=/shared/b32'], cwd=tmp_path, env=env, capture_output=True,
                       text=True, check=True)
  assert run.stdout.splitlines() == ['--kill-on-bad-exit=1', '--label', '.venv/bin/python',
                                     'main.py', '--config=configs/b32_softmax_ec.py',
                                     '--workdir=/shared/b32']
