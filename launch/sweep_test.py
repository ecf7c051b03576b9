"""Tests of the sweep: the grid, the commands, and resuming after a failure or a kill."""
import io
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from launch import sweep
from vmoe.routing import declarations
from vmoe.run import run_outputs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A stand-in for main.py: appends 'start NAME' to the ledger, then, unless told to fail or to kill
# the sweep, writes summary.json and appends 'done NAME'.
#   argv: workdir ledger action   (action: ok | fail | interrupted | preempted | kill-sweep-once)
FAKE_TRAINER = textwrap.dedent('''
    import json, os, signal, sys
    workdir, ledger, action = sys.argv[1:4]
    name = os.path.basename(workdir)
    with open(ledger, 'a') as f:
      f.write(f'start {name}\\n')
    print(f'training {name}', flush=True)
    if action == 'fail':
      print('loss is nan', flush=True)
      sys.exit(3)
    if action == 'interrupted':        # What the trainer does after its Ctrl-C checkpoint.
      sys.exit(130)
    if action == 'preempted':          # ... and after its checkpoint on SIGTERM: no summary.json.
      sys.exit(0)
    marker = os.path.join(workdir, 'killed-once')
    if action == 'kill-sweep-once' and not os.path.exists(marker):
      open(marker, 'w').close()
      os.kill(os.getppid(), signal.SIGKILL)   # The sweep dies mid-run, like a lost machine.
      sys.exit(1)
    with open(os.path.join(workdir, 'summary.json'), 'w') as f:
      json.dump({'router': name}, f)
    with open(ledger, 'a') as f:
      f.write(f'done {name}\\n')
''')


@pytest.fixture
def fake(tmp_path):
  script = tmp_path / 'fake_trainer.py'
  script.write_text(FAKE_TRAINER)
  ledger = tmp_path / 'ledger.txt'
  ledger.touch()

  def command(actions=None):
    actions = actions or {}
    return lambda run, workdir: [sys.executable, '-S', str(script), workdir, str(ledger),
                                 actions.get(run.name, 'ok')]

  def entries(kind):
    return [line.split()[1] for line in ledger.read_text().splitlines() if line.startswith(kind)]

  return command, entries


