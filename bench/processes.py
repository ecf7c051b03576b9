"""A benchmark's parts, each run by a fresh Python process of the same module, one after another.

A fresh process frees the last part's compiled programs and memory (ten L/16 rows in one process
outgrew a 24 GiB host), and repeated runs show the spread between processes, which on a 2-core VM
exceeds the spread between the rounds of one process.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

from base import atomic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # Where -m bench.* runs.


def part_path(out: str, index: int, argv: list[str]) -> str:
  """Where part `index`, run with `argv`, keeps its record until the merge: a hash of argv in the
  name, so that a rerun with other flags never takes a part that a failed run left behind."""
  flags = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12]
  return os.path.join(out + '.parts', f'{index}_{flags}.json')


def run(module: str, jobs: list[list[str]], out: str) -> list[dict]:
  """The records of `python -m MODULE JOB --out PART` for each job, in turn, each in a fresh
  process (argparse keeps an option's last value, so a job may repeat the user's flags). A part
  that exists is not run again: a rerun after a failure or a kill resumes."""
  records = []
  for index, job in enumerate(jobs):
    part = part_path(os.path.abspath(out), index, job)    # The process runs in REPO.
    if not os.path.exists(part):
      subprocess.run([sys.executable, '-m', module, *job, '--out', part], check=True, cwd=REPO)
    with open(part, encoding='utf-8') as f:
      records.append(json.load(f))
  return records


def write(out: str, record: dict) -> None:
  """Writes the merged record atomically, then drops the parts it holds."""
  atomic.write_json(out, record)
  shutil.rmtree(out + '.parts', ignore_errors=True)
