"""The timing loop's calls, the interleaving order and the machine record (no timed assertions)."""
from bench import timing

def test_time_ms_warms_up_then_times_the_repeats():
  calls = []
  ms = timing.time_ms(lambda x: calls.append(x) or x, 7, warmup=2, repeats=3)
  assert calls == [7] * 5 and ms >= 0


def test_interleaved_visits_every_timer_once_a_round_in_turn():
  log = []
  timer = lambda name: lambda: log.append(name) or {'ms': float(len(log))}
  found = timing.interleaved([timer('a'), timer('b')], rounds=3)
  assert log == ['a', 'b'] * 3
  # Each timer's results, round by round: a ran 1st, 3rd and 5th; b 2nd, 4th and 6th.
  assert found == [{'ms': [1.0, 3.0, 5.0]}, {'ms': [2.0, 4.0, 6.0]}]


def test_machine_records_the_cpu_beside_the_devices():
  record = timing.machine()
  assert {'platform', 'cpu_count', 'cpu_model', 'cpu_flags', 'commit', 'uncommitted_changes',
          'device', 'num_devices', 'jax'} == set(record)
  assert isinstance(record['cpu_flags'], list)
