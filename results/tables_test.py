"""Tables and figures from fixture summaries: the right cells, seed statistics, paper numbers."""
import json
import os
import time

from matplotlib import image as mpl_image
import pytest

from results import cost
from results import plots
from results import summaries
from results import tables

from vmoe.run import run_outputs
from vmoe.train import workdir_test

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def write_summary(root, arch='B/32', router='sinkhorn_ec', capacity=2.0, seed=0,
                  softmax_combine=True, dataset='imagenet21k', **fields):
  """A summary.json in the trainer's format under root/<arch>/<router>_c<c>[_nosmc][_s<seed>]."""
  summary = {'config': 'configs/x.py',
             'config_arg': 'router=dense' if capacity is None else f'c={capacity:g}', 'arch': arch,
             'router': router, 'capacity': capacity, 'softmax_combine': softmax_combine,
             'seed': seed, 'dataset': dataset, 'steps': 1000, 'num_params': 1234,
             'upstream_prec1': 0.4, 'fewshot': {'imagenet2012': {'10': 0.6}},
             'fewshot_cv': {'imagenet2012': {'10': 0.58}}, 'train_device_seconds': 3600.0,
             'device_kind': 'cpu', 'num_devices': 1, 'flops_per_step': 1.2e12,
             'compile_seconds': 3.0, 'router_metrics': {},
             'eval_history': [{'step': 100, 'upstream_prec1': 0.2},
                              {'step': 200, 'upstream_prec1': 0.3}]}
  summary.update(fields)
  summary = {k: v for k, v in summary.items()
             if v is not None or k == 'capacity'}   # None: the key is absent (capacity: dense).
  name = (('dense' if capacity is None else f'{router}_c{capacity:g}') +
          ('' if softmax_combine else '_nosmc') +
          (f'_s{seed}' if seed else ''))
  path = os.path.join(root, arch.replace('/', '').lower(), name, run_outputs.SUMMARY_FILE)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(summary, f)
  return path


def markdown_rows(text: str) -> dict[str, dict[str, str]]:
  """{row title: {column title: cell}} of a table written by to_markdown."""
  lines = [l for l in text.splitlines() if l.startswith('| ')]
  split = lambda l: [c.strip() for c in l.strip('|').split(' | ')]
  header = split(lines[0])
  return {cells[0]: dict(zip(header, cells)) for cells in map(split, lines[2:])}


@pytest.fixture
def runs_dir(tmp_path):
  root = str(tmp_path / 'runs')
  # Two seeds: prec@1 0.40 and 0.44, 10-shot 0.60 and 0.62, 1 h and 2 h; the second lacks CV.
  write_summary(root, upstream_prec1=0.40, train_device_seconds=3600.0)
  write_summary(root, seed=1, upstream_prec1=0.44, fewshot={'imagenet2012': {'10': 0.62}},
                fewshot_cv=None, train_device_seconds=7200.0)
  write_summary(root, router='softmax_tc', capacity=1.0, upstream_prec1=0.3, fewshot_cv=None,
                eval_history=None)
  for smc in (True, False):
    for k in (1.0, 2.0):
      write_summary(root, router='sinkhorn_tc', capacity=k, softmax_combine=smc,
                    upstream_prec1=0.35 if smc else 0.34)
  write_summary(root, arch='L/16', router='sparsity_ec', capacity=1.0)
  write_summary(root, arch='XS/7', router='soft_moe', capacity=1.0, dataset='fashion_mnist',
                fewshot={'digits': {'10': 0.9}, 'fashion_mnist': {'10': 0.7}}, fewshot_cv=None)
  return root


