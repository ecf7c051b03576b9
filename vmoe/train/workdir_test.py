"""Tests of the workdir checks: a path that cannot be written, another run's workdir, an older
trainer's, one recorded before a config key existed.

A config key added from now on gets a test that its default reproduces the behaviour of before
(vmoe/train/experiment.py resolve_recorded); `recorded_before` gives the record of a run from before
the key, for the test that such a run resumes.
"""
import copy
import dataclasses
import json

import pytest

from base import errors
from vmoe.run import run_outputs
from vmoe.train import workdir


def test_a_workdir_that_cannot_be_written_is_a_user_error(tmp_path):
  (tmp_path / 'file').write_text('')
  with pytest.raises(errors.UserError, match='cannot write in --workdir=.*file/run'):
    workdir.prepare(str(tmp_path / 'file' / 'run'))


def test_a_different_config_in_the_same_workdir_is_refused(tiny_experiment, tmp_path):
  # claim: prepare and guard, as a run's start does; a rerun claims the same workdir again.
  run = tmp_path / 'run'
  workdir.claim(str(run), tiny_experiment('router=softmax_ec'))
  workdir.claim(str(run), tiny_experiment('router=softmax_ec'))   # The same: accepted.
  assert sorted(p.name for p in run.iterdir()) == [run_outputs.CONFIG_FILE]   # Probe removed.
  with pytest.raises(errors.UserError, match='holds a run of a different config.*moe'):
    workdir.guard(str(run), tiny_experiment('router=sinkhorn_ec'))


def test_a_workdir_of_the_older_config_format_is_refused_saying_so(tiny_experiment, tmp_path):
  # Records written before the mesh was resolved at parse time hold -1 for its automatic sizes.
  experiment = tiny_experiment('router=softmax_ec')
  path = tmp_path / run_outputs.CONFIG_FILE
  path.write_text(json.dumps({**experiment.to_dict(), 'mesh': {'data': -1, 'expert': 1}}))
  with pytest.raises(errors.UserError, match=r'config.json records its mesh with automatic '
                                             r'\(-1\) sizes: .*older trainer.*new --workdir'):
    workdir.guard(str(tmp_path), experiment)


def recorded_before(config: dict, key: str) -> dict:
  """A copy of `config` (Experiment.to_dict()) without the dotted `key`, as a run recorded it
  before the key existed."""
  config = copy.deepcopy(config)
  *parents, leaf = key.split('.')
  node = config
  for parent in parents:
    node = node[parent]
  del node[leaf]
  return config


def record(path, config: dict) -> str:
  """Writes `config` as the config.json of workdir `path`; returns the workdir."""
  (path / run_outputs.CONFIG_FILE).write_text(json.dumps(config))
  return str(path)


# Keys at their dataclass defaults in configs/tiny.py, at each depth of the config's tree.
# The router lab's keys (moe.router.options, moe.router.module) are among them: a run recorded
# before the router lab resumes, its options empty and no module to import.
@pytest.mark.parametrize('key', ['wandb.mode', 'checkpoint.asynchronous', 'model.dropout_rate',
                                 'moe.router.sinkhorn_iters', 'moe.router.options',
                                 'moe.router.module'])
def test_a_workdir_recorded_before_a_key_existed_resumes(tiny_experiment, tmp_path, key):
  experiment = tiny_experiment('router=softmax_ec')
  workdir.guard(record(tmp_path, recorded_before(experiment.to_dict(), key)), experiment)


def test_a_key_recorded_at_another_value_is_refused_naming_it(tiny_experiment, tmp_path):
  experiment = tiny_experiment('router=softmax_ec')
  changed = experiment.to_dict()
  changed['optimizer']['weight_decay'] = 0.5
  with pytest.raises(errors.UserError, match=r'holds a run of a different config \(differences '
                                             r'under: optimizer\.weight_decay\); use a new'):
    workdir.guard(record(tmp_path, changed), experiment)
  # A record without a key whose value is not its default, or without a key that has none.
  for key in ('config_arg', 'log_every_steps'):
    with pytest.raises(errors.UserError, match=fr'differences under: {key}\)'):
      workdir.guard(record(tmp_path, recorded_before(experiment.to_dict(), key)), experiment)


def test_a_run_resumes_on_another_device_count_with_its_recorded_batch_sizes(tiny_experiment,
                                                                           tmp_path):
  # configs/tiny.py's batches (64, 400, 400) as main.py fits them to 8 devices of 16-image
  # groups (128, 512, 512) and to 4 (64, 448, 448: 448 = 7 x 64 is the first multiple >= 400).
  eight = tiny_experiment('', {'batch_size': 128, 'eval.batch_size': 512,
                               'fewshot.batch_size': 512}, num_devices=8)
  four = tiny_experiment('', {'eval.batch_size': 448, 'fewshot.batch_size': 448}, num_devices=4)
  workdir.claim(str(tmp_path), eight)
  resumed = workdir.guard(str(tmp_path), four, fixed=set())     # None set on the command line.
  assert resumed == dataclasses.replace(
      four, batch_size=128, eval=dataclasses.replace(four.eval, batch_size=512),
      fewshot=dataclasses.replace(four.fewshot, batch_size=512))
  assert (resumed.mesh.data, resumed.mesh.expert) == (4, 1)    # The mesh is this run's.
  # A size the user sets is theirs, and then a difference; one that does not split is refused.
  with pytest.raises(errors.UserError, match=r'differences under: batch_size\)'):
    workdir.guard(str(tmp_path), four, fixed={'batch_size'})
  three = tiny_experiment('', {'batch_size': 48, 'eval.batch_size': 48,
                               'fewshot.batch_size': 48}, num_devices=3)
  with pytest.raises(errors.UserError, match=r'batch_size=128 does not split over 3 devices'):
    workdir.guard(str(tmp_path), three, fixed=set())


def test_the_trainer_refuses_a_workdir_nobody_claimed(tmp_path, tiny_experiment):
  # The workdir is claimed once, by main.py (or testing/runs.py); the trainer only checks it.
  experiment = tiny_experiment()
  with pytest.raises(ValueError, match='is not claimed: call vmoe.train.workdir.claim'):
    workdir.check_claimed(str(tmp_path), experiment)
  claimed = workdir.claim(str(tmp_path), experiment)
  workdir.check_claimed(str(tmp_path), claimed)
  other = tiny_experiment(overrides={'num_train_steps': 700})
  with pytest.raises(ValueError, match='claimed for another run .*num_train_steps'):
    workdir.check_claimed(str(tmp_path), other)


def test_a_pp_string_recorded_with_another_randaug_arithmetic_is_refused(tiny_experiment,
                                                                         tmp_path):
  # A pp op's argument changes what the run trains on (randaug's arithmetic: the project's by
  # default, which a record without it means), so a changed data.pp_train is another run.
  experiment = tiny_experiment('router=softmax_ec')
  old = experiment.data.pp_train.replace('|value_range', '|randaug(2, 20)|value_range', 1)
  assert 'randaug(2, 20)' in old
  recorded = experiment.to_dict()
  recorded['data']['pp_train'] = old
  new = dataclasses.replace(experiment, data=dataclasses.replace(
      experiment.data, pp_train=old.replace('randaug(2, 20)',
                                            "randaug(2, 20, arithmetic='reference')")))
  with pytest.raises(errors.UserError, match=r'differences under: data\.pp_train\)'):
    workdir.guard(record(tmp_path, recorded), new)
