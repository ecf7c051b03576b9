"""Writes the golden files from the references' own code.

  python -m testing.goldens --vmoe PATH --big-vision PATH --vision-transformer PATH
      [--only COMPONENT ...] [--extra-site DIR ...] [--check]

Each PATH is a git checkout of the reference at the commit REFERENCE_COMMITS names (the
generator refuses another commit: the goldens record what one version of the reference does).
Each component runs in a child process of its own (testing/goldens/reference_side.py) whose
PYTHONPATH holds the checkouts, then `--extra-site` directories (generator-only packages), then a
directory that links this repository's `base` and `testing` alone: `vmoe` there must be the
reference's, and V-MoE's `vmoe` is a namespace package, which any regular package of that name
later on the path would shadow.
`--check` writes into a temporary directory and compares with the committed files byte for byte:
on the same CPU kind and library versions the generator reproduces them.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from base import errors
from testing import goldens
from testing.goldens import reference

REPO = pathlib.Path(__file__).resolve().parents[2]
# The commits the goldens were generated from (git rev-parse HEAD of each checkout).
REFERENCE_COMMITS = {
    'vmoe': '942a78bc81d2e63199f0933733582ddae0715416',
    'big_vision': '0127fb6b337ee2a27bf4e54dea79cff176527356',
    'vision_transformer': 'c6de1e5378c9831a8477feb30994971bdc409e46',
}
# Component name -> the module under testing/goldens/ that runs its reference code; each
# module has REFERENCE (the reference function it runs, as docs/fidelity.md names it) and
# generate(context) -> {name: array}.
# This repository's packages the child process may import (testing/goldens/reference.py).
CHILD_PACKAGES = ('base', 'testing')
COMPONENTS = {
    'fewshot': 'fewshot',
    'kl_projection_routers': 'kl_projection_routers',
    'losses': 'losses',
    'lr_schedule': 'lr_schedule',
    'mixup': 'mixup',
    'optimizer': 'optimizer',
    'pp_ops': 'pp_ops',
    'randaug': 'randaug',
    'router_dispatchers': 'router_dispatchers',
    'soft_router': 'soft_router',
    'vit_moe': 'vit_moe',
}


def checkout_commit(path: str) -> str | None:
  """The HEAD commit of a git checkout, None where `path` is not one."""
  done = subprocess.run(['git', '-C', path, 'rev-parse', 'HEAD'], capture_output=True,
                        text=True, check=False)
  return done.stdout.strip() if done.returncode == 0 else None


def checked_checkouts(paths: dict[str, str]) -> dict[str, str]:
  """name -> absolute path of each checkout, after checking it is at REFERENCE_COMMITS."""
  checked = {}
  for name, path in paths.items():
    commit = checkout_commit(path)
    if commit is None:
      raise errors.UserError(f'{path} is not a git checkout of {name}: clone '
                             f'google-research/{name} and pass its directory')
    if commit != REFERENCE_COMMITS[name]:
      raise errors.UserError(
          f'{path} is at {commit}; the goldens come from {name} at {REFERENCE_COMMITS[name]}: '
          f'git -C {path} checkout {REFERENCE_COMMITS[name]}')
    checked[name] = str(pathlib.Path(path).resolve())
  return checked


def generate(component: str, checkouts: dict[str, str], extra_sites: list[str],
             out_dir: pathlib.Path) -> pathlib.Path:
  """Runs one component's child process; returns the golden file it wrote."""
  out = goldens.path_of(component, out_dir)
  with tempfile.TemporaryDirectory() as cwd:
    for package in CHILD_PACKAGES:
      os.symlink(REPO / package, os.path.join(cwd, package))
    env = {**os.environ,
           'PYTHONPATH': os.pathsep.join([*checkouts.values(), *extra_sites, cwd]),
           reference.CHECKOUTS_ENV: json.dumps(checkouts),
           'JAX_PLATFORMS': 'cpu', 'CUDA_VISIBLE_DEVICES': '', 'TF_CPP_MIN_LOG_LEVEL': '2',
           'PYTHONHASHSEED': '0'}
    meta = json.dumps({'reference_commits': {name: REFERENCE_COMMITS[name]
                                             for name in checkouts}})
    subprocess.run([sys.executable, '-m', 'testing.goldens.reference_side',
                    f'testing.goldens.{COMPONENTS[component]}', str(out), meta],
                   cwd=cwd, env=env, check=True)
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--vmoe', required=True, help='checkout of google-research/vmoe')
  parser.add_argument('--big-vision', required=True, help='checkout of google-research/big_vision')
  parser.add_argument('--vision-transformer', required=True,
                      help='checkout of google-research/vision_transformer (vit_jax)')
  parser.add_argument('--only', nargs='+', choices=sorted(COMPONENTS), default=sorted(COMPONENTS))
  parser.add_argument('--extra-site', nargs='*', default=[],
                      help='directories of generator-only packages, put on the child\'s path')
  parser.add_argument('--check', action='store_true',
                      help='regenerate into a temporary directory and compare with the files')
  args = parser.parse_args(argv)
  checkouts = checked_checkouts({'vmoe': args.vmoe, 'big_vision': args.big_vision,
                                 'vision_transformer': args.vision_transformer})
  sites = [str(pathlib.Path(site).resolve()) for site in args.extra_site]
  if not args.check:
    for component in args.only:
      print(f'{component}: {generate(component, checkouts, sites, goldens.GOLDEN_DIR)}')
    return 0
  differ = []
  with tempfile.TemporaryDirectory() as scratch:
    for component in args.only:
      fresh = generate(component, checkouts, sites, pathlib.Path(scratch))
      committed = goldens.path_of(component)
      same = committed.exists() and committed.read_bytes() == fresh.read_bytes()
      print(f'{component}: {"same bytes" if same else "DIFFERS"}')
      differ += [] if same else [component]
  return 1 if differ else 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