def test_cells_are_seed_statistics_beside_the_paper(runs_dir):
  runs, problems = summaries.load_runs(runs_dir)
  assert len(runs) == 9 and not problems
  tabs, _ = tables.build_tables(runs)
  by_slug = {t.slug: t for t in tabs}
  assert sorted(by_slug) == ['b32_imagenet21k', 'l16_imagenet21k', 'xs7_fashion_mnist']
  rows = markdown_rows(tables.to_markdown(by_slug['b32_imagenet21k']))
  row = rows['Sinkhorn Expert Choice (c=2)']
  assert row['Seeds'] == '2'
  # mean(40, 44) = 42.00; sample std sqrt((2^2 + 2^2) / 1) = 2.83. Paper Table 1: 44.30 %.
  assert row['Upstream prec@1 (%)'] == '42.00 \u00b1 2.83'
  assert row['Paper JFT-300M prec@1 (%)'] == '44.30'
  # 10-shot: mean(60, 62) = 61.00, std sqrt(2) = 1.41; paper Table 4: 66.52 %.
  assert row['10-shot imagenet2012 (%)'] == '61.00 \u00b1 1.41'
  assert row['Paper ImageNet 10-shot (%)'] == '66.52'
  # Only seed 0 has a CV number: 58.00 from one of the row's two seeds.
  assert row['10-shot imagenet2012, CV l2 (%)'] == '58.00 (n=1)'
  # 1 h and 2 h: 1.5 +- 0.707; paper Table 1: 41.21 TPUv3-days.
  assert row['Wall-clock device-hours'] == '1.5 \u00b1 0.707'
  assert row['Paper TPUv3-days'] == '41.21'
  assert row['FLOPs/step'] == '1.2e+12' and row['Devices'] == 'cpu x1'
  assert row['Commit'] == 'n/a'    # Neither the summary nor a provenance file records one.
  single = rows['Softmax Token Choice (k=1)']
  assert single['Upstream prec@1 (%)'] == '30.00' and single['Paper JFT-300M prec@1 (%)'] == '41.23'
  assert single['10-shot imagenet2012, CV l2 (%)'] == 'n/a'
  # The ablation sits after its router, with no paper number (the paper only plots it).
  ablation = rows['Sinkhorn Token Choice (k=1), no softmax combine']
  assert ablation['Upstream prec@1 (%)'] == '34.00' and ablation['Paper JFT-300M prec@1 (%)'] == ''
  assert list(rows)[:4] == ['**capacity c = 1 (k = 1 for token choice)**',
                            'Softmax Token Choice (k=1)', 'Sinkhorn Token Choice (k=1)',
                            'Sinkhorn Token Choice (k=1), no softmax combine']
  assert list(rows)[-1] == 'Sinkhorn Expert Choice (c=2)'
  notes = by_slug['b32_imagenet21k'].notes
  assert any(n.startswith('`fewshot_cv` missing') and 'softmax_tc_c1' in n for n in notes)


def test_paper_dash_and_no_paper_columns_for_other_archs(runs_dir):
  tabs, _ = tables.build_tables(summaries.load_runs(runs_dir)[0])
  by_slug = {t.slug: t for t in tabs}
  l16 = markdown_rows(tables.to_markdown(by_slug['l16_imagenet21k']))
  assert l16['Sparsity-constrained Expert Choice (c=1)']['Paper JFT-300M prec@1 (%)'] == '-'
  tiny = by_slug['xs7_fashion_mnist']
  assert not any(h.startswith('Paper') for h in tiny.header)
  assert '10-shot digits (%)' in tiny.header and '10-shot fashion_mnist (%)' in tiny.header
  assert markdown_rows(tables.to_markdown(tiny))['Soft MoE (c=1)']['10-shot digits (%)'] == '90.00'


def test_latex_is_booktabs_with_escapes(runs_dir):
  tabs, _ = tables.build_tables(summaries.load_runs(runs_dir)[0])
  tex = tables.to_latex(next(t for t in tabs if t.slug == 'b32_imagenet21k'))
  assert tex.count(r'\midrule') == 2 and r'\toprule' in tex and r'\bottomrule' in tex
  assert r'42.00 $\pm$ 2.83 & 44.30' in tex
  assert r'Upstream prec@1 (\%)' in tex and r'imagenet2012, CV l2' in tex
  assert tables.latex_escape('a_b & 5% #1') == r'a\_b \& 5\% \#1'


