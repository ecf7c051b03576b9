"""docs/benchmarks.md reads its numbers from the result files: its generated section is what
`python -m bench.report` makes of bench/results/ now."""
from bench import report


def test_the_numbers_section_is_the_result_files():
  assert report.main(['--check']) == 0, 'run python -m bench.report and commit docs/benchmarks.md'


def test_a_file_becomes_its_machine_line_and_table(tmp_path):
  (tmp_path / 'train_step.json').write_text(
      '{"machine": {"cpu_model": "AMD EPYC", "cpu_count": 2, "commit": "0123456789abcdef", '
      '"uncommitted_changes": false}, "method": "median of rounds", "ratios": '
      '[{"router": "soft_moe", "capacity": 1.0, "vs_dense": 1.115, "target": {"vs_dense": 1.2}, '
      '"meets_target": true}]}')
  assert report.render(str(tmp_path)).split('\n') == [
      '### `train_step.json`', '', 'Machine: AMD EPYC, 2 cores; commit 0123456.', '',
      '| router | capacity | vs_dense | target | meets_target |', '| --- | --- | --- | --- | --- |',
      '| soft_moe | 1 | 1.115 | vs_dense 1.2 | True |', '', 'Method: median of rounds', '']
