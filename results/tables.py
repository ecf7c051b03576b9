"""The paper's appendix tables rebuilt from runs' summary.json files, beside the paper's numbers.

  python -m results.tables --runs workdirs --out results/out

searches --runs recursively for summary.json files and writes, for each (arch, upstream dataset),
OUT/<arch>_<dataset>.md and .tex, OUT/tables.md (all of them, with the figures), OUT/claims.md
(the paper's claims checked, results/claims.py), the figures of results/plots.py (unless
--no-figures), and the pages of OUT/prose's templates (results/study_prose.py). Every file is
written atomically.

Layout (the paper's Tables 1-6 merged): one row per router and capacity, the c = 1 block then the
c = 2 block, routers in the paper's order, the softmax-combine ablation after its router. Columns:
upstream precision@1, few-shot accuracies (best l2 and CV l2), wall-clock training device-hours,
the controlled device-hours of results/cost.py (one benchmark's step time x steps: comparable
across runs made at different times) where --step-times covers the runs, FLOPs per step, devices,
the commit (the summary's, else results/provenance.py's record);
with the paper's JFT-300M precision@1, ImageNet 10-shot accuracy and TPUv3-days beside ours for the
paper's architectures. With several seeds a cell is mean +- sample std.
"""
import argparse
import dataclasses
import os
import sys
from typing import Callable, Sequence

from base import atomic
from base import errors
from base.stats import Stat
from results import claims
from results import cost
from results import paper
from results import provenance
from results import study_comparison
from results import study_prose
from results import summaries
from results import superseded
from results.summaries import Run
from vmoe.run import run_outputs

PAPER_10SHOT_DATASET = 'imagenet2012'    # The paper's downstream task: ImageNet-1k 10-shot.
PM = paper.PM


@dataclasses.dataclass(frozen=True)
class Column:
  """One measured column: value(run) per seed, shown as `fmt` after multiplying by `scale`;
  `paper_value` gives the paper's number to place in the column right after it."""
  title: str
  value: Callable[[Run], float | None]
  fmt: str
  missing: str                        # The summary key to name when value(run) is None.
  scale: float = 1.0
  spread: bool = True                 # False: deterministic across seeds (FLOPs), no +- std.
  paper_value: Callable[[paper.PaperCell], float | None] | None = None
  paper_title: str = ''


@dataclasses.dataclass(frozen=True)
class Table:
  """A rendered-agnostic table: header, row groups (one per capacity), and notes."""
  arch: str
  dataset: str
  header: list[str]
  groups: list[tuple[str, list[list[str]]]]    # (group title, rows of cells)
  notes: list[str]

  @property
  def slug(self) -> str:
    """'b32_imagenet21k': the file name stem."""
    return f'{self.arch.replace("/", "").lower()}_{self.dataset}'


def columns_for(arch: str, rows: Sequence[list[Run]],
                controlled: Callable[[Run], float | None] | None = None) -> list[Column]:
  """The measured columns of one table; paper columns only for the paper's architectures;
  the controlled cost (results/cost.py) where `controlled` prices some run of the table."""
  in_paper = arch in paper.ARCHS
  percent = dict(fmt='.2f', scale=100.0)
  if arch == paper.RUNG_ARCH:
    return _rung_columns(rows, percent) + columns_for('', rows, controlled)[1:]
  columns = [Column('Upstream prec@1 (%)', lambda r: r.get('upstream_prec1'),
                    missing='upstream_prec1', **percent,
                    paper_value=(lambda p: p.jft_prec1) if in_paper else None,
                    paper_title='Paper JFT-300M prec@1 (%)')]
  for dataset, shots in summaries.fewshot_columns(r for runs in rows for r in runs):
    paper_10shot = in_paper and (dataset, shots) == (PAPER_10SHOT_DATASET, 10)
    columns.append(Column(f'{shots}-shot {dataset} (%)',
                          lambda r, d=dataset, k=shots: r.get('fewshot', d, str(k)),
                          missing='fewshot', **percent,
                          paper_value=(lambda p: p.imagenet_10shot) if paper_10shot else None,
                          paper_title='Paper ImageNet 10-shot (%)'))
    columns.append(Column(f'{shots}-shot {dataset}, CV l2 (%)',
                          lambda r, d=dataset, k=shots: r.get('fewshot_cv', d, str(k)),
                          missing='fewshot_cv', **percent))
  columns.append(Column('Wall-clock device-hours', Run.device_hours, fmt='.3g',
                        missing='train_device_seconds',
                        paper_value=(lambda p: p.tpuv3_days) if in_paper else None,
                        paper_title='Paper TPUv3-days'))
  if controlled and any(controlled(r) is not None for runs in rows for r in runs):
    columns.append(Column('Controlled device-hours', controlled, fmt='.3g',
                          missing='a bench/train_step.py row (results/cost.py)', spread=False))
  columns.append(Column('FLOPs/step', lambda r: r.get('flops_per_step'), fmt='.3g',
                        missing='flops_per_step', spread=False))
  return columns


