"""The evaluation schedule, and which of eval.sets are evaluated."""
import logging

import pytest

from base import errors
from evaluation import eval_config
from testing.data import data_config
from vmoe.train import train_evals


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


def test_eval_sets_are_kept_where_prepared_and_skipped_with_one_line_where_not(tmp_path, caplog):
  # eval.sets defaults to none: nothing more is evaluated than before the key existed.
  data = data_config(data_dir=str(tmp_path / 'tfds'))
  assert eval_config.EvalConfig(every_steps=1, batch_size=8).sets == {}
  assert train_evals.available_eval_sets(data, eval_config.EvalConfig(1, 8)) == {}
  pp = 'decode|value_range(-1, 1)|onehot(10)|keep("image", "labels")'
  sets = {'test': ('digits', 'test', pp), 'imagenet_v2': ('imagenet_v2', 'test', pp)}
  with caplog.at_level(logging.WARNING):
    kept = train_evals.available_eval_sets(data, eval_config.EvalConfig(1, 8, sets))
  assert kept == {'test': sets['test']}        # Embedded digits prepare on first use.
  skipped, = [r.getMessage() for r in caplog.records if 'skipped' in r.getMessage()]
  assert skipped.startswith('eval set imagenet_v2 skipped: ImageNet-V2 (imagenet_v2) is not '
                            'prepared in') and skipped.endswith('docs/data.md says how to '
                                                                'prepare it).')
  with pytest.raises(errors.UserError, match='eval.sets.test pp: '):
    train_evals.available_eval_sets(data, eval_config.EvalConfig(1, 8, {'test': ('digits', 'test',
                                                                              'nope(1)')}))
  with pytest.raises(ValueError, match="eval.sets must map each name but 'upstream'"):
    eval_config.EvalConfig(1, 8, {'upstream': ('digits', 'test', pp)})
