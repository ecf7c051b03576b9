"""Golden outputs of the references' own code, which the suite compares the project against.

A transcription of a reference that the project's own reader writes inherits that reader's
reading; a golden does not. Each `testing/goldens/<component>.npz` holds a component's inputs and
what the reference's code returned for them, run once on a CPU by `python -m testing.goldens`
(testing/goldens/__main__.py) from checkouts of google-research/vmoe, big_vision and
vision_transformer at the commits that generator names. Its `_meta` entry (JSON) records those
commits, every patch the generator applied to make old reference code run, the library versions
and the CPU kind. Tests read the files with `load` and need no checkout.
"""
import dataclasses
import json
import pathlib

import numpy as np

GOLDEN_DIR = pathlib.Path(__file__).resolve().parent
META_KEY = '_meta'


@dataclasses.dataclass(frozen=True)
class Golden:
  """One component's golden: its arrays by name, and the record of how they were made."""
  arrays: dict
  meta: dict

  def __getitem__(self, name: str) -> np.ndarray:
    return self.arrays[name]


def path_of(component: str, directory: pathlib.Path = GOLDEN_DIR) -> pathlib.Path:
  """Where a component's golden file lives."""
  return directory / f'{component}.npz'


def load(component: str, directory: pathlib.Path = GOLDEN_DIR) -> Golden:
  """A component's golden file, read without pickles."""
  with np.load(path_of(component, directory), allow_pickle=False) as f:
    arrays = {name: f[name] for name in f.files if name != META_KEY}
    meta = json.loads(f[META_KEY].item())
  return Golden(arrays, meta)