def _rung_columns(rows: Sequence[list[Run]], percent: dict) -> list[Column]:
  """The ImageNet-1k rung's precision@1 columns, upstream then each eval set the runs have, each
  titled with its split and beside V-MoE's published number (paper.RUNG_PUBLISHED)."""
  names = sorted({name for runs in rows for r in runs for name in (r.get('eval_sets') or {})})
  columns = []
  for name in ['upstream'] + names:
    split = paper.RUNG_SPLITS.get(name, name)
    value = ((lambda r: r.get('upstream_prec1')) if name == 'upstream' else
             (lambda r, n=name: r.get('eval_sets', n)))
    columns.append(Column(f'prec@1 on {split} (%)', value,
                          missing='upstream_prec1' if name == 'upstream' else 'eval_sets',
                          **percent, paper_value=lambda p, n=name: p.prec1.get(n),
                          paper_title=f'V-MoE published, {split} (%)'))
  return columns


def format_stat(s: Stat | None, fmt: str, scale: float, row_n: int,
                spread: bool = True) -> str:
  """'45.10 +- 0.23' (several seeds), '45.10' (one), '... (n=2)' when some seeds lack it."""
  if s is None:
    return 'n/a'
  text = format(s.mean * scale, fmt)
  if s.n > 1 and spread:
    text += f' {PM} {format(s.std * scale, fmt)}'
  if s.n < row_n:
    text += f' (n={s.n})'
  return text


def group_title(capacity: float | None) -> str:
  """The bold row that opens a block of the table."""
  if capacity is None:
    return 'dense baseline: the same ViT with a dense MLP in every block'
  return f'capacity c = {capacity:g} (k = {capacity:g} for token choice)'


def build_table(arch: str, dataset: str, rows: dict[tuple, list[Run]],
                controlled: Callable[[Run], float | None] | None = None,
                superseded_rows: dict | None = None) -> Table:
  """The table of one (arch, dataset) from {key: seeds' runs}; the rows superseded_rows names
  ({(router, c): note}, results/superseded.py) carry its mark and a note."""
  keys = sorted(rows, key=paper.row_order)
  columns = columns_for(arch, list(rows.values()), controlled)
  header = ['Router', 'Seeds']
  for column in columns:
    header.append(column.title)
    if column.paper_value:
      header.append(column.paper_title)
  header += ['Devices', 'Commit']
  groups: dict[float | None, list[list[str]]] = {}
  missing: dict[str, list[str]] = {}
  for key in keys:
    runs = rows[key]
    _, _, router, capacity, softmax_combine = key
    replaced = (superseded_rows or {}).get((router, capacity)) if softmax_combine else None
    cells = [runs[0].title + (f' {superseded.MARK}' if replaced else ''), str(len(runs))]
    if replaced:
      missing.setdefault(f'{superseded.MARK} {runs[0].title} is superseded: {replaced}', [])
    cell = paper.lookup(arch, router, capacity) if softmax_combine else None
    for column in columns:
      cells.append(format_stat(summaries.stat_of(runs, column.value), column.fmt, column.scale,
                               len(runs), column.spread))
      for run in runs:
        if column.value(run) is None:
          missing.setdefault(column.missing, []).append(run.path)
      if column.paper_value:
        value = None if cell is None else column.paper_value(cell)
        cells.append('' if cell is None else ('-' if value is None else format(value, '.2f')))
    cells.append(', '.join(sorted({r.devices() or 'n/a' for r in runs})))
    cells.append(', '.join(sorted({provenance.short(provenance.commit(r)) for r in runs})))
    groups.setdefault(capacity, []).append(cells)
  notes = [key if not paths else
           f'`{key}` missing (shown as n/a) in: {", ".join(sorted(set(paths)))}'
           for key, paths in sorted(missing.items())]
  return Table(arch, dataset, header,
               [(group_title(c), g) for c, g in groups.items()], notes)


