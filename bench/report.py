"""docs/benchmarks.md's numbers, read from the result files: one table per file of bench/results/.

  python -m bench.report                 rewrites the section between the markers of
                                         docs/benchmarks.md (MARKERS) from bench/results/*.json
  python -m bench.report --check         exits 1 if that section is not what the files say

The page's prose says what each benchmark measures and how to read it; every number on it comes
from here, with the machine and commit its file records (docs/benchmarks_test.py checks that the
section is current). Ratios compare rows of one file only.
"""
import argparse
import glob
import json
import os
import sys
from typing import Sequence

from base import atomic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, 'bench', 'results')
DOC = os.path.join(REPO, 'docs', 'benchmarks.md')
MARKERS = ('<!-- bench.report: begin (python -m bench.report writes this section) -->',
           '<!-- bench.report: end -->')

# Per kind of file: where its rows are and which of their fields make the table's columns.
RATIO_COLUMNS = ('router', 'capacity', 'group_size', 'expert_shards', 'vs_dense_mlp',
                 'vs_flops_scaled_dense', 'vs_round_robin', 'routing_overhead_target',
                 'meets_target')
STEP_COLUMNS = ('arch', 'dtype', 'router', 'capacity', 'softmax_combine', 'per_device_batch',
                'step_ms', 'images_per_second', 'vs_dense', 'vs_flops_scaled_dense', 'mfu',
                'target', 'meets_target')
TRAIN_STEP_COLUMNS = ('router', 'capacity', 'softmax_combine', 'vs_dense', 'vs_dense_runs',
                      'target', 'meets_target')
AUGMENT_COLUMNS = ('augment_on', 'randaug', 'images', 'step_ms', 'augment_ms', 'share',
                   'step_share', 'target', 'meets_target')
TAIL_MEMORY_COLUMNS = ('tail', 'compiler', 'images', 'temp_bytes', 'temp_mb_per_image',
                       'compile_cpu_seconds')
SOLVER_COLUMNS = ('source', 'tokens', 'experts', 'capacity_factor', 'start', 'steps', 'ms',
                  'row_error', 'dropped')


def _cell(value) -> str:
  if value is None:
    return ''
  if isinstance(value, float):
    return f'{value:.4g}'
  if isinstance(value, dict):
    return ', '.join(f'{k} {_cell(v)}' for k, v in value.items())
  if isinstance(value, list):
    return ', '.join(_cell(v) for v in value)
  return str(value)


def _table(rows: Sequence[dict], columns: Sequence[str]) -> list[str]:
  """A Markdown table of `rows`, with the columns any row holds."""
  present = [c for c in columns if any(c in row for row in rows)]
  lines = ['| ' + ' | '.join(present) + ' |', '|' + ' --- |' * len(present)]
  lines += ['| ' + ' | '.join(_cell(row.get(c)) for c in present) + ' |' for row in rows]
  return lines


def _machine(result: dict) -> str:
  machine = result.get('machine', {})
  commit = machine.get('commit') or result.get('commit')
  parts = [machine.get('cpu_model') or 'CPU not recorded', f'{machine.get("cpu_count")} cores']
  if machine.get('device') not in (None, 'cpu'):
    parts.insert(0, f'{machine["device"]} x{machine.get("num_devices", 1)}')
  source = (f'commit {commit[:7]}' + (', with uncommitted changes'
                                      if machine.get('uncommitted_changes') else '')
            if commit else 'commit not recorded')
  return f'Machine: {", ".join(parts)}; {source}.'


def _body(name: str, result: dict) -> list[str]:
  """The table of one result file."""
  if name.startswith('moe_layer'):
    return _table(result['ratios'], RATIO_COLUMNS)
  if name == 'train_step.json':
    return _table(result['ratios'], TRAIN_STEP_COLUMNS)
  if name.startswith('paper_step'):
    return _table(result['rows'], STEP_COLUMNS)
  if name == 'tail_memory.json':
    return _table(result['rows'], TAIL_MEMORY_COLUMNS)
  if name == 'sparsity_solver.json':
    return _table(result['rows'], SOLVER_COLUMNS)
  if name == 'input_pipeline.json':
    per_vcpu = result.get('images_per_second_per_vcpu', {})
    return _table([{'pp': k, 'images_per_second': v, 'per_vcpu': per_vcpu.get(k)}
                   for k, v in result['images_per_second'].items()],
                  ('pp', 'images_per_second', 'per_vcpu'))
  if name == 'config_load.json':
    return _table(result['rows'], ('program', 'median_s', 'above_bare_s', 'min_s', 'max_s')) + [
        '', 'Ratios: ' + _cell(result['ratios']) + '.']
  if name == 'input_pipeline_op_specs.json':   # Two commits' medians, ranges and ratio a pp.
    stats = ('median_per_vcpu', 'range_per_vcpu')
    return _table([{'pp': pp, **{f'{s} {side}': result[s][side][pp]
                                 for s in stats for side in ('before', 'after')},
                    'after / before': result['after_over_before'][pp]}
                   for pp in result['after_over_before']],
                  ('pp', *(f'{s} {side}' for s in stats for side in ('before', 'after')),
                   'after / before'))
  if name == 'device_augment.json':
    # The tail's randaug op names each device-path row; the host path's row has none.
    return _table([{**r, 'randaug': next((op for op in r.get('tail', '').split('|')
                                          if op.startswith('randaug')), None)}
                   for r in result['rows']], AUGMENT_COLUMNS)
  scalars = {k: v for k, v in result.items()
             if isinstance(v, (int, float, str)) and k not in ('method', 'command')}
  return _table([scalars], sorted(scalars))


def render(results_dir: str = RESULTS) -> str:
  """The section: per result file, its machine, its table and how it was timed."""
  lines = []
  for path in sorted(glob.glob(os.path.join(results_dir, '*.json'))):
    name = os.path.basename(path)
    with open(path, encoding='utf-8') as f:
      result = json.load(f)
    lines += [f'### `{name}`', '', _machine(result), '']
    lines += _body(name, result)
    if result.get('method'):
      lines += ['', f'Method: {result["method"]}']
    lines.append('')
  return '\n'.join(lines)


def with_section(doc: str, section: str) -> str:
  """`doc` with the text between MARKERS replaced by `section`."""
  begin, end = doc.index(MARKERS[0]) + len(MARKERS[0]), doc.index(MARKERS[1])
  return doc[:begin] + '\n\n' + section + '\n' + doc[end:]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--check', action='store_true', help='Exit 1 if the section is stale.')
  args = parser.parse_args(argv)
  with open(DOC, encoding='utf-8') as f:
    doc = f.read()
  current = with_section(doc, render())
  if args.check:
    if current != doc:
      print(f'{DOC} is stale: run python -m bench.report', file=sys.stderr)
      return 1
    return 0
  if current != doc:
    atomic.write_text(DOC, current)
  print(DOC)
  return 0


if __name__ == '__main__':
  sys.exit(main())
