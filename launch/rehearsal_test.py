"""Tests of the dress rehearsal: its memory arithmetic at the paper's shapes, and every stage run
on the runlocal model (mu/32) and tiny generated images."""
import json
import os

import pytest

from base import errors
from launch import rehearsal

GIB = 2 ** 30


@pytest.fixture(scope='module')
def estimates():
  return {e: rehearsal.estimate(rehearsal.SCALES['paper'], e) for e in (8, 32)}


def test_estimate_is_the_hand_worked_count(estimates):
  # B/32, 21,843 classes, E = 8: patch embedding 32 x 32 x 3 x 768 + 768 = 2,360,064; class token
  # 768; position embeddings 50 x 768 = 38,400; 12 x (2 layer norms 3,072 + attention
  # 4 x (768 x 768 + 768) = 2,362,368) = 28,385,280; 6 dense MLPs 6 x (2 x 768 x 3,072 + 3,072
  # + 768) = 28,334,592; final layer norm 1,536; head 768 x 21,843 + 21,843 = 16,797,267: in all
  # 75,917,907. 6 MoE layers x 8 experts x (4,722,432 + 768 router weights) = 226,713,600.
  params = 75_917_907 + 226_713_600
  e8 = estimates[8]
  assert e8['num_params'] == params == 302_631_507
  assert e8['param_bytes'] == 4 * params
  # Adam's two float32 moments, and its step counts (a few int32 scalars).
  assert 8 * params <= e8['adam_bytes'] < 8 * params + 64
  # On 8 devices with one expert each: the experts' weights (6 x 8 x 4,722,432) once, every other
  # parameter, the routers' 6 x 8 x 768 included, 8 times.
  assert e8['param_bytes_held'] == 4 * (8 * (75_917_907 + 36_864) + 226_676_736)
  assert e8['array_bytes'] == (e8['param_bytes_held'] + e8['adam_bytes_held'] +
                               e8['param_bytes_held'] + e8['param_bytes'] + e8['adam_bytes'])
  assert e8['estimate_bytes'] == e8['array_bytes'] + rehearsal.ALLOWANCE_BYTES


def test_the_paper_experts_are_refused_on_24_gib(estimates):
  # E = 32: 982,772,307 parameters, 28 bytes each once, 16 more per extra copy of the replicated.
  assert estimates[32]['num_params'] == 75_917_907 + 6 * 32 * 4_723_200
  with pytest.raises(errors.UserError, match=r'E=32 experts need about [0-9.]+ GiB .* 24\.0 GiB'):
    rehearsal.check_fits(estimates[32], 24 * GIB)
  rehearsal.check_fits(estimates[8], 24 * GIB)


def test_overrides_keep_the_paper_shapes(tmp_path):
  changes = rehearsal.overrides(rehearsal.SCALES['paper'], 16, str(tmp_path))
  keys = [c.key for c in changes]
  assert len(keys) == len(set(keys)) and all(c.reason for c in changes)
  assert not {k for k in keys if k.startswith(('model.', 'mesh', 'mixup', 'data.pp'))}
  assert 'model.variant' in [c.key for c in rehearsal.overrides(rehearsal.SCALES['runlocal'], 16,
                                                                str(tmp_path))]


def test_runlocal_rehearsal(tmp_path):
  report = rehearsal.run(str(tmp_path), 'runlocal', experts=16)
  with open(tmp_path / rehearsal.REPORT_FILE, encoding='utf-8') as f:
    assert json.load(f) == json.loads(json.dumps(report))
  assert report['mesh'] == {'data': 1, 'expert': 8} and report['num_devices'] == 8
  # Stopped by the SIGTERM after step 2, before step 4; the new process resumed from there.
  assert rehearsal.STOP_AFTER <= report['stopped_after_step'] < rehearsal.NUM_STEPS
  assert 0 <= report['imagenet2012_10shot'] <= 1
  assert report['checkpoint_bytes'] > 0    # Compressed by orbax: no fixed bytes per parameter.
  assert list(report['stage_seconds']) == ['estimate', 'generate', 'build imagenet21k/fall11',
                                           'build imagenet2012', 'train', 'resume']
  if os.path.isdir('/proc/self'):
    assert report['peak_bytes'] == max(report['stage_peak_bytes'].values()) > 0
  with open(report['summary'], encoding='utf-8') as f:
    summary = json.load(f)
  assert [h['step'] for h in summary['eval_history']] == [rehearsal.NUM_STEPS]
  assert summary['resolved_config']['model']['num_classes'] == 21_843
  assert summary['resolved_config']['data']['name'] == 'imagenet21k'
  assert rehearsal.describe(report).startswith('Rehearsal passed')
