"""`config_block`: a section's dataclass as a config block, so that every default lives in one
place, the dataclass (vmoe/train/experiment.py `parse` goes the other way, from a config to the
sections). Imports ml_collections and no JAX.
"""
import dataclasses
import typing
from typing import Mapping

import ml_collections as mlc

from base import errors


def config_block(section, **given) -> mlc.ConfigDict:
  """A section dataclass as a config block: every field, nested sections as blocks, and None
  fields as typed placeholders (so that --config.KEY=VALUE can set them). `section` is an
  instance, or a class with `given` values over its defaults: a block built unchecked, which
  `parse` checks once, as it builds the section (the configs build the router's this way)."""
  values = {}
  for field in dataclasses.fields(section):
    if isinstance(section, type):
      value = given[field.name] if field.name in given else _default(field)
    else:
      value = getattr(section, field.name)
    if dataclasses.is_dataclass(value):
      value = config_block(value)
    elif isinstance(value, Mapping):   # A router's options: a block of its own.
      value = mlc.ConfigDict(dict(value))
    elif value is None:
      value = mlc.config_dict.placeholder(_optional_type(field.type))
    values[field.name] = value
  return mlc.ConfigDict(values)


def _default(field: dataclasses.Field):
  if field.default is not dataclasses.MISSING:
    return field.default
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  raise errors.UserError(f'the config block lacks {field.name}, which has no default.')


def _optional_type(annotation) -> type:
  """int for `int | None` (the type a placeholder takes)."""
  types = [t for t in typing.get_args(annotation) if t is not type(None)]
  return types[0] if len(types) == 1 else object
