"""Multi-process training on this machine: launch/local.sh starts main.py twice, joined by
jax.distributed (CPU collectives through gloo); the launch scripts parse and pass the command on."""
import glob
import json
import os
import shutil
import subprocess

from vmoe import observability

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Two processes of one CPU device each; mesh.expert=2 splits the 8 experts over the two processes,
# so the tokens' all-to-all crosses processes. The mu/7 model (one MoE layer), routing groups of 4
# images, 8 images per process; checkpoints at steps 3 and 6; evaluation once, at the end, with
# 200-image few-shot sets.
OVERRIDES = {
    'model.variant': 'mu/7', 'moe.group_size': 4, 'batch_size': 16, 'num_train_steps': 6,
    'schedule.warmup_steps': 1, 'log_every_steps': 1, 'mesh.expert': 2,
    'checkpoint.every_steps': 3, 'checkpoint.keep': 2,
    'data.train_split': 'train[:512]', 'data.eval_split': 'test[:64]', 'data.shuffle_buffer': 512,
    'eval.every_steps': 6, 'eval.batch_size': 16,
    'fewshot.every_steps': 6, 'fewshot.batch_size': 16, 'fewshot.seeds': 1,
    'fewshot.datasets.digits': "('train[:200]', 'test[:200]')",
    'fewshot.datasets.fashion_mnist': "('train[:200]', 'test[:200]')", 'wandb.mode': 'disabled',
}
# The processes inherit the session's fast-compile XLA flags (conftest.py); the second run loads
# its compiled functions from the persistent cache the first one filled.


def launch_two_processes(workdir, cache_dir) -> subprocess.CompletedProcess:
  env = {**os.environ, 'NUM_PROCESSES': '2', 'JAX_PLATFORMS': 'cpu',
         'JAX_COMPILATION_CACHE_DIR': str(cache_dir),
         'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0'}
  command = ['launch/local.sh', 'main.py', '--config=configs/tiny.py:router=sinkhorn_ec',
             f'--workdir={workdir}', *[f'--config.{k}={v}' for k, v in OVERRIDES.items()]]
  return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def losses(workdir) -> dict:
  return {s: m['loss'] for s, m in observability.read_metrics(str(workdir)).items() if 'loss' in m}


def test_two_processes_train_checkpoint_and_resume_exactly(tmp_path):
  workdir = tmp_path / 'run'
  first = launch_two_processes(workdir, tmp_path / 'cache')
  assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
  with open(workdir / 'summary.json', encoding='utf-8') as f:
    summary = json.load(f)
  assert summary['num_devices'] == 2 and summary['steps'] == 6
  assert 0 <= summary['upstream_prec1'] <= 1 and 'digits' in summary['fewshot']
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['3', '6']
  uninterrupted = losses(workdir)
  assert sorted(uninterrupted) == list(range(1, 7))

  # As if preempted after the step-3 checkpoint: the same command resumes from it on both.
  shutil.rmtree(workdir / 'checkpoints' / '6')
  os.remove(workdir / 'summary.json')
  second = launch_two_processes(workdir, tmp_path / 'cache')
  assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
  output = second.stdout + second.stderr
  # Each process's header (vmoe/console.py) says where it resumed; INFO logs are in log[.1].txt.
  assert '[0] ' in output and '[1] ' in output and output.count('resumed from step 3') == 2
  assert os.path.exists(workdir / 'log.txt') and os.path.exists(workdir / 'log.1.txt')
  assert losses(workdir) == uninterrupted          # Steps 4-6 again, bit for bit.
  assert os.path.exists(workdir / 'summary.json')


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
