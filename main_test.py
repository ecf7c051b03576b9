"""main.py as a user meets it: a user error is one message on stderr and exit status 2, no
traceback; and configs/tiny.py runs on 8 devices with only --config.mesh.expert=8.

Each case runs `python main.py ...` from the repo root, as the README does. Starting main.py takes
seconds (imports; TensorFlow's for the cases that reach the trainer), so the `runs` fixture starts
every case's process at once, once per session also under pytest-xdist (conftest.py
`once_per_session`), and each test checks one case.
"""
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.abspath(__file__))
SHORT_RUN = ['--config.num_train_steps=2', '--config.schedule.warmup_steps=1',
             '--config.wandb.mode=disabled']
SHADOW_IMPORTED = 'a data package outside the repository was imported'
# Lines that loggers (absl, TensorFlow's C++ glog) write to stderr; the rest is main.py's report.
LOG_LINE = re.compile(r'([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ |WARNING: All log messages before absl)')


def cases(tmp: str) -> dict:
  """{case: (main.py arguments, extra environment)}, with workdirs and data under `tmp`."""
  other_config = os.path.join(tmp, 'other_config')
  os.makedirs(other_config)
  with open(os.path.join(other_config, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump({'seed': 1}, f)            # What a run of another config recorded.
  a_file = os.path.join(tmp, 'a_file')
  open(a_file, 'w', encoding='utf-8').close()
  corrupt = os.path.join(tmp, 'corrupt')
  for item in ('state', 'record'):       # A step directory orbax lists but cannot restore.
    os.makedirs(os.path.join(corrupt, 'checkpoints', '2', item))
  buggy_config = os.path.join(tmp, 'buggy_config.py')
  with open(buggy_config, 'w', encoding='utf-8') as f:
    f.write('def get_config():\n  return int("not a number")\n')
  shadow = os.path.join(tmp, 'shadow')    # An installed package named as one of the repo's.
  os.makedirs(os.path.join(shadow, 'data'))
  with open(os.path.join(shadow, 'data', '__init__.py'), 'w', encoding='utf-8') as f:
    f.write(f'raise ImportError({SHADOW_IMPORTED!r})\n')
  tiny = ['--config=configs/tiny.py', *SHORT_RUN]
  eight_devices = {'XLA_FLAGS': f'{os.environ.get("XLA_FLAGS", "")} '
                                '--xla_force_host_platform_device_count=8'}
  return {
      'unknown_router': (['--config=configs/tiny.py:router=foo', *SHORT_RUN], {}),
      'unknown_router_verbose': (['--config=configs/tiny.py:router=foo', *SHORT_RUN],
                                 {'VMOE_VERBOSE': '1'}),
      'bug_in_a_config': ([f'--config={buggy_config}'], {}),
      # The shadowing package comes first on PYTHONPATH, and PYTHONSAFEPATH keeps Python from
      # putting main.py's directory before it: main.py must do that itself.
      'shadowed_data_package': (['--config=configs/tiny.py:router=foo', *SHORT_RUN],
                                {'PYTHONSAFEPATH': '1',
                                 'PYTHONPATH': os.pathsep.join([shadow, REPO])}),
      'unknown_key': ([*tiny, '--config.modle.x=1'], {}),
      'bad_value': ([*tiny, '--config.batch_size=-5'], {}),
      'missing_imagenet21k': (['--config=configs/b32_sinkhorn_ec.py',
                               f'--config.data.data_dir={os.path.join(tmp, "no_data")}'], {}),
      'workdir_of_another_config': ([*tiny, f'--workdir={other_config}'], {}),
      'unwritable_workdir': ([*tiny, f'--workdir={os.path.join(a_file, "run")}'], {}),
      'corrupt_checkpoint': ([*tiny, f'--workdir={corrupt}'], {}),
      # Short evaluations too: 512 test images (one 8-device batch) upstream and in each few-shot
      # set (digits has 797, Fashion-MNIST 10,000), one few-shot seed.
      'mesh_expert_8': ([*tiny, '--config.mesh.expert=8', '--config.data.eval_split=test[:512]',
                         "--config.fewshot.datasets.digits=('train', 'test[:512]')",
                         "--config.fewshot.datasets.fashion_mnist=('train', 'test[:512]')",
                         '--config.fewshot.seeds=1'], eight_devices),
  }


def run_all(tmp: str) -> dict:
  """{case: {'returncode', 'stderr', 'workdir'}}, all cases' processes running at once."""
  processes = {}
  for name, (args, env) in cases(tmp).items():
    if not any(a.startswith('--workdir=') for a in args):
      args = [*args, f'--workdir={os.path.join(tmp, name)}']
    workdir = next(a.partition('=')[2] for a in args if a.startswith('--workdir='))
    process = subprocess.Popen([sys.executable, 'main.py', *args], cwd=REPO,
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    processes[name] = process, workdir
  results = {}
  for name, (process, workdir) in processes.items():
    _, stderr = process.communicate(timeout=900)
    results[name] = {'returncode': process.returncode, 'stderr': stderr, 'workdir': workdir}
  return results


@pytest.fixture(scope='module')
def runs(once_per_session, tmp_path_factory) -> dict:
  """run_all() once per session (conftest.py), in a directory of its own."""
  return once_per_session('main_runs', lambda: run_all(str(tmp_path_factory.mktemp('cases'))))


def report(stderr: str) -> list[str]:
  """stderr without the loggers' lines: what main.py itself printed."""
  return [line for line in stderr.splitlines() if line and not LOG_LINE.match(line)]


def assert_user_error(run: dict, message: str, max_lines: int = 1):
  """Status 2, no traceback, and a report of at most max_lines lines that contains `message`."""
  lines = report(run['stderr'])
  assert run['returncode'] == 2, run['stderr'][-3000:]
  assert 'Traceback' not in run['stderr']
  assert lines[0].startswith('Error: ') and len(lines) <= max_lines, lines
  assert message in '\n'.join(lines)


def test_unknown_router(runs):
  assert_user_error(runs['unknown_router'], "Error: unknown router 'foo'; valid routers: "
                    'base, lossfree_tc, random_tc, sigmoid_tc, sinkhorn_ec, sinkhorn_tc, soft_moe, '
                    'softmax_ec, softmax_tc, sparsity_ec, sparsity_tc, topp_tc (a router of your '
                    'own: declare it in a module and pass router_module=PATH, docs/routers.md). '
                    "(Or 'dense': the ViT without MoE layers.)")
  assert not os.path.exists(runs['unknown_router']['workdir'])    # Failed before training.


def test_verbose_adds_the_traceback(runs):
  run = runs['unknown_router_verbose']
  assert run['returncode'] == 2
  assert 'Traceback' in run['stderr'] and "Error: unknown router 'foo'" in run['stderr']


def test_a_bug_keeps_its_traceback(runs):
  # A ValueError that the config's own code raises is no UserError: absl's report, status 1.
  run = runs['bug_in_a_config']
  assert run['returncode'] == 1
  assert 'Traceback' in run['stderr'] and 'invalid literal for int()' in run['stderr']


def test_an_installed_package_named_as_the_repos_does_not_shadow_it(runs):
  # main.py imported the repository's data package, not the `data` first on PYTHONPATH: the run
  # got as far as the config, whose router is unknown.
  run = runs['shadowed_data_package']
  assert SHADOW_IMPORTED not in run['stderr']
  assert_user_error(run, "Error: unknown router 'foo'")


def test_unknown_key(runs):
  assert_user_error(runs['unknown_key'], 'Error: a --config override names a key the config '
                    'lacks: \'modle\'. Did you mean "model" instead of "modle"?')
  assert not os.path.exists(runs['unknown_key']['workdir'])       # Failed before training.


def test_bad_value(runs):
  assert_user_error(runs['bad_value'], 'Error: batch_size must be >= 1, got -5.')


def test_missing_imagenet21k(runs):
  # Then the instructions (lines 2-7): download, where to put the archive, build, the flags.
  assert_user_error(runs['missing_imagenet21k'], 'Error: ImageNet-21k (fall11) is not prepared '
                    'in', max_lines=7)
  assert 'python -m data.prepare build imagenet21k' in runs['missing_imagenet21k']['stderr']


def test_workdir_of_another_config(runs):
  run = runs['workdir_of_another_config']
  assert_user_error(run, f'Error: {run["workdir"]} holds a run of a different config '
                    '(differences under: batch_size, ')


def test_unwritable_workdir(runs):
  run = runs['unwritable_workdir']
  assert_user_error(run, f'Error: cannot write in --workdir={run["workdir"]} (Not a directory); '
                    'give a directory you can create and write.')


def test_corrupt_checkpoint_without_fallback(runs):
  run = runs['corrupt_checkpoint']
  checkpoints = os.path.join(run['workdir'], 'checkpoints')
  assert_user_error(run, f'Error: No readable checkpoint in {checkpoints}: corrupt-2 could not '
                    'be read back')


def test_tiny_config_runs_on_8_devices_with_only_the_expert_axis_set(runs):
  # 8 devices x 16-image routing groups: the config file's batches (64, 400, 400) become the next
  # multiples of 128, and the run records them.
  run = runs['mesh_expert_8']
  assert run['returncode'] == 0, run['stderr'][-3000:]
  with open(os.path.join(run['workdir'], 'config.json'), encoding='utf-8') as f:
    config = json.load(f)
  assert (config['batch_size'], config['eval']['batch_size'],
          config['fewshot']['batch_size']) == (128, 512, 512)
  assert config['mesh']['expert'] == 8
  assert os.path.exists(os.path.join(run['workdir'], 'summary.json'))
