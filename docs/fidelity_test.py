"""docs/fidelity.md checks itself: every pytest node it names is a test that pytest collects.

The table's last column names the tests that fail if a default changes, as backticked
`path::test_name` or `path::TestClass::test_name` nodes (a `::test_name` after a full node in the
same cell or deviation entry is a second test of that file). A renamed or moved test would leave
the table pointing at nothing, and a helper or library function would point at something that
checks nothing, so this test parses each named file with `ast` (it imports nothing) and accepts
only what pytest collects there under pytest.ini: a module-level `test_*` function, or a `test_*`
method of a module-level `Test*` class, in a `*_test.py` file; a parametrised test counts by its
function name. A node written without backticks fails too (the parser would skip it). A row whose
pinning cell names no node must say "value none — not pinned", the table's only other form.
"""
import ast
import functools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / 'docs' / 'fidelity.md'
# A backticked node: an optional path ending in .py, '::', an optional Test class and '::', a
# function name, an optional [id].
NODE = re.compile(
    r'`(?P<path>[\w./-]+\.py)?::(?:(?P<cls>\w+)::)?(?P<name>\w+)(?:\[[^\]`]*\])?`')
# A node outside backticks: what NODE would not see.
BARE_NODE = re.compile(r'[\w./-]*\.py::[\w:]+')
BACKTICKED = re.compile(r'`[^`]*`')
NOT_PINNED = 'value none — not pinned'
# The golden column: golden test nodes (a test file that loads testing/goldens), or one of these.
GOLDEN = 'golden'
NO_GOLDEN = ('config value: nothing to run', 'hand-worked only')
PINNING, GOLDEN_CELL, CELLS = 4, 5, 6
CELL_SEPARATOR = re.compile(r'(?<!\\)\|')       # The table escapes a '|' inside a cell as '\|'.


def units(text: str):
  """The doc cut where a shorthand node resolves: each table row's cells, and each paragraph or
  list item of the prose. Yields (line number, is a table row, [units of that line or block])."""
  block, start = [], 0
  for number, line in enumerate(text.splitlines(), 1):
    if line.startswith('|'):
      yield number, True, CELL_SEPARATOR.split(line.strip().strip('|'))
      continue
    if not line.strip() or re.match(r'\s*- ', line):
      if block:
        yield start, False, [' '.join(block)]
      block, start = [], number
    if line.strip():
      block.append(line)
  if block:
    yield start, False, [' '.join(block)]


def nodes(unit: str):
  """The (path, name) nodes of one unit, name 'Class::test' for a method, each `::name` shorthand
  resolved against the full node before it; a shorthand with none before it fails."""
  path = None
  for match in NODE.finditer(unit):
    path = match['path'] or path
    assert path, f'{match[0]} has no file before it in: {unit[:120]}'
    yield path, f'{match["cls"]}::{match["name"]}' if match['cls'] else match['name']


def is_test(name: str) -> bool:
  return name.startswith('test_')


@functools.cache
def collected_tests(path: str) -> frozenset:
  """The tests pytest collects from a test file: module-level `test_*` functions, and
  'Class::method' for the `test_*` methods of module-level `Test*` classes."""
  tree = ast.parse((ROOT / path).read_text(), filename=path)
  tests = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_test(node.name):
      tests.add(node.name)
    elif isinstance(node, ast.ClassDef) and node.name.startswith('Test'):
      tests.update(f'{node.name}::{m.name}' for m in node.body
                   if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_test(m.name))
  return frozenset(tests)


def table_rows(text: str):
  """(line number, cells) of the table's data rows (after its header and '---' lines)."""
  for number, is_table, cells in units(text):
    if is_table and not set(cells[0].strip()) <= set('- ') and cells[0].strip() != 'item':
      yield number, cells


def missing_nodes(text: str) -> list:
  """Named nodes that are not collected tests (no such file, not a *_test.py file, no such test
  in it), and nodes outside backticks, one message each."""
  missing = []
  for number, _, parts in units(text):
    for part in parts:
      for path, name in nodes(part):
        if not path.endswith('_test.py'):
          missing.append(f'line {number}: {path} is not a test file (*_test.py)')
        elif not (ROOT / path).is_file():
          missing.append(f'line {number}: {path} does not exist')
        elif name not in collected_tests(path):
          missing.append(f'line {number}: {path} has no collected test {name}')
      missing.extend(f'line {number}: {bare} is not backticked, so it goes unchecked'
                     for bare in BARE_NODE.findall(BACKTICKED.sub('', part)))
  return missing


def loads_goldens(path: str) -> bool:
  """Whether a test file imports testing.goldens (read with ast)."""
  tree = ast.parse((ROOT / path).read_text(), filename=path)
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == 'testing' and any(
        alias.name == 'goldens' for alias in node.names):
      return True
    if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
        (getattr(node, 'module', None) or alias.name).startswith('testing.goldens')
        for alias in node.names):
      return True
  return False


def golden_cell_errors(number: int, cell: str) -> list:
  """A golden cell names golden tests (files that load testing.goldens) after 'golden', or
  starts with one of NO_GOLDEN."""
  cell = cell.strip()
  if cell.startswith(NO_GOLDEN):
    return []
  named = list(nodes(cell))
  if not cell.startswith(GOLDEN) or not named:
    return [f'line {number}: the golden cell neither names golden tests after "{GOLDEN}" nor '
            f'starts with one of {NO_GOLDEN}']
  return [f'line {number}: {path} does not load testing.goldens' for path, _ in named
          if (ROOT / path).is_file() and not loads_goldens(path)]


