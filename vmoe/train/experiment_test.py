"""Tests of vmoe/train/experiment.py's batch fitting (batch sizes fitted to the devices, or one
error naming them all) and of its pp strings' cuts (Experiment.pp_splits). (What every config
parses to, and the errors a bad one gets, are configs/configs_test.py's.)"""
import json
import os

import pytest

from base import errors
from data.pp import device_split
from vmoe.run import run_outputs
from vmoe.train import experiment as experiment_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def tiny(tiny_experiment):
  """configs/tiny.py (batch 64, eval and few-shot 400, groups of 16 images) parsed for 1 device,
  with {'dotted.key': value} changes."""
  return lambda **changes: tiny_experiment('', changes)


def sizes(experiment) -> tuple:
  return experiment.batch_size, experiment.eval.batch_size, experiment.fewshot.batch_size


def test_unit_is_one_routing_group_per_device():
  assert experiment_lib.batch_unit(num_devices=8, group_size=16, num_experts=8) == 128
  assert experiment_lib.batch_unit(num_devices=8, group_size=16, num_experts=0) == 8   # Dense.


@pytest.mark.parametrize('batch_size, step, expected', [
    (64, 128, 128), (400, 128, 512), (512, 128, 512), (513, 128, 640), (1, 8, 8)])
def test_fitted_rounds_up_to_the_next_multiple(batch_size, step, expected):
  assert experiment_lib.fitted_batch_size(batch_size, step) == expected


def test_the_config_files_batches_are_fitted_to_8_devices(tiny):
  # 8 devices x 16 images: 64 -> 128, 400 -> 512 (4 x 128 = 512 is the first multiple >= 400).
  experiment = tiny()
  fitted = experiment_lib.fit_batches(experiment, num_devices=8, fixed=set())
  assert sizes(fitted) == (128, 512, 512)
  assert fitted.eval.every_steps == experiment.eval.every_steps    # Nothing else changes.
  assert fitted.fewshot.datasets == experiment.fewshot.datasets


def test_sizes_that_fit_are_kept(tiny):
  experiment = tiny()
  assert experiment_lib.fit_batches(experiment, num_devices=1, fixed=None) == experiment
  assert sizes(experiment_lib.fit_batches(experiment, num_devices=2, fixed=set())) == (64, 416, 416)


def test_one_error_names_every_override_the_user_must_change(tiny):
  # The user chose batch_size and eval.batch_size; fewshot.batch_size is the config file's, so
  # it is fitted and not named.
  with pytest.raises(errors.UserError) as error:
    experiment_lib.fit_batches(tiny(), num_devices=8, fixed={'batch_size', 'eval.batch_size'})
  assert str(error.value) == (
      'batch_size=64 gives 8 images per device, not a multiple of moe.group_size=16 images per '
      'routing group; eval.batch_size=400 gives 50 images per device, not a multiple of '
      'moe.group_size=16 images per routing group. Set --config.batch_size=128 '
      '--config.eval.batch_size=512 (any positive multiple of 128 = 8 devices x '
      'moe.group_size=16), or change moe.group_size.')


def test_without_a_command_line_every_misfit_is_refused(tiny):
  with pytest.raises(errors.UserError, match='batch_size=64 does not split over 3 devices.*'
                     'eval.batch_size=64 does not split.*Set --config.batch_size=96 '
                     '--config.eval.batch_size=96 --config.fewshot.batch_size=96'):
    experiment_lib.fit_batches(tiny(**{'moe.group_size': 32, 'eval.batch_size': 64,
                                       'fewshot.batch_size': 64}), num_devices=3)


def test_recorded_defaults_are_committed_for_reporting_code():
  # results/summaries.py compares recorded configs without JAX, from this JSON: it must be what
  # the dataclasses and the registry say now (regenerate it with the line below if not).
  path = os.path.join(REPO, run_outputs.RECORDED_DEFAULTS)
  with open(path, encoding='utf-8') as f:
    committed = json.load(f)
  assert committed == experiment_lib.recorded_defaults(), (
      f'regenerate {path}: python -c "import json; from vmoe.train import experiment; '
      'json.dump(experiment.recorded_defaults(), open(PATH, \'w\'), indent=1, sort_keys=True)"')
  assert committed['router_options']['lossfree_tc']['bias_update_rate'] == 1e-3
  assert committed['keys']['moe.router.capacity_rounding'] == 'round_half_even'


def test_parse_cuts_every_pp_once_and_records_none_of_it(tiny):
  host, device = tiny(), tiny(**{'data.augment_on': 'device'})
  pp, fewshot_pp = device.data.pp_train, device.fewshot.pp     # tiny's pp_eval is its pp_train.
  assert host.pp_splits == {pp: None, fewshot_pp: None}
  assert device.pp_splits == {pp: device_split.split(pp),
                              fewshot_pp: device_split.split(fewshot_pp)}
  # Derived, not a field: the record differs from the host run's in augment_on alone.
  recorded = device.to_dict()
  assert recorded == {**host.to_dict(), 'data': {**host.to_dict()['data'], 'augment_on': 'device'}}


@pytest.mark.parametrize('key', ['data.pp_train', 'data.pp_eval', 'eval.sets', 'fewshot.pp'])
def test_a_tail_the_accelerator_cannot_run_fails_at_parse_naming_its_key(tiny, key):
  tail_without_keep = 'decode(channels=1)|flip_lr'
  change = ({key: {'extra': ('digits', 'test', tail_without_keep)}} if key == 'eval.sets'
            else {key: tail_without_keep})
  tiny(**change)      # The host runs the whole string: nothing to cut.
  named = 'eval.sets.extra' if key == 'eval.sets' else key
  with pytest.raises(errors.UserError, match=f'^{named}: pp .* but not in keep'):
    tiny(**change, **{'data.augment_on': 'device'})
