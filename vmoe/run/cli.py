"""main.py's command line: absl flags whose errors are UserErrors, and the exit status 2.

`run(main)` is app.run(main) with a user error (base/errors.py UserError: a bad flag, config,
workdir or missing data) reported as one "Error: ..." line on stderr and exit status 2;
--verbose or VMOE_VERBOSE=1 adds its traceback. Any other exception is a bug and keeps its
traceback.
"""
import os
import re
import sys
import traceback
from typing import Callable

from absl import app
from absl import flags

from base import errors

USER_ERROR_STATUS = errors.USER_ERROR_STATUS
CONFIG_FLAG_TYPE = 'config object'    # flag_type() of ml-collections' config flags.


def parse_flags(argv: list[str]) -> list[str]:
  """app.run's flags parser: a bad flag or config becomes a UserError, not absl's FATAL exit.

  The config file runs while its flag is parsed: ml-collections re-raises its errors as the
  same type with the traceback pasted into the message, and absl wraps that in a flags.Error,
  so a UserError the config raised is the innermost of the chain, and its message is the one to
  show. A KeyError, IndexError or AttributeError from an override (--config.modle.x=1)
  carries ml-collections' "did you mean" text. A config file that cannot be loaded (missing) is
  a UserError too. Any other error raised in a config's get_config is a bug: re-raised.
  """
  try:
    remaining = flags.FLAGS(argv)
    _load_config_files(flags.FLAGS)
    return remaining
  except ValueError as e:
    # ml-collections' override of a key under a block that is None (the dense ViT's moe.router).
    if 'can not be applied because field' not in str(e) or _innermost_user_error(e):
      raise
    field = str(e).split('field "', 1)[1].split('"', 1)[0]
    raise errors.UserError(f'{str(e).split(" can not", 1)[0]}: the config has no {field} block '
                           f'(a dense ViT, router=dense, has no router); drop the override.'
                           ) from e
  except OSError as e:       # A config file that cannot be loaded (missing, unreadable).
    what = str(e).strip().splitlines()[-1].strip()
    raise errors.UserError(f'cannot load the config file: {what}; give an existing one, e.g. '
                           '--config=configs/tiny.py.') from e
  except (flags.Error, KeyError, IndexError, AttributeError) as e:
    if isinstance(e, AttributeError) and not (e.args and isinstance(e.args[0], KeyError)):
      raise     # Not ml-collections' missing key (its AttributeError holds the KeyError).
    user_error = _innermost_user_error(e)
    if user_error is not None:
      raise errors.UserError(str(user_error)) from e
    if _raised_in_get_config(e):
      raise
    if isinstance(e, flags.Error):     # absl's message holds the value as typed: escaped.
      raise errors.UserError(_escaped(str(e))) from e
    what = _escaped(str(e.args[0] if e.args else e).replace('\n', '. '))
    raise errors.UserError(f'a --config override names a key the config lacks: {what} (write '
                           '--config.KEY=VALUE with KEY dotted, e.g. --config.moe.group_size=8).'
                           ) from e


def _escaped(text: str) -> str:
  """`text` on one line: control characters (a newline or carriage return typed in a value)
  written as their Python escapes."""
  return re.sub(r'[\x00-\x1f\x7f]', lambda m: repr(m.group())[1:-1], text)


def _load_config_files(flag_values: flags.FlagValues) -> None:
  """Raises now the OSError of a config file that could not be loaded: ml-collections keeps it
  in the flag's value and raises it at the value's first use."""
  for name in flag_values:
    flag = flag_values[name]
    if flag.present and flag.flag_type() == CONFIG_FLAG_TYPE:
      getattr(flag.value, 'keys', None)


def _chain(error: BaseException | None):
  """error, then the exceptions it was raised from or while handling, innermost last."""
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def _innermost_user_error(error: BaseException) -> errors.UserError | None:
  found = [e for e in _chain(error) if isinstance(e, errors.UserError)]
  return found[-1] if found else None


def _raised_in_get_config(error: BaseException) -> bool:
  """Whether a config file's get_config (or the code it calls) raised `error` or its causes."""
  return any(frame.name == 'get_config' for e in _chain(error)
             for frame in traceback.extract_tb(e.__traceback__))


def verbose(argv: list[str]) -> bool:
  """--verbose in argv, or VMOE_VERBOSE set (read from argv, not the flag: a flag error happens
  before the flags are parsed)."""
  return os.environ.get('VMOE_VERBOSE', '') not in ('', '0') or '--verbose' in argv


def run(main: Callable[[list[str]], None], argv: list[str] | None = None) -> None:
  """app.run(main), with a UserError reported as one message on stderr and exit status 2."""
  argv = sys.argv if argv is None else argv
  try:
    app.run(main, argv, flags_parser=parse_flags)
  except errors.UserError as e:
    if verbose(argv):
      traceback.print_exc()
    sys.stderr.write(f'Error: {e}\n')
    sys.exit(USER_ERROR_STATUS)