def test_the_sweep_and_the_tables_start_without_jax():
  # They only read router declarations (vmoe/routing/declarations.py), so they start in a
  # fraction of a second.
  code = ('import sys; import launch.sweep, results.tables; '
          'print(sorted(m for m in ("jax", "flax", "optax", "tensorflow") if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                       check=True).stdout
  assert out.strip() == '[]'


def test_grid_is_dense_then_six_routers_by_two_capacities_plus_ablation():
  grid = sweep.make_grid('b32')
  assert len(grid) == 13 and len({r.name for r in grid}) == 13
  assert [r.name for r in grid[:7]] == ['dense', 'softmax_tc_c1', 'sinkhorn_tc_c1',
                                        'softmax_ec_c1', 'sinkhorn_ec_c1', 'sparsity_ec_c1',
                                        'soft_moe_c1']
  with_ablation = sweep.make_grid('b32', seeds=2, include_ablation=True)
  assert len(with_ablation) == 30
  assert [r.name for r in with_ablation if not r.softmax_combine] == [
      'sinkhorn_tc_c1_nosmc', 'sinkhorn_tc_c2_nosmc', 'sinkhorn_tc_c1_nosmc_s1',
      'sinkhorn_tc_c2_nosmc_s1']
  assert [r.name for r in with_ablation if r.router == declarations.DENSE] == ['dense', 'dense_s1']
  with pytest.raises(ValueError, match='valid: b32, b16, l16, tiny'):
    sweep.make_grid('h14')


def test_routers_after_the_paper_join_the_grid_and_get_a_config_file():
  # The paper's routers keep their order; others follow in the order given.
  grid = sweep.make_grid('b32', routers=['lossfree_tc', 'softmax_ec', 'base'], capacities=[1])
  assert [r.name for r in grid] == ['softmax_ec_c1', 'lossfree_tc_c1', 'base_c1']
  assert [sweep.config_arg(r) for r in grid] == [
      'configs/b32_softmax_ec.py:c=1',
      'configs/router_lab.py:arch=b32,router=lossfree_tc,c=1',
      'configs/router_lab.py:arch=b32,router=base,c=1']
  tiny = sweep.GridRun('tiny', 'my_router', 2, router_module='lab/my_router.py')
  assert sweep.config_arg(tiny) == (
      'configs/tiny.py:router=my_router,c=2,router_module=lab/my_router.py')


def test_routers_and_capacities_keep_part_of_the_grid():
  grid = sweep.make_grid('tiny', seeds=2, routers=['dense', 'softmax_tc'], capacities=[1])
  assert [r.name for r in grid] == ['dense', 'softmax_tc_c1', 'dense_s1', 'softmax_tc_c1_s1']
  at_c1 = sweep.make_grid('tiny', capacities=[1], include_ablation=True)
  assert [r.name for r in at_c1] == ['dense', 'softmax_tc_c1', 'sinkhorn_tc_c1', 'softmax_ec_c1',
                                     'sinkhorn_ec_c1', 'sparsity_ec_c1', 'soft_moe_c1',
                                     'sinkhorn_tc_c1_nosmc']
  # The registered routers, built-in ones in name order (a user's, registered by an earlier test
  # in this process, may stand among them).
  with pytest.raises(ValueError, match='unknown router.*top2.*valid: dense, base, .*lossfree_tc'):
    sweep.make_grid('tiny', routers=['top2'])
  with pytest.raises(ValueError, match=r'unknown capacities \[3\]'):
    sweep.make_grid('tiny', capacities=[3])


def test_commands_follow_the_main_py_contract():
  run = sweep.GridRun('b32', 'sinkhorn_tc', 2, seed=1, softmax_combine=False)
  assert sweep.main_py_command(run, run.workdir('DIR')) == [
      '.venv/bin/python', 'main.py', '--config=configs/b32_sinkhorn_tc.py:c=2',
      '--workdir=DIR/b32/sinkhorn_tc_c2_nosmc_s1', '--config.moe.router.softmax_combine=False',
      '--config.seed=1']
  tiny = sweep.GridRun('tiny', 'soft_moe', 1)
  assert sweep.main_py_command(tiny, tiny.workdir('R')) == [
      '.venv/bin/python', 'main.py', '--config=configs/tiny.py:router=soft_moe,c=1',
      '--workdir=R/tiny/soft_moe_c1']
  dense = sweep.GridRun('b16', declarations.DENSE, None, seed=2)
  assert sweep.main_py_command(dense, dense.workdir('R')) == [
      '.venv/bin/python', 'main.py', '--config=configs/b16_dense.py', '--workdir=R/b16/dense_s2',
      '--config.seed=2']
  assert sweep.config_arg(sweep.GridRun('tiny', declarations.DENSE, None)) == (
      'configs/tiny.py:router=dense')


def test_every_config_of_the_grid_exists_in_the_repository():
  for arch in sweep.ARCHS:
    for run in sweep.make_grid(arch, include_ablation=True):
      assert os.path.exists(os.path.join(REPO, sweep.config_arg(run).split(':')[0])), run


def test_dry_run_prints_commands_and_creates_nothing(tmp_path):
  out = io.StringIO()
  root = str(tmp_path / 'runs')
  assert sweep.run_sweep(sweep.make_grid('tiny', include_ablation=True), root, dry_run=True,
                         out=out) == 0
  lines = out.getvalue().splitlines()
  assert len(lines) == 15 and not os.path.exists(root)
  assert lines[-1].endswith('main.py --config=configs/tiny.py:router=sinkhorn_tc,c=2 '
                            f'--workdir={root}/tiny/sinkhorn_tc_c2_nosmc '
                            '--config.moe.router.softmax_combine=False')


def test_failed_run_is_reported_the_sweep_goes_on_and_a_rerun_retries_only_it(tmp_path, fake):
  command, entries = fake
  runs = sweep.make_grid('tiny')[1:5]
  root = str(tmp_path / 'runs')
  out = io.StringIO()
  assert sweep.run_sweep(runs, root, command({'sinkhorn_tc_c1': 'fail'}), out=out) == 1
  assert entries('done') == ['softmax_tc_c1', 'softmax_ec_c1', 'sinkhorn_ec_c1']
  report = out.getvalue()
  assert 'tiny/sinkhorn_tc_c1: FAILED (exit status 3)' in report and 'loss is nan' in report
  assert '4 ran, 0 skipped, 1 failed: tiny/sinkhorn_tc_c1' in report
  with open(os.path.join(root, 'tiny', 'softmax_tc_c1', sweep.LOG_FILE)) as f:
    assert 'training softmax_tc_c1' in f.read()
  out = io.StringIO()
  assert sweep.run_sweep(runs, root, command(), out=out) == 0
  assert entries('start') == ['softmax_tc_c1', 'sinkhorn_tc_c1', 'softmax_ec_c1',
                              'sinkhorn_ec_c1', 'sinkhorn_tc_c1']
  assert '1 ran, 3 skipped, 0 failed' in out.getvalue()


@pytest.mark.parametrize('stop', ['interrupted', 'preempted'])
def test_an_interrupted_or_preempted_trainer_stops_the_sweep(tmp_path, fake, stop):
  command, entries = fake
  out = io.StringIO()
  status = sweep.run_sweep(sweep.make_grid('tiny')[1:4], str(tmp_path / 'runs'),
                           command({'sinkhorn_tc_c1': stop}), out=out)
  assert status == run_outputs.INTERRUPTED == 130
  assert entries('start') == ['softmax_tc_c1', 'sinkhorn_tc_c1']    # The third never started.
  assert 'rerun the same command to resume' in out.getvalue()


def test_a_killed_sweep_resumes_and_finishes_nothing_twice(tmp_path, fake):
  command, entries = fake
  root = str(tmp_path / 'runs')
  script = tmp_path / 'script.txt'
  # The sweep runs in its own process; the third run's trainer kills it (SIGKILL: no cleanup).
  killer = textwrap.dedent(f'''
      import sys
      sys.path.insert(0, {REPO!r})
      from launch import sweep
      script, ledger = {str(tmp_path / 'fake_trainer.py')!r}, {str(tmp_path / 'ledger.txt')!r}
      def command(run, workdir):
        action = 'kill-sweep-once' if run.name == 'softmax_ec_c1' else 'ok'
        return [sys.executable, '-S', script, workdir, ledger, action]
      sys.exit(sweep.run_sweep(sweep.make_grid('tiny', include_ablation=True), {root!r}, command))
  ''')
  script.write_text(killer)
  killed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False)
  assert killed.returncode == -signal.SIGKILL, killed.stderr
  assert entries('done') == ['dense', 'softmax_tc_c1', 'sinkhorn_tc_c1']
  # Rerun the same sweep: finished runs are skipped, the interrupted one starts again.
  out = io.StringIO()
  grid = sweep.make_grid('tiny', include_ablation=True)
  assert sweep.run_sweep(grid, root, command(), out=out) == 0
  assert '12 ran, 3 skipped, 0 failed' in out.getvalue()
  done = entries('done')
  assert sorted(done) == sorted(r.name for r in grid) and len(done) == len(set(done)) == 15
  started = entries('start')
  assert [n for n in set(started) if started.count(n) > 1] == ['softmax_ec_c1']
  for run in grid:
    with open(os.path.join(run.workdir(root), run_outputs.SUMMARY_FILE)) as f:
      assert json.load(f) == {'router': run.name}
  # A third pass has nothing left to do.
  out = io.StringIO()
  assert sweep.run_sweep(grid, root, command(), out=out) == 0
  assert '0 ran, 15 skipped' in out.getvalue() and len(entries('start')) == 16


