"""Stopping a run on a signal where every process stands at the same place.

A preemption notice (SIGTERM: Cloud TPU, SLURM and Kubernetes send it some seconds before the
kill) or a Ctrl-C (SIGINT) must stop training where a checkpoint can be saved. Saving is a
collective, so on several processes all of them must stop at the same place; a pod's workers get
the notice at slightly different moments, so each deciding alone would save different steps, or
wait forever in a save the others never enter.

The trainer calls `check()` at every safe point: before each training step and before each
evaluation batch, the same sequence on every process. `check()` raises `Stopped` at the first safe
point where every process stops:
  one process    once a signal has arrived (a Python handler sets a flag);
  several        JAX's own preemption sync (multihost_utils.reached_preemption_sync_point, the
                 coordination service's preemption sync manager, which jax.distributed.initialize
                 starts: jax_enable_preemption_service is on by default). Its C++ SIGTERM handler
                 posts the notice to the coordination service; then every process posts how many
                 safe points it has passed and all stop at the largest count plus one. A check
                 between notices is a lock and a compare in that manager: no communication per
                 step. Ctrl-C on one of several processes raises SIGTERM in that process, the
                 notice the manager listens for; Python must then never handle SIGTERM itself, as
                 its handler would replace the C++ one.
Counting safe points, not steps, lets a notice stop an evaluation between two of its batches: a
preemption leaves seconds, not the minutes a few-shot evaluation can take. The counts start at 1
in every process (the manager's counter starts at 0), and every process calls `check()` equally
often because the loop and the evaluations run in lockstep (their batches are collectives).

Exit statuses (vmoe/run/run_outputs.py): a process that got Ctrl-C itself exits INTERRUPTED (130),
as a shell reports a Ctrl-C, so that a script or sweep running it stops; otherwise it was
preempted (SIGTERM, here or on another process) and exits PREEMPTED (0), the status a scheduler
expects of a job that stopped cleanly. A second Ctrl-C quits at once (KeyboardInterrupt).
"""
import signal

from absl import logging
import jax
from jax.experimental import multihost_utils

from vmoe.run import run_outputs


class Stopped(Exception):
  """Raised by StopAgreement.check at the safe point where every process stops."""


class StopAgreement:
  """Signal handlers that turn Ctrl-C and SIGTERM into a stop at an agreed safe point.

  A context manager: the previous handlers come back on exit. Only one should be active at a time.
  """

  def __init__(self):
    self.received: list[int] = []        # The signals this process got, in order.
    self._safe_points = 0
    self._several = jax.process_count() > 1
    self._previous = {}

  def __enter__(self) -> 'StopAgreement':
    handled = (signal.SIGINT,) if self._several else (signal.SIGINT, signal.SIGTERM)
    for signum in handled:
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc_info):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous.clear()

  def _handle(self, signum: int, frame):
    del frame
    if signum == signal.SIGINT and signal.SIGINT in self.received:
      raise KeyboardInterrupt       # The second Ctrl-C.
    self.received.append(signum)
    logging.warning('%s: saving a checkpoint at the next step or evaluation batch, then exiting%s.',
                    signal.Signals(signum).name,
                    ' (Ctrl-C again to quit at once)' if signum == signal.SIGINT else '')
    if self._several and signum == signal.SIGINT:
      signal.raise_signal(signal.SIGTERM)    # To the preemption sync manager's handler.

  def check(self) -> None:
    """A safe point: raises Stopped if every process stops here."""
    self._safe_points += 1
    if self._several:
      stop = multihost_utils.reached_preemption_sync_point(self._safe_points)
    else:
      stop = bool(self.received)
    if stop:
      raise Stopped(self.reason())

  def reason(self) -> str:
    """'Interrupted' after this process's Ctrl-C, else 'Preempted'."""
    return 'Interrupted' if signal.SIGINT in self.received else 'Preempted'

  def exit_status(self) -> int:
    """run_outputs.INTERRUPTED after this process's Ctrl-C, else run_outputs.PREEMPTED."""
    return (run_outputs.INTERRUPTED if signal.SIGINT in self.received
            else run_outputs.PREEMPTED)