def caption(table: Table) -> str:
  """What the numbers are, and where the paper's come from."""
  text = (f'{table.arch} pre-trained on {table.dataset}: mean {PM} sample std over seeds. '
          'Few-shot: best l2 on the test set (the literature\'s convention) and the l2 chosen '
          'by cross-validation on the few-shot training set.')
  if table.arch == paper.RUNG_ARCH:
    text += (' V-MoE published: Riquelme et al. (2021), google-research/vmoe '
             'vmoe_s32_last2_ilsvrc2012_randaug_light1.py, mean of 3 seeds, on the split each '
             'column names.')
  if table.arch in paper.ARCHS:
    upstream, fewshot = paper.SOURCES[table.arch]
    text += (f' Paper: Liu et al. (2024) {upstream} (JFT-300M pre-training, precision@1 and '
             f'TPUv3-days) and {fewshot} (ImageNet 10-shot); "-" is the paper\'s missing cell.')
  return text


def to_markdown(table: Table) -> str:
  """A GitHub Markdown table; each capacity block opens with a bold row."""
  line = lambda cells: '| ' + ' | '.join(c.replace('|', '\\|') for c in cells) + ' |'
  out = [f'## {table.arch} on {table.dataset}', '', caption(table), '', line(table.header),
         line(['---'] * len(table.header))]
  for title, rows in table.groups:
    out.append(line([f'**{title}**'] + [''] * (len(table.header) - 1)))
    out.extend(line(row) for row in rows)
  out += [''] + [f'- {note}' for note in table.notes]
  return '\n'.join(out).rstrip() + '\n'


def latex_escape(text: str) -> str:
  """Escapes LaTeX specials; '+-' becomes $\\pm$."""
  for char, escaped in (('\\', r'\textbackslash{}'), ('&', r'\&'), ('%', r'\%'), ('_', r'\_'),
                        ('#', r'\#'), ('$', r'\$'), (PM, r'$\pm$')):
    text = text.replace(char, escaped)
  return text


def to_latex(table: Table) -> str:
  """A booktabs table as in the paper's appendix: a \\midrule between capacity blocks."""
  row = lambda cells: ' & '.join(latex_escape(c) for c in cells) + r' \\'
  out = [r'\begin{table}', r'\centering', r'\small',
         r'\begin{tabular}{l' + 'c' * (len(table.header) - 1) + '}', r'\toprule',
         row(table.header)]
  for _, rows in table.groups:
    out.append(r'\midrule')
    out.extend(row(r) for r in rows)
  out += [r'\bottomrule', r'\end{tabular}', rf'\caption{{{latex_escape(caption(table))}}}',
          rf'\label{{tab:{table.slug}}}', r'\end{table}']
  return '\n'.join(out) + '\n'