def unpinned_rows(text: str) -> list:
  """Table rows whose pinning cell names no node and does not say NOT_PINNED, whose golden cell
  is not of its forms, or that do not have the table's six cells."""
  wrong = []
  for number, cells in table_rows(text):
    if len(cells) != CELLS:
      wrong.append(f'line {number}: {len(cells)} cells, the table has {CELLS}')
      continue
    wrong.extend(golden_cell_errors(number, cells[GOLDEN_CELL]))
    if not (list(nodes(cells[PINNING])) or NOT_PINNED in cells[PINNING]):
      wrong.append(f'line {number} ({cells[0].strip()}): its pinning cell names no test node '
                   f'(`path::test_name`) and does not say "{NOT_PINNED}"')
  return wrong


def test_every_named_node_exists():
  text = DOC.read_text()
  named = sum(len(list(nodes(part))) for _, _, parts in units(text) for part in parts)
  assert named > 100, f'only {named} nodes parsed: has the table format changed?'
  missing = missing_nodes(text)
  assert not missing, '\n'.join(missing)


def test_every_row_names_a_test_or_says_it_is_not_pinned():
  text = DOC.read_text()
  assert len(list(table_rows(text))) > 40, 'too few rows parsed: has the table format changed?'
  wrong = unpinned_rows(text)
  assert not wrong, '\n'.join(wrong)


def test_the_checks_catch_a_moved_test_and_an_unpinned_row():
  this = 'docs/fidelity_test.py'
  text = '\n'.join([
      '| item | paper | reference | project | pinning test | golden |',
      '| --- | --- | --- | --- | --- | --- |',
      f'| a | b | c | d | `{this}::test_every_named_node_exists` and `::no_such_test` | '
      'hand-worked only |',
      '| e | f | g | h | mechanism only | config value: nothing to run |',
      '| i | j | k | l | value none — not pinned | golden: `data/pp/ops_golden_test.py::'
      'test_deterministic_image_ops_equal_v_moes` |',
      f'| m | n | o | p | value none — not pinned | golden: `{this}::test_only_collected_tests'
      '_count` |',
      '| q | r | s | t | value none — not pinned | checked by eye |',
      '',
      '- **D1.** Pinned by `vmoe/moved_test.py::test_gone`.'])
  assert missing_nodes(text) == [f'line 3: {this} has no collected test no_such_test',
                                 'line 9: vmoe/moved_test.py does not exist']
  assert unpinned_rows(text) == [
      f'line 4 (e): its pinning cell names no test node (`path::test_name`) and does not say '
      f'"{NOT_PINNED}"',
      f'line 6: {this} does not load testing.goldens',
      f'line 7: the golden cell neither names golden tests after "{GOLDEN}" nor starts with one '
      f'of {NO_GOLDEN}']


def test_the_parser_reads_the_forms_the_table_uses():
  cell = ('mechanism `vmoe/a_test.py::test_one` and `::test_two`; value '
          '`configs/b_test.py::test_three[b32]`')
  assert list(nodes(cell)) == [('vmoe/a_test.py', 'test_one'), ('vmoe/a_test.py', 'test_two'),
                               ('configs/b_test.py', 'test_three')]
  row = '| **Data:** x | not stated | `a\\|b` | c | `d_test.py::test_d` | hand-worked only |'
  (_, is_table, cells), = units(row)
  assert is_table and len(cells) == CELLS
  assert list(nodes(cells[PINNING])) == [('d_test.py', 'test_d')]


def test_the_routers_after_the_paper_have_their_block():
  text = DOC.read_text()
  block = text.split('## Routers after the paper', 1)[1]
  rows = [cells[0] for _, cells in table_rows(block)]
  for router in ('sigmoid_tc', 'lossfree_tc', 'base', 'topp_tc', 'random_tc'):
    assert any(f'**{router}:**' in row for row in rows), router


def test_only_collected_tests_count(tmp_path, monkeypatch):
  # A helper in a test file, a method of a non-Test class, a function of a library file and a
  # node without backticks each fail; a Test class's test method passes.
  (tmp_path / 'x_test.py').write_text(
      'def helper():\n  pass\n\n\ndef test_a():\n  def test_inner():\n    pass\n\n\n'
      'class TestB:\n  def test_c(self):\n    pass\n\n\nclass Helper:\n  def test_d(self):\n'
      '    pass\n')
  (tmp_path / 'x.py').write_text('def test_e():\n  pass\n')
  monkeypatch.setitem(globals(), 'ROOT', tmp_path)
  collected_tests.cache_clear()
  try:
    assert collected_tests('x_test.py') == {'test_a', 'TestB::test_c'}
    text = ('- `x_test.py::test_a`, `::TestB::test_c`, `::helper`, `::test_inner`, '
            '`::Helper::test_d`, `x.py::test_e` and x_test.py::test_a.')
    assert missing_nodes(text) == [
        'line 1: x_test.py has no collected test helper',
        'line 1: x_test.py has no collected test test_inner',
        'line 1: x_test.py has no collected test Helper::test_d',
        'line 1: x.py is not a test file (*_test.py)',
        'line 1: x_test.py::test_a is not backticked, so it goes unchecked']
  finally:
    collected_tests.cache_clear()


def test_the_imagenet_rung_has_its_block():
  # configs/ilsvrc_s32*.py: each of V-MoE's ImageNet-1k model features and the data, schedule and
  # evaluation have a row in the block of their own.
  block = DOC.read_text().split('## The ImageNet-1k rung', 1)[1]
  rows = ' '.join(cells[0] + cells[3] for _, cells in table_rows(block))
  for key in ("'VMoE-S/32'", 'moe.last', 'num_selected_experts', 'eval_capacity_factor',
              'moe.dropout_rate', 'representation_size', 'head_bias_init', "'train[:99%]'",
              'imagenet_real', 'imagenet_v2', 'num_train_steps', 'peak_lr', 'mixup_alpha'):
    assert key in rows, key