def test_broken_and_duplicate_summaries_are_reported(tmp_path):
  root = str(tmp_path)
  old = write_summary(root, upstream_prec1=0.1)
  newer = os.path.join(root, 'copy', run_outputs.SUMMARY_FILE)
  os.makedirs(os.path.dirname(newer))
  with open(old, encoding='utf-8') as f:
    payload = json.load(f)
  payload['upstream_prec1'] = 0.2
  with open(newer, 'w', encoding='utf-8') as f:
    json.dump(payload, f)
  os.utime(newer, (time.time() + 10, time.time() + 10))
  os.makedirs(os.path.join(root, 'broken'))
  with open(os.path.join(root, 'broken', run_outputs.SUMMARY_FILE), 'w', encoding='utf-8') as f:
    f.write('{"arch": ')
  runs, problems = summaries.load_runs(root)
  assert len(runs) == 2 and len(problems) == 1 and 'unreadable' in problems[0]
  grouped, dup = summaries.group_seeds(runs)
  (seeds,) = grouped.values()
  assert [r.path for r in seeds] == [newer] and 'using the newer one' in dup[0]


def test_runs_whose_configs_differ_beyond_the_seed_are_kept_apart(tmp_path):
  root = str(tmp_path)
  resolved = lambda seed, lr: {'seed': seed, 'schedule': {'peak_lr': lr, 'warmup_steps': 10}}
  first = write_summary(root, seed=0, resolved_config=resolved(0, 1e-3))
  write_summary(root, seed=1, resolved_config=resolved(1, 1e-3))          # Only the seed differs.
  other = write_summary(root, seed=2, resolved_config=resolved(2, 3e-3))   # Another recipe.
  write_summary(root, seed=3)                      # Written before resolved_config: no check.
  runs, problems = summaries.load_runs(root)
  assert len(runs) == 4 and not problems
  grouped, problems = summaries.group_seeds(runs)
  (row,) = grouped.values()
  assert [r.seed for r in row] == [0, 1, 3]
  assert problems == [f'{other}: same row as {first} but its config differs in schedule.peak_lr; '
                      'kept out of that row (give it its own sweep root, or rerun it with the '
                      "row's config)."]
  tabs, table_problems = tables.build_tables(runs)
  assert table_problems == problems and tabs


def test_a_key_added_between_two_seeds_keeps_them_in_one_row(tiny_experiment, tmp_path):
  # Seed 0 was recorded before wandb.mode existed; seed 1 records its default, seed 2 another
  # model.dropout_rate: only seed 2 differs from the row.
  config = tiny_experiment('router=softmax_ec').to_dict()
  root = str(tmp_path)
  first = write_summary(root, seed=0, resolved_config=workdir_test.recorded_before(config,
                                                                                 'wandb.mode'))
  write_summary(root, seed=1, resolved_config={**config, 'seed': 1})
  other = write_summary(root, seed=2, resolved_config={
      **config, 'seed': 2, 'model': {**config['model'], 'dropout_rate': 0.1}})
  runs, _ = summaries.load_runs(root)
  grouped, problems = summaries.group_seeds(runs)
  (row,) = grouped.values()
  assert [r.seed for r in row] == [0, 1]
  assert problems == [f'{other}: same row as {first} but its config differs in '
                      "model.dropout_rate; kept out of that row (give it its own sweep root, or "
                      "rerun it with the row's config)."]


