"""Base class of this package's TFDS builders.

TFDS 4.9.10 finds a builder's checksums file through `code_path`, which, for a builder defined in
a package on Python >= 3.9, imports `importlib_resources` (a package TFDS only declares for Python
< 3.9): download_and_prepare then fails with ModuleNotFoundError. Our builders download nothing and
live in plain files, so their code path is simply their module's file.
"""
import sys

from etils import epath
import tensorflow_datasets as tfds


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """GeneratorBasedBuilder whose code_path is the file that defines the subclass."""

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    return epath.Path(sys.modules[cls.__module__].__file__)
