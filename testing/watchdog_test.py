"""Tests of the watchdog: a timeout names the waiting thread's frame; the hard deadline works
while the main thread is busy and ends the process."""
import os
import subprocess
import sys
import threading

import pytest

from testing import watchdog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wait_until_returns_once_done():
  calls = []
  watchdog.wait_until(lambda: calls.append(1) or len(calls) == 3, seconds=5, what='third call',
                      poll=0)
  assert len(calls) == 3


def test_a_timeout_dumps_every_threads_stack_then_raises(capfd):
  release = threading.Event()

  def blocked_on_an_event():
    release.wait()

  thread = threading.Thread(target=blocked_on_an_event)
  thread.start()
  try:
    with pytest.raises(TimeoutError, match='the save did not happen within 0.1 s'):
      watchdog.wait_until(lambda: False, seconds=0.1, what='the save')
  finally:
    release.set()
    thread.join()
  stderr = capfd.readouterr().err
  assert 'in blocked_on_an_event' in stderr and 'in wait_until' in stderr


def test_hard_deadline_dumps_the_stacks_and_ends_the_process():
  # The main thread sleeps inside the block: no Python code runs, faulthandler's thread still does.
  code = ('import sys, time\nfrom testing import watchdog\n'
          'with watchdog.hard_deadline(0.2, file=sys.stderr):\n  time.sleep(30)\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                          text=True, timeout=20)
  assert result.returncode == 1
  assert 'Timeout (0:00:00.200000)!' in result.stderr and '<string>", line 4' in result.stderr