def build_tables(runs: Sequence[Run], controlled: Callable[[Run], float | None] | None = None,
                 superseded_rows: dict | None = None) -> tuple[list[Table], list[str]]:
  """One Table per (arch, dataset) present, and the problems met while grouping seeds."""
  rows, problems = summaries.group_seeds(runs)
  by_table: dict[tuple, dict] = {}
  for key, seeds in rows.items():
    by_table.setdefault(key[:2], {})[key] = seeds
  return [build_table(arch, dataset, r, controlled, superseded_rows)
          for (arch, dataset), r in sorted(by_table.items())], problems


def write_tables(tables: Sequence[Table], out_dir: str, figures: Sequence[str] = ()) -> list[str]:
  """Writes each table as .md and .tex, and tables.md (all tables, then the figures)."""
  written = []
  for table in tables:
    for ext, text in (('md', to_markdown(table)), ('tex', to_latex(table))):
      path = os.path.join(out_dir, f'{table.slug}.{ext}')
      atomic.write_text(path, text)
      written.append(path)
  index = ['# Results', ''] + [to_markdown(t) for t in tables]
  index += [f'![{os.path.basename(f)}]({os.path.relpath(f, out_dir)})\n' for f in figures]
  path = os.path.join(out_dir, 'tables.md')
  atomic.write_text(path, '\n'.join(index))
  return written + [path]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', required=True, help='Directory searched for summary.json files.')
  parser.add_argument('--out', required=True, help='Directory for the tables and figures.')
  parser.add_argument('--no-figures', action='store_true', help='Write the tables only.')
  parser.add_argument('--beside', help='A committed study\'s summaries (e.g. results/tiny/runs): '
                      'also write OUT/beside_study.md, these runs beside its means '
                      '(results/study_comparison.py).')
  parser.add_argument('--readme', default=os.path.join(summaries.REPO, 'README.md'),
                      help='The README whose blocks name a template of OUT/prose '
                      '(results/study_prose.py).')
  cost.add_step_times_flag(parser)
  args = parser.parse_args(argv)
  runs, problems = summaries.load_runs(args.runs)
  if not runs:
    print(f'No usable {run_outputs.SUMMARY_FILE} under {args.runs}; run a sweep first '
          '(make sweep ARCH=tiny).', file=sys.stderr)
    for problem in problems:
      print(f'  {problem}', file=sys.stderr)
    return 1
  step_times = cost.load_step_times(args.step_times)
  replaced = superseded.load(args.runs)
  tables, group_problems = build_tables(runs, step_times.controlled_hours, replaced)
  price, cost_title = step_times.pricing()
  figures = []
  if not args.no_figures:
    from results import plots  # pylint: disable=g-import-not-at-top  (matplotlib only if needed)
    reruns = {key: (found, cost.rerun_pricing(directory, price))
              for key, (directory, found) in superseded.load_reruns(args.runs).items()}
    figures = plots.write_figures(runs, args.out, price, step_times.axis_label(runs), replaced,
                                  reruns)
  written = write_tables(tables, args.out, figures)
  rows, _ = summaries.group_seeds(runs)
  verdicts = claims.check(rows, price, cost_title, replaced)
  if verdicts:     # The paper's claims, where the runs have the routers they compare.
    path = os.path.join(args.out, 'claims.md')
    atomic.write_text(path, claims.to_markdown(verdicts, claims.seeds_per_table(rows),
                                               spreads=claims.spreads_per_table(rows),
                                               superseded=replaced))
    written.append(path)
    if study_prose.templates(args.out):
      study = study_prose.load(args.runs, args.out, rows, verdicts, price, cost_title,
                               step_times)
      written += study_prose.write(args.out, study, args.readme)
  if args.beside:
    text, beside_problems = study_comparison.compare(runs, args.beside)
    path = os.path.join(args.out, 'beside_study.md')
    atomic.write_text(path, text)
    written.append(path)
    problems += beside_problems
  print(f'{len(runs)} runs -> {len(tables)} tables, {len(figures)} figures:')
  for path in written + list(figures):
    print(f'  {path}')
  for problem in problems + group_problems:
    print(f'warning: {problem}', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
