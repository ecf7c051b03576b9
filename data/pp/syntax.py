"""The syntax of a pp string, without TensorFlow: 'op|op(args)|...' -> the ops' names and literal
arguments.

data/pp/ops.py builds the host's TensorFlow steps from it, and data/pp/device_augment.py the
accelerator's tail; both read a string the same way, and the training program parses its tail
on machines that have JAX but no TensorFlow.
"""
import ast
from typing import NamedTuple


class OpCall(NamedTuple):
  """One op of a pp string: its text, name, literal arguments and place in the string."""
  spec: str
  name: str
  args: tuple
  kwargs: dict
  index: int


def parse(pp: str) -> list[OpCall]:
  """The ops of `pp` in order; an empty string or an op that is not `name` or `name(literal
  args)` fails saying what to write."""
  if not isinstance(pp, str) or not pp.strip():
    raise ValueError(f'empty preprocessing string {pp!r}; give ops joined by "|", e.g. '
                     '"decode|value_range(-1, 1)|onehot(10)|keep(\'image\', \'labels\')".')
  return [_parse_op(spec.strip(), pp, i) for i, spec in enumerate(pp.split('|'))]


def _parse_op(spec: str, pp: str, index: int) -> OpCall:
  try:
    node = ast.parse(spec, mode='eval').body
  except SyntaxError:
    node = None
  if isinstance(node, ast.Name):
    return OpCall(spec, node.id, (), {}, index)
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
    try:
      args = tuple(ast.literal_eval(a) for a in node.args)
      kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except ValueError:
      raise ValueError(f'pp op {spec!r} in {pp!r}: arguments must be Python literals '
                       '(numbers, quoted strings, tuples).') from None
    return OpCall(spec, node.func.id, args, kwargs, index)
  raise ValueError(f'cannot parse pp op {spec!r} in {pp!r}; write name or name(args), '
                   'e.g. inception_crop(224).')