def test_cli_refuses_to_start_outside_the_repository(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(SystemExit, match='run the sweep from the repository root'):
    sweep.main(['--arch', 'b32', '--workdir-root', str(tmp_path), '--dry-run'])


def test_cli_dry_run_from_the_repository(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(REPO)
  assert sweep.main(['--arch', 'b16', '--workdir-root', str(tmp_path), '--dry-run',
                     '--include-ablation', '--seeds', '2', '--python', sys.executable]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 30 and '--config.seed=1' in lines[-1]
  assert os.listdir(tmp_path) == []
  # --config.* overrides reach every run; anything else is refused.
  assert sweep.main(['--arch', 'b32', '--workdir-root', str(tmp_path), '--dry-run',
                     '--python', sys.executable, '--config.mesh.expert=32']) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 13 and all(l.endswith('--config.mesh.expert=32') for l in lines)
  with pytest.raises(SystemExit):
    sweep.main(['--arch', 'b32', '--workdir-root', str(tmp_path), '--mesh=8'])
  assert 'only --config.KEY=VALUE overrides' in capsys.readouterr().err
  # --routers, --capacities and --jobs: bad values exit 2 with argparse's one-line message.
  for bad in (['--routers', 'top2'], ['--capacities', '3'], ['--jobs', '0']):
    with pytest.raises(SystemExit) as exit_info:
      sweep.main(['--arch', 'tiny', '--workdir-root', str(tmp_path), '--dry-run'] + bad)
    assert exit_info.value.code == 2
  assert sweep.main(['--arch', 'tiny', '--workdir-root', str(tmp_path), '--dry-run', '--python',
                     sys.executable, '--routers', 'dense,soft_moe', '--capacities', '2']) == 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split()[1] for line in lines[-2:]] == ['tiny/dense:', 'tiny/soft_moe_c2:']


def test_jobs_run_side_by_side_and_each_run_once(tmp_path, fake):
  command, entries = fake
  gate = tmp_path / 'gate'
  base = command()

  def waiting(run, workdir):   # Each run waits until two have started: only jobs=2 gets past.
    waiter = ('import os, sys, time\n'
              f'open(os.path.join({str(gate)!r}, {run.name!r}), "w").close()\n'
              f'while len(os.listdir({str(gate)!r})) < 2: time.sleep(0.05)\n'
              'os.execv(sys.executable, [sys.executable] + sys.argv[1:])')
    return [sys.executable, '-S', '-c', waiter] + base(run, workdir)[2:]

  gate.mkdir()
  grid = sweep.make_grid('tiny')[:4]
  out = io.StringIO()
  assert sweep.run_sweep(grid, str(tmp_path / 'runs'), waiting, jobs=2, out=out) == 0
  assert sorted(entries('done')) == sorted(r.name for r in grid) == sorted(entries('start'))
  assert '4 ran, 0 skipped, 0 failed' in out.getvalue()


def test_records_keep_each_finished_runs_summary_and_timing_lines(tmp_path, fake):
  command, _ = fake
  root, records = str(tmp_path / 'runs'), str(tmp_path / 'records')
  grid = sweep.make_grid('tiny')[:2]
  assert sweep.run_sweep(grid[:1], root, command(), out=io.StringIO()) == 0
  # The first run had finished before --records was given: it is copied when skipped.
  assert sweep.run_sweep(grid, root, command(), out=io.StringIO(), records=records) == 0
  for run in grid:
    with open(os.path.join(run.workdir(records), run_outputs.SUMMARY_FILE)) as f:
      assert json.load(f) == {'router': run.name}
    with open(os.path.join(run.workdir(records), sweep.LOG_FILE)) as f:
      lines = f.read().splitlines()
    assert len(lines) == 2 and lines[0].startswith('=== ') and 'main' not in lines[0].split()[0]
    assert lines[1].startswith('=== finished in ') and lines[1].endswith('s with --jobs 1')


def test_the_imagenet_rung_runs_its_grid_through_one_config_file():
  # make sweep ARCH=ilsvrc_s32: the dense baseline and the six routers at c = 1 and 2 on V-MoE's
  # S/32 ImageNet-1k recipe (configs/ilsvrc_s32.py), 13 runs; any other registered router joins.
  grid = sweep.make_grid('ilsvrc_s32')
  assert len(grid) == 13 and grid[0].name == 'dense'
  assert [sweep.config_arg(r) for r in grid[:3]] == [
      'configs/ilsvrc_s32.py:router=dense', 'configs/ilsvrc_s32.py:router=softmax_tc,c=1',
      'configs/ilsvrc_s32.py:router=sinkhorn_tc,c=1']
  lab = sweep.make_grid('ilsvrc_s32', routers=['lossfree_tc'], capacities=[2])
  assert [sweep.config_arg(r) for r in lab] == ['configs/ilsvrc_s32.py:router=lossfree_tc,c=2']
  assert grid[1].workdir('R') == 'R/ilsvrc_s32/softmax_tc_c1'
