"""Tests of where logs go: the workdir's log file, the console only for warnings unless verbose."""
import os
import subprocess
import sys

import pytest

from vmoe.run import run_log

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# An absl program logging the way main.py sets it up; argv: WORKDIR quiet|verbose. Its own
# process, because the setup changes absl's global handler and flags.
PROGRAM = """
import logging as std_logging, os, sys
from absl import app, logging
from vmoe.run import run_log

def main(argv):
  run_log.hold(verbose=argv[2] == 'verbose')
  logging.info('held info')
  logging.warning('a warning')
  run_log.to_workdir(argv[1])
  logging.info('later info')
  with run_log.native_stderr_to_log():
    os.write(2, b'native line\\n')
    print('python stderr line', file=sys.stderr)
  std_logging.shutdown()           # As at exit: the log file is closed ...
  logging.info('after shutdown')   # ... and a late record comes (asyncio's, say).

app.run(main)
"""


def run_program(workdir, mode: str) -> tuple[str, str]:
  """(console output, log file) of PROGRAM."""
  result = subprocess.run([sys.executable, '-c', PROGRAM, str(workdir), mode], cwd=REPO,
                          capture_output=True, text=True, check=True, timeout=120)
  with open(os.path.join(workdir, run_log.LOG_FILE), encoding='utf-8') as f:
    return result.stdout + result.stderr, f.read()


@pytest.mark.parametrize('mode', ['quiet', 'verbose'])
def test_info_goes_to_the_log_file_and_to_the_console_only_when_verbose(tmp_path, mode):
  console, log = run_program(tmp_path / 'w', mode)
  assert log.index('held info') < log.index('a warning') < log.index('later info')
  assert 'a warning' in console and 'python stderr line' in console
  assert 'python stderr line' not in log
  assert 'after shutdown' in log and 'Logging error' not in console
  if mode == 'quiet':
    assert 'native line' in log
    assert all(text not in console for text in ('held info', 'later info', 'native line'))
  else:
    assert all(text in console for text in ('held info', 'later info', 'native line'))


def test_a_resumed_run_appends_to_the_log(tmp_path):
  run_program(tmp_path, 'quiet')
  _, log = run_program(tmp_path, 'quiet')
  assert log.count('held info') == 2


def test_log_file_per_process_and_an_unwritable_workdir_is_left_to_the_trainer(tmp_path):
  assert run_log.log_path('/w', 0) == '/w/log.txt' and run_log.log_path('/w', 3) == '/w/log.3.txt'
  (tmp_path / 'file').write_text('')
  assert run_log.to_workdir(str(tmp_path / 'file' / 'workdir')) is None
