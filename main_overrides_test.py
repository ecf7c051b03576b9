"""main.py's command line, fuzzed: any --config argument and overrides parse, or fail with one
"Error:" line and exit status 2, never a traceback.

Each example goes through main.py's own path in this process: vmoe/run/cli.py `run` (absl's app.run
with cli.parse_flags) and main.parse_experiment, on the global absl flags, which `reset` returns
to their state before any parse (ml-collections registers one flag per override, read from
sys.argv, as main.py's process has it). Hypothesis is seeded (43) and runs EXAMPLES = 2,000
examples without a deadline, in about 10 s of CPU; the examples pinned below are what it found.
"""
import contextlib
import io
import sys

from absl import flags
import hypothesis
from hypothesis import strategies as st

import main
from configs import tiny
from vmoe.run import cli

EXAMPLES = 2000
CONFIG = '--config'
WORKDIR = '--workdir=/nonexistent/workdir'    # Never created: parsing stops before the workdir.


def _dotted(tree: dict, prefix: str = '') -> list[str]:
  keys = []
  for key, value in tree.items():
    keys += _dotted(value, f'{prefix}{key}.') if isinstance(value, dict) else [prefix + key]
  return keys


# Every key of configs/tiny.py's config, dotted: the schema the overrides draw from.
SCHEMA = _dotted(tiny.get_config().to_dict())


def reset() -> None:
  """absl's global flags as before any parse: values unparsed, override flags removed."""
  flags.FLAGS.unparse_flags()
  for name in [n for n in flags.FLAGS if n.startswith(f'{CONFIG[2:]}.')]:
    delattr(flags.FLAGS, name)


def run_main_parse(args: list[str]) -> tuple[int, str]:
  """(exit status, stderr) of main.py ARGS up to its parsed experiment (0 when it parses)."""
  reset()
  argv, saved_argv = ['main.py', *args, WORKDIR], sys.argv
  sys.argv = argv
  stderr = io.StringIO()
  try:
    with contextlib.redirect_stderr(stderr):
      cli.run(lambda _: main.parse_experiment() and None, argv)
  except SystemExit as e:
    return e.code or 0, stderr.getvalue()
  finally:
    sys.argv = saved_argv
  return 0, stderr.getvalue()


def assert_parses_or_one_error_line(args: list[str]) -> int:
  """Asserts the property of the module docstring; returns the exit status."""
  status, stderr = run_main_parse(args)
  lines = stderr.splitlines()
  errors = [line for line in lines if line.startswith('Error: ')]
  if status == 0:
    assert not errors, (args, stderr)
  else:
    assert status == 2 and len(errors) == 1 and lines[-1] == errors[0], (args, stderr)
  return status


NUMBERS = st.one_of(st.integers(-10**30, 10**30).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(['nan', '-nan', 'inf', '-inf', 'NaN', '1e400', '-0', '0',
                                     '0.0', '1', '-1', '1e-400']))
WORDS = st.one_of(st.sampled_from(['', 'True', 'False', 'None', '()', '[]', "('a', 'b')",
                                   '{}', 'abc', 'softmax_tc', 'B/32', 'XS/7', '"quoted"']),
                  st.text(st.characters(codec='ascii', exclude_characters='\x00'), max_size=12))
VALUES = st.one_of(NUMBERS, WORDS)
IDENTIFIERS = st.from_regex(r'[a-z_][a-z0-9_]{0,8}', fullmatch=True)
OVERRIDE_KEYS = st.one_of(st.sampled_from(SCHEMA), st.sampled_from(SCHEMA), st.tuples(
    st.sampled_from(['', *sorted({k.rpartition('.')[0] + '.' for k in SCHEMA if '.' in k})]),
    IDENTIFIERS).map(''.join))
ARGS = st.one_of(
    st.builds(lambda router, c, runlocal: f'router={router},c={c},runlocal={runlocal}',
              st.sampled_from(['softmax_tc', 'sinkhorn_ec', 'soft_moe', 'dense', 'nope']),
              NUMBERS, st.sampled_from(['True', 'False', 'maybe', '1'])),
    st.text(st.sampled_from('router=c,runlocal1.5nanif =:'), max_size=20))
CONFIG_FILES = st.one_of(
    st.just('configs/tiny.py'),
    st.builds(lambda arg: f'configs/tiny.py:{arg}', ARGS),
    st.sampled_from(['configs/b32_sinkhorn_ec.py:c=2', 'configs/b32_dense.py:runlocal=True',
                     'configs/no_such_config.py', 'configs/', 'configs/tiny.py:', '',
                     'configs/tiny.py:router=softmax_tc:c=2']))


@hypothesis.seed(43)
@hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(CONFIG_FILES, st.lists(st.tuples(OVERRIDE_KEYS, VALUES), max_size=3))
@hypothesis.example('configs/tiny.py', [('_', '0')])      # An unknown top-level key.
@hypothesis.example('configs/tiny.py', [('batch_size', '\r')])    # Echoed, it split the line.
@hypothesis.example('configs/no_such_config.py', [])
@hypothesis.example('configs/tiny.py', [('schedule.peak_lr', 'nan')])
# A dense config has no router block.
@hypothesis.example('configs/b32_dense.py:runlocal=True', [('moe.router.capacity_factor', '0')])
def test_any_command_line_parses_or_is_one_error_line(config_file, overrides):
  status = assert_parses_or_one_error_line([f'{CONFIG}={config_file}', *(
      f'{CONFIG}.{key}={value}' for key, value in overrides)])
  hypothesis.event('parsed' if status == 0 else 'refused')


def test_reset_forgets_the_previous_examples_overrides():
  assert_parses_or_one_error_line([f'{CONFIG}=configs/tiny.py', f'{CONFIG}.batch_size=32'])
  assert main.parse_experiment().batch_size == 32
  assert_parses_or_one_error_line([f'{CONFIG}=configs/tiny.py'])
  assert main.parse_experiment().batch_size == tiny.BATCH_SIZE


def test_a_number_that_must_be_finite_is_refused_as_nan_or_inf():
  for override in ('schedule.peak_lr=nan', 'optimizer.weight_decay=inf',
                   'moe.router.capacity_factor=nan', 'mixup_alpha=-inf'):
    status, stderr = run_main_parse([f'{CONFIG}=configs/tiny.py', f'{CONFIG}.{override}'])
    key = override.partition('=')[0]
    assert status == 2 and f'{key} must be a finite number' in stderr, stderr
  status, stderr = run_main_parse([f'{CONFIG}=configs/tiny.py:c=nan'])
  assert status == 2 and "c='nan': expected a finite float" in stderr, stderr


def test_a_config_file_that_does_not_exist_is_one_error_line():
  for extra in ([], [f'{CONFIG}.batch_size=8']):
    status, stderr = run_main_parse([f'{CONFIG}=configs/no_such_config.py', *extra])
    assert status == 2 and stderr == (
        "Error: cannot load the config file: [Errno 2] No such file or directory: "
        "'configs/no_such_config.py'; give an existing one, e.g. --config=configs/tiny.py.\n")