def test_cli_writes_tables_and_valid_figures(runs_dir, tmp_path, capsys):
  out = str(tmp_path / 'out')
  no_bench = str(tmp_path / 'no_train_step.json')   # Wall-clock cost only: hermetic.
  assert tables.main(['--runs', runs_dir, '--out', out, '--step-times', no_bench]) == 0
  files = sorted(os.listdir(out))
  for slug in ('b32_imagenet21k', 'l16_imagenet21k', 'xs7_fashion_mnist'):
    assert f'{slug}.md' in files and f'{slug}.tex' in files
  figures = [f for f in files if f.endswith('.png')]
  assert sorted(figures) == [
      'fig1_upstream_fashion_mnist.png', 'fig1_upstream_imagenet21k.png',
      'fig2_10shot_digits.png', 'fig2_10shot_fashion_mnist.png', 'fig2_10shot_imagenet2012.png',
      'fig3_softmax_combine_b32_imagenet21k.png', 'paper_fig1_jft.png',
      'paper_fig2_imagenet_10shot.png']
  for name in figures:
    with open(os.path.join(out, name), 'rb') as f:
      assert f.read(8) == PNG_MAGIC
    height, width, _ = mpl_image.imread(os.path.join(out, name)).shape
    assert height > 100 and width > 100
  assert not [f for f in files if f.endswith('.tmp')]    # Atomic writes leave no temporaries.
  with open(os.path.join(out, 'tables.md'), encoding='utf-8') as f:
    index = f.read()
  assert index.count('## ') == 3 and '](fig3_softmax_combine_b32_imagenet21k.png)' in index
  assert '9 runs -> 3 tables, 8 figures' in capsys.readouterr().out
  # B/32 c=1 has both token choice routers: claim 2, sinkhorn_tc 35.00 vs softmax_tc 30.00.
  with open(os.path.join(out, 'claims.md'), encoding='utf-8') as f:
    assert '| 2. Sinkhorn TC > Softmax TC | 1 | upstream prec@1 | +5.00 | ' in f.read()


def test_cli_without_runs_fails_with_a_hint(tmp_path, capsys):
  assert tables.main(['--runs', str(tmp_path), '--out', str(tmp_path / 'out')]) == 1
  assert 'make sweep' in capsys.readouterr().err
  with pytest.raises(FileNotFoundError, match='not a directory'):
    tables.main(['--runs', str(tmp_path / 'nowhere'), '--out', str(tmp_path)])


def test_controlled_cost_column_sits_beside_the_wall_clock(tmp_path):
  from results import cost_test  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / 'runs')
  # Two seeds of one XS/7 run, 1 h and 3 h of wall-clock; the benchmark's median step is 22 ms.
  for seed, seconds in ((0, 3600.0), (1, 10800.0)):
    write_summary(root, arch='XS/7', router='softmax_tc', capacity=1.0, seed=seed,
                  dataset='fashion_mnist', steps=1500, train_device_seconds=seconds)
  step_times = cost.load_step_times(cost_test.write_step_times(tmp_path / 'steps.json'))
  tabs, _ = tables.build_tables(summaries.load_runs(root)[0], step_times.controlled_hours)
  row = markdown_rows(tables.to_markdown(tabs[0]))['Softmax Token Choice (k=1)']
  assert row['Wall-clock device-hours'] == '2 \u00b1 1.41'
  # 22 ms x 1500 steps = 0.00917 h for both seeds: no spread shown.
  assert row['Controlled device-hours'] == '0.00917'
  # A table the benchmark does not cover has no controlled column.
  write_summary(str(tmp_path / 'b32'), router='softmax_tc', capacity=1.0)
  tabs, _ = tables.build_tables(summaries.load_runs(str(tmp_path / 'b32'))[0],
                                step_times.controlled_hours)
  assert 'Controlled device-hours' not in tabs[0].header


