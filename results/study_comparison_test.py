"""A new set of runs beside a committed study, judged by the study's pooled seed spread."""
from results import study_comparison
from results import summaries
from results.tables_test import write_summary


def test_beside_sets_new_runs_beside_the_studys_seeds(tmp_path):
  study, new = str(tmp_path / 'study'), str(tmp_path / 'new')
  # The study: softmax_tc 40, 42, 44 (mean 42, std 2, 2 df); dense 30 and 32 (mean 31, std 1.41,
  # 1 df). Pooled: var (2 x 4 + 1 x 2) / 3 = 3.33, std 1.826 on 3 df; t_{0.975, 3} = 3.18.
  for seed, value in enumerate([0.40, 0.42, 0.44]):
    write_summary(study, router='softmax_tc', capacity=1.0, seed=seed, upstream_prec1=value)
  for seed, value in enumerate([0.30, 0.32]):
    write_summary(study, router='dense', capacity=None, seed=seed, upstream_prec1=value)
  # 43 vs 42: s.e. 1.826 sqrt(1 + 1/3) = 2.108, t = +0.47; 40 vs 31: s.e. 1.826 sqrt(1 + 1/2) =
  # 2.236, t = +4.02.
  write_summary(new, router='softmax_tc', capacity=1.0, upstream_prec1=0.43)
  write_summary(new, router='dense', capacity=None, upstream_prec1=0.40)
  write_summary(new, router='soft_moe', capacity=1.0, upstream_prec1=0.5)      # Not studied.
  runs, _ = summaries.load_runs(new)
  text, problems = study_comparison.compare(runs, study)
  assert problems == []
  rows = [l for l in text.splitlines() if 'upstream prec@1' in l]
  assert rows == [
      '| Dense ViT (no MoE layers) | upstream prec@1 | 40.00 | 31.00 \u00b1 1.41 (n=2) | '
      '+4.0 s.e. (agrees within 3.18): differs |',
      '| Softmax Token Choice (k=1) | upstream prec@1 | 43.00 | 42.00 \u00b1 2.00 (n=3) | '
      '+0.5 s.e. (agrees within 3.18): agrees |',
      '| Soft MoE (c=1) | upstream prec@1 | 50.00 | not in the study | — |']


def test_beside_names_the_keys_of_a_different_config(tmp_path):
  study, new = str(tmp_path / 'study'), str(tmp_path / 'new')
  write_summary(study, router='softmax_tc', capacity=1.0, resolved_config={'steps': 1, 'seed': 0})
  write_summary(new, router='softmax_tc', capacity=1.0, resolved_config={'steps': 2, 'seed': 5})
  runs, _ = summaries.load_runs(new)
  text, _ = study_comparison.compare(runs, study)
  assert '| config differs: steps | — |' in text


def test_beside_a_missing_study_says_so(tmp_path):
  write_summary(str(tmp_path / 'new'), router='soft_moe', capacity=1.0)
  runs, _ = summaries.load_runs(str(tmp_path / 'new'))
  text, problems = study_comparison.compare(runs, str(tmp_path / 'absent'))
  assert 'No study there' in text and 'not a directory' in problems[0]
