"""A provenance file fills in the commit of summaries that lack one; a summary's own wins."""
import json
import os

import pytest

from base import errors
from results import provenance
from results import summaries
from results import tables
from results.tables_test import markdown_rows
from results.tables_test import write_summary


def test_the_file_covers_its_directories_and_a_recorded_commit_wins(tmp_path):
  study = tmp_path / 'study'
  old = write_summary(str(study / 'runs'), arch='XS/7', router='soft_moe', capacity=1.0)
  new = write_summary(str(study / 'reruns'), arch='XS/7', router='soft_moe', capacity=2.0,
                      commit='b' * 40)
  elsewhere = write_summary(str(tmp_path / 'other'), arch='XS/7', router='soft_moe', capacity=1.0)
  (study / provenance.FILE).write_text(json.dumps(
      {'runs': {'commit': 'a' * 40}, 'reruns': {'commit': 'c' * 40}}))
  read = lambda path: summaries.Run(path, json.load(open(path, encoding='utf-8')))
  assert provenance.commit(read(old)) == 'a' * 40
  assert provenance.commit(read(new)) == 'b' * 40          # Recorded by the run itself.
  assert provenance.commit(read(elsewhere)) is None
  assert provenance.short(provenance.commit(read(old))) == 'aaaaaaa'
  assert provenance.short(None) == 'n/a'
  runs, _ = summaries.load_runs(str(study))
  [table], _ = tables.build_tables(runs)
  rows = markdown_rows(tables.to_markdown(table))
  assert rows['Soft MoE (c=1)']['Commit'] == 'aaaaaaa'
  assert rows['Soft MoE (c=2)']['Commit'] == 'bbbbbbb'


def test_the_committed_study_has_a_commit_for_every_run():
  """Every committed summary under results/tiny is covered, by itself or by the file."""
  root = os.path.join(summaries.REPO, 'results', 'tiny')
  for runs_dir in ('runs', 'base_c2_fixed/runs', 'lossfree_c2_fixed/runs'):
    runs, problems = summaries.load_runs(os.path.join(root, runs_dir))
    assert runs and not problems
    assert all(provenance.commit(r) for r in runs), runs_dir


def test_a_malformed_file_is_one_clear_error(tmp_path):
  path = write_summary(str(tmp_path / 'runs'))
  (tmp_path / provenance.FILE).write_text('{"runs": {"no commit": 1}}')
  with pytest.raises(errors.UserError, match='provenance.json is not an object'):
    provenance.record(path)
