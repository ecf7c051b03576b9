"""BASE c = 2 with the fixed auction (runs/) beside the study (results/tiny/runs): see
results/rerun_comparison.py, which this runs from any directory.

  python results/tiny/base_c2_fixed/compare.py
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
sys.path.insert(0, REPO)
# pylint: disable=wrong-import-position
from base import errors
from results import rerun_comparison

if __name__ == '__main__':
  sys.exit(errors.run_tool(lambda: rerun_comparison.main([
      '--study', os.path.join(REPO, 'results', 'tiny', 'runs'),
      '--rerun', os.path.join(REPO, 'results', 'tiny', 'base_c2_fixed', 'runs'),
      '--router', 'base', '--capacity', '2'])))
