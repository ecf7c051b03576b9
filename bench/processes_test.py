"""The per-process runner: one fresh process per job, in turn; a rerun resumes; parts dropped."""
import json
import os

import pytest

from bench import processes


def fake_runs(monkeypatch, fail=lambda job: False):
  """subprocess.run standing in for `python -m MODULE JOB --out PART`: writes PART's record (the
  job's flags) unless `fail(job)`; returns the jobs it ran."""
  ran = []

  def run(command, check, cwd):
    assert check and cwd == processes.REPO and command[:3] == [
        processes.sys.executable, '-m', 'bench.some_tool']
    assert os.path.isfile(os.path.join(cwd, 'bench', 'processes.py'))   # -m bench.* resolves.
    job, part = command[3:-2], command[-1]
    assert os.path.isabs(part)      # The process runs in REPO, whatever the user's directory.
    ran.append(job)
    if fail(job):
      raise processes.subprocess.CalledProcessError(-9, command)    # Killed.
    processes.atomic.write_json(part, {'job': job})
  monkeypatch.setattr(processes.subprocess, 'run', run)
  return ran


def test_jobs_run_in_turn_and_a_rerun_resumes(tmp_path, monkeypatch):
  out = str(tmp_path / 'o.json')
  jobs = [['--archs', 'B/32'], ['--archs', 'L/16'], ['--archs', 'B/32']]
  ran = fake_runs(monkeypatch, fail=lambda job: job == ['--archs', 'L/16'] and len(ran) < 3)
  with pytest.raises(processes.subprocess.CalledProcessError):
    processes.run('bench.some_tool', jobs, out)
  assert ran == jobs[:2]
  # The rerun takes the first job's part and runs the killed job and the last one.
  assert processes.run('bench.some_tool', jobs, out) == [{'job': job} for job in jobs]
  assert ran == jobs[:2] + jobs[1:]
  processes.write(out, {'merged': True})
  assert json.loads(open(out).read()) == {'merged': True}
  assert not os.path.exists(out + '.parts')


def test_a_rerun_with_other_flags_does_not_take_a_failed_runs_parts(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  out = 'o.json'      # Relative to the user's directory.
  ran = fake_runs(monkeypatch, fail=lambda job: '--steps' in job and len(ran) == 2)
  with pytest.raises(processes.subprocess.CalledProcessError):
    processes.run('bench.some_tool', [['--steps', '2']] * 2, out)
  assert len(os.listdir(out + '.parts')) == 1
  assert processes.run('bench.some_tool', [['--rounds', '2']] * 2, out) == [
      {'job': ['--rounds', '2']}] * 2
  assert ran[2:] == [['--rounds', '2']] * 2