def test_the_dense_baseline_opens_the_table_and_draws_a_reference_line(tmp_path):
  root = str(tmp_path / 'runs')
  write_summary(root, router='dense', capacity=None, upstream_prec1=0.30)
  write_summary(root, router='dense', capacity=None, seed=1, upstream_prec1=0.34)
  write_summary(root, router='soft_moe', capacity=1.0, upstream_prec1=0.40)
  runs, _ = summaries.load_runs(root)
  (table,), problems = tables.build_tables(runs)
  assert problems == []
  assert [title for title, _ in table.groups] == [
      'dense baseline: the same ViT with a dense MLP in every block',
      'capacity c = 1 (k = 1 for token choice)']
  dense_row = table.groups[0][1][0]
  assert dense_row[:3] == ['Dense ViT (no MoE layers)', '2', '32.00 \u00b1 2.83']
  assert dense_row[3] == ''      # The paper tabulates no dense model.
  rows, _ = summaries.group_seeds(runs)
  points = plots.run_points(rows, lambda r: r.get('upstream_prec1'))
  dense = next(p for p in points if p.router == 'dense')
  assert (dense.capacity, dense.y, round(dense.y_err, 2)) == (None, 32.0, 2.83)
  out = str(tmp_path / 'out')
  for path in plots.write_figures(runs, out):
    with open(path, 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_the_imagenet_rung_sits_beside_vmoes_published_cell_each_number_on_its_split(tmp_path):
  # The published cell's run (summary capacity 1.05, k = 2) gets V-MoE's 76.8 / 73.1 / 74.4 /
  # 59.2 beside it; a grid row gets none. Every column names its split.
  root = str(tmp_path / 'runs')
  for seed, upstream in ((0, 0.77), (1, 0.76)):
    write_summary(root, arch='VMoE-S/32', router='softmax_tc', capacity=1.05, seed=seed,
                  dataset='imagenet2012', fewshot=None, fewshot_cv=None, upstream_prec1=upstream,
                  eval_sets={'test': 0.73, 'imagenet_v2': 0.59})
  write_summary(root, arch='VMoE-S/32', router='softmax_ec', capacity=1.0,
                dataset='imagenet2012', fewshot=None, fewshot_cv=None, eval_sets={'test': 0.7})
  table, = tables.build_tables(summaries.load_runs(root)[0])[0]
  rows = markdown_rows(tables.to_markdown(table))
  cell = rows["V-MoE's Softmax Token Choice (k=2, c=1.05)"]
  # Upstream: mean of 0.77 and 0.76 = 76.50 %, sample std 0.707 points.
  assert cell['prec@1 on imagenet2012 train[99%:] (%)'] == '76.50 \u00b1 0.71'
  assert cell['V-MoE published, imagenet2012 train[99%:] (%)'] == '76.80'
  assert cell['V-MoE published, imagenet2012 validation (%)'] == '73.10'
  assert cell['prec@1 on imagenet_v2 test (%)'] == '59.00 \u00b1 0.00'   # Both seeds 0.59.
  assert cell['V-MoE published, imagenet_v2 test (%)'] == '59.20'
  other = rows['Softmax Expert Choice (c=1)']
  assert other['V-MoE published, imagenet2012 validation (%)'] == ''
  assert other['prec@1 on imagenet_v2 test (%)'].startswith('n/a')
  assert 'V-MoE published: Riquelme et al. (2021)' in tables.caption(table)


def test_a_users_router_is_named_by_the_title_its_runs_recorded(tmp_path):
  root = str(tmp_path / 'runs')
  write_summary(root, router='ema_tc', capacity=2.0, router_title='EMA-balanced Token Choice',
                router_allocation='token_choice')
  write_summary(root, router='base', capacity=1.0)        # A summary from before the fields.
  runs, _ = summaries.load_runs(root)
  (table,), problems = tables.build_tables(runs)
  assert problems == []
  assert sorted(row[0] for _, rows in table.groups for row in rows) == [
      'BASE layers (c=1)', 'EMA-balanced Token Choice (k=2)']
  rows, _ = summaries.group_seeds(runs)
  points = plots.run_points(rows, lambda r: r.get('upstream_prec1'))
  assert {p.router: p.title for p in points} == {'ema_tc': 'EMA-balanced Token Choice',
                                                 'base': None}
