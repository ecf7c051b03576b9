"""The paper's claims from fixture summaries: margins, verdicts and their strength."""
import pytest

from results import claims
from results import summaries
from results.tables_test import write_summary

# One seed each (upstream prec@1 = 10-shot accuracy): TC 40, 42; EC 44, 46, 45; Soft MoE 50.
ONE_SEED = {'softmax_tc': 0.40, 'sinkhorn_tc': 0.42, 'softmax_ec': 0.44, 'sinkhorn_ec': 0.46,
            'sparsity_ec': 0.45, 'soft_moe': 0.50}


def verdicts_of(root):
  runs, problems = summaries.load_runs(root)
  assert not problems
  rows, _ = summaries.group_seeds(runs)
  return {(v.claim, v.metric): v for v in claims.check(rows)}, rows


def write_grid(root, values, seed=0):
  for router, value in values.items():
    write_summary(root, router=router, capacity=1.0, seed=seed, upstream_prec1=value,
                  fewshot={'imagenet2012': {'10': value}})


def test_margins_are_hand_worked_and_single_seeds_have_no_spread(tmp_path):
  write_grid(str(tmp_path), ONE_SEED)
  # The softmax-combine ablation is not a row of any claim.
  write_summary(str(tmp_path), router='sinkhorn_tc', capacity=1.0, softmax_combine=False,
                upstream_prec1=0.99)
  verdicts, rows = verdicts_of(str(tmp_path))
  for metric in ('upstream prec@1', '10-shot imagenet2012'):
    means = verdicts['1. Expert Choice > Token Choice (means)', metric]
    assert means.margin == pytest.approx(4.0)       # (44 + 46 + 45) / 3 - (40 + 42) / 2 = 45 - 41.
    worst = verdicts['1. Expert Choice > Token Choice (worst EC vs best TC)', metric]
    assert worst.margin == pytest.approx(2.0)       # softmax_ec 44 - sinkhorn_tc 42.
    assert verdicts['2. Sinkhorn TC > Softmax TC', metric].margin == pytest.approx(2.0)
    soft = verdicts['3. Soft MoE > every other router', metric]
    assert soft.margin == pytest.approx(4.0) and 'sinkhorn_ec' in soft.detail   # 50 - 46.
    assert all(v.holds and v.strength == 'n=1, spread unknown'
               for v in (means, worst, soft))
  text = claims.to_markdown(list(verdicts.values()), claims.seeds_per_table(rows))
  assert '## B/32 on imagenet21k (seeds per row: 1)' in text and '| +4.00 | yes |' in text


def test_seed_spread_decides_the_strength(tmp_path):
  # Two seeds: softmax_tc 40, 42 (mean 41) and sinkhorn_tc 42, 44 (mean 43); each std
  # sqrt(2) = 1.41 points, so the difference's s.e. is sqrt(2 * 1.41^2 / 2) = 1.41 and the
  # 2.00 margin is within 2 s.e. = 2.83.
  write_grid(str(tmp_path), {'softmax_tc': 0.40, 'sinkhorn_tc': 0.42})
  write_grid(str(tmp_path), {'softmax_tc': 0.42, 'sinkhorn_tc': 0.44}, seed=1)
  verdicts, _ = verdicts_of(str(tmp_path))
  claim = verdicts['2. Sinkhorn TC > Softmax TC', 'upstream prec@1']
  assert claim.margin == pytest.approx(2.0) and claim.stderr == pytest.approx(1.414, abs=1e-3)
  assert claim.strength == 'within noise (<= 2 s.e.)'
  assert not any(c.startswith('1.') or c.startswith('3.') for c, _ in verdicts)


def test_no_checkable_claim_fails_clearly(tmp_path, capsys):
  write_grid(str(tmp_path), {'soft_moe': 0.5})
  assert claims.main(['--runs', str(tmp_path), '--out', str(tmp_path / 'c.md')]) == 1
  assert 'No claim can be checked' in capsys.readouterr().err
