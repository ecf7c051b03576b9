"""Tests of the stop agreement on one process; the two-process agreement, through JAX's
preemption sync, is launch/distributed_test.py's."""
import signal

import pytest

from vmoe.run import preemption
from vmoe.run import run_outputs


def test_sigterm_stops_at_the_next_safe_point_as_a_preemption():
  with preemption.StopAgreement() as stop:
    stop.check()
    stop.check()                         # No signal: no stop.
    signal.raise_signal(signal.SIGTERM)
    with pytest.raises(preemption.Stopped, match='Preempted'):
      stop.check()
  assert stop.exit_status() == run_outputs.PREEMPTED == 0


def test_ctrl_c_stops_as_an_interruption_and_a_second_one_quits_at_once():
  with preemption.StopAgreement() as stop:
    signal.raise_signal(signal.SIGINT)
    with pytest.raises(preemption.Stopped, match='Interrupted'):
      stop.check()
    assert stop.exit_status() == run_outputs.INTERRUPTED == 130
    # The handler called as for a second signal, not through raise_signal: Python may run a
    # handler inside whatever Python code runs next (a gc callback), where its exception is lost.
    with pytest.raises(KeyboardInterrupt):
      signal.getsignal(signal.SIGINT)(signal.SIGINT, None)


def test_the_previous_handlers_come_back():
  before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  with preemption.StopAgreement():
    assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
  assert {s: signal.getsignal(s) for s in before} == before


def test_a_run_stopped_early_is_told_from_a_finished_or_failed_one():
  assert run_outputs.stopped_early(run_outputs.PREEMPTED, finished=False)
  assert run_outputs.stopped_early(run_outputs.INTERRUPTED, finished=False)
  assert not run_outputs.stopped_early(0, finished=True)       # Finished.
  assert not run_outputs.stopped_early(2, finished=False)      # A user error.
