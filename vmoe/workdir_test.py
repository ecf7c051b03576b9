"""Tests of the workdir checks: a path that cannot be written, another run's workdir, an older
trainer's."""
import json

import pytest

from base import errors
from vmoe import run_outputs
from vmoe import workdir


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
