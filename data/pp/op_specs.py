"""What each pp op is, for both of its executors: its name, its arguments and their defaults,
whether it draws random numbers and its role. No TensorFlow and no JAX.

The host's TensorFlow ops (data/pp/ops.py) and the accelerator's jax.numpy ops
(data/pp/device_augment.py) are factories declared with `@takes(name)`: a pp string's arguments are
bound to the op's signature here, its defaults filled in, and the factory receives every argument,
so neither side states a default of its own. data/pp/device_split.py reads the roles (which ops
the accelerator has) and the label ops' `key` and `key_result` from the same signatures.

Roles: 'head' ops run only on the host (decoding, cropping and resizing need the encoded bytes or
change the image's size); 'image' ops change only 'image', 'label' ops read the ids under `key`
and write `key_result`; 'keep' keeps the named keys. Every op but the head's has a jax.numpy
executor too.
"""
import functools
import inspect
from typing import Callable, NamedTuple

REQUIRED = inspect.Parameter.empty
ROLES = ('head', 'image', 'label', 'keep')


class OpSpec(NamedTuple):
  """One pp op. params: (name, default) pairs in order, default REQUIRED for an argument without
  one; a name '*keys' takes any number of positional arguments."""
  name: str
  params: tuple
  random: bool
  role: str

  @property
  def signature(self) -> inspect.Signature:
    return inspect.Signature([_parameter(name, default) for name, default in self.params])

  def bind(self, args: tuple, kwargs: dict) -> inspect.BoundArguments:
    """The op's arguments from a pp string's, defaults filled in; a TypeError names what does
    not fit the signature."""
    bound = self.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound


def _parameter(name: str, default) -> inspect.Parameter:
  if name.startswith('*'):
    return inspect.Parameter(name[1:], inspect.Parameter.VAR_POSITIONAL)
  return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)


_SPECS = (
    OpSpec('decode', (('channels', 3),), False, 'head'),
    OpSpec('resize', (('size', REQUIRED), ('method', 'bilinear'), ('antialias', False)), False,
           'head'),
    OpSpec('resize_small', (('smaller_size', REQUIRED), ('method', 'area'), ('antialias', False)),
           False, 'head'),
    OpSpec('central_crop', (('size', REQUIRED),), False, 'head'),
    OpSpec('inception_crop', (('size', REQUIRED), ('area_min', 5), ('area_max', 100),
                              ('aspect_min', 3 / 4), ('aspect_max', 4 / 3)), True, 'head'),
    OpSpec('flip_lr', (), True, 'image'),
    OpSpec('randaug', (('num_layers', 2), ('magnitude', 15), ('arithmetic', 'project')), True,
           'image'),
    OpSpec('value_range', (('vmin', -1), ('vmax', 1), ('in_min', 0), ('in_max', 255),
                           ('clip_values', False)), False, 'image'),
    OpSpec('onehot', (('depth', REQUIRED), ('key', 'label'), ('key_result', 'labels'),
                      ('on', 1.0), ('off', 0.0)), False, 'label'),
    OpSpec('multi_hot', (('depth', REQUIRED), ('key', 'labels'), ('key_result', 'labels')), False,
           'label'),
    OpSpec('keep', (('*keys', REQUIRED),), False, 'keep'),
)
OPS = {spec.name: spec for spec in _SPECS}
# The ops the accelerator runs, in OPS's order.
DEVICE_OPS = tuple(name for name, spec in OPS.items() if spec.role != 'head')


def names(role: str) -> tuple[str, ...]:
  """The ops of one of ROLES, in OPS's order."""
  return tuple(name for name, spec in OPS.items() if spec.role == role)


def takes(name: str) -> Callable:
  """Declares a factory the executor of op `name`: called with some of the op's arguments, the
  factory receives all of them, in order, with OPS's defaults filled in; its signature reads
  as the op's."""
  spec = OPS[name]

  def declare(factory: Callable) -> Callable:
    @functools.wraps(factory)
    def bound_factory(*args, **kwargs):
      bound = spec.bind(args, kwargs)
      return factory(*bound.args, **bound.kwargs)
    bound_factory.__signature__ = spec.signature
    return bound_factory
  return declare
