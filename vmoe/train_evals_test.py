"""The evaluation schedule: which evaluations run after which step."""
from vmoe import train_evals


def test_schedule_every_n_steps_and_after_the_last():
  # 25 steps, upstream every 10, few-shot every 20: upstream after 10, 20 and the last (25);
  # few-shot after 20 and 25; nothing after step 0 (a fresh run's first step) or past the end.
  schedule = train_evals.EvalSchedule(num_steps=25, upstream_every=10, fewshot_every=20)
  steps = range(0, 31)
  assert [s for s in steps if schedule.upstream_due(s)] == [10, 20, 25]
  assert [s for s in steps if schedule.fewshot_due(s)] == [20, 25]
  assert [s for s in steps if schedule.due(s)] == [10, 20, 25]


def test_without_fewshot_sets_only_upstream_is_due():
  schedule = train_evals.EvalSchedule(num_steps=20, upstream_every=20, fewshot_every=None)
  assert [s for s in range(0, 21) if schedule.due(s)] == [20]
  assert not any(schedule.fewshot_due(s) for s in range(0, 21))
