"""Which ops of a pp string the accelerator runs under data.augment_on = 'device', and what the
host ships for them. No TensorFlow and no JAX: the host's pipeline (data/stream/shipping.py), the
training program and the evaluator read the same split, and the program is built where
TensorFlow is absent.

The tail is the longest run of ops at the end of the string that the accelerator has
(data/pp/op_specs.py's DEVICE_OPS, which data/pp/device_augment.py runs: flip_lr, randaug,
value_range, onehot, multi_hot and keep). The head, the ops before it, runs on the host as before:
decoding, cropping and resizing need the encoded bytes or change the image's size. For each example
the host ships:
  'image'        uint8 (H, W, C), the head's output;
  label ids      each tail label op's input (its `key`) as integers: onehot's id, int32 (); for
                 multi_hot, the ids padded with -1 to MAX_LABEL_IDS, int32 (MAX_LABEL_IDS,). A
                 record with more ids fails on the host, naming this limit;
  AUGMENT_KEY    uint32 (2,), when the tail has a random op: the example's seed, which
                 data/stream/batches.py folds from the run's seed, the process and the example's
                 position in the data order, so a resumed run draws the same augmentation;
  the tail's keep keys that no tail op makes (a few-shot set's int 'label').
The accelerator then runs the tail's ops in their order. The random op at place i of the string
draws from fold_in(AUGMENT_KEY, i), as the host's op at place i draws from fold_in(example seed, i).
Label ops touch only their keys and image ops only 'image', so running them on either side of the
transfer changes nothing but the random numbers.
"""
import dataclasses

from data.pp import op_specs
from data.pp import syntax as pp_syntax

AUGMENT_ON = ('host', 'device')      # data.augment_on's values.
IMAGE_OPS = op_specs.names('image')
LABEL_OPS = op_specs.names('label')
DEVICE_OPS = op_specs.DEVICE_OPS
AUGMENT_KEY = 'augment_key'
MAX_LABEL_IDS = 64                   # The label ids a multi-label record may ship.


@dataclasses.dataclass(frozen=True)
class LabelInput:
  """What the host ships for one tail label op: the ids under `key`, one id (multi False) or a
  padded list of MAX_LABEL_IDS (multi True)."""
  key: str
  multi: bool


@dataclasses.dataclass(frozen=True)
class Split:
  """A pp string cut into the host's head (its first head_length ops) and the accelerator's
  tail."""
  pp: str
  head_length: int
  tail: tuple[pp_syntax.OpCall, ...]

  @property
  def random(self) -> bool:
    return any(op_specs.OPS[op.name].random for op in self.tail)

  @property
  def label_inputs(self) -> tuple[LabelInput, ...]:
    return tuple(LabelInput(label_keys(op)[0], op.name == 'multi_hot')
                 for op in self.tail if op.name in LABEL_OPS)

  @property
  def keep(self) -> tuple[str, ...] | None:
    """The keys of the tail's last keep, or None when it has none."""
    keeps = [op.args for op in self.tail if op.name == 'keep']
    return tuple(keeps[-1]) if keeps else None

  def passed_keys(self) -> tuple[str, ...]:
    """The tail's keep keys that the host ships as they are: neither the image, nor a label op's
    input or output."""
    if not self.tail:
      return ()
    made = {label_keys(op)[1] for op in self.tail if op.name in LABEL_OPS}
    inputs = {label.key for label in self.label_inputs}
    return tuple(k for k in self.keep if k not in made | inputs | {'image'})

  def shipped_shapes(self, image_shape: tuple) -> dict:
    """{key: (shape, dtype name)} of one shipped training example, for an image (H, W, C); the
    tail's keep may keep no key it does not make (the training step reads none)."""
    shapes = {'image': (tuple(image_shape), 'uint8')}
    for label in self.label_inputs:
      shapes[label.key] = ((MAX_LABEL_IDS,) if label.multi else (), 'int32')
    if self.random:
      shapes[AUGMENT_KEY] = ((2,), 'uint32')
    unknown = list(self.passed_keys())
    if unknown:
      raise ValueError(f'data.pp_train {self.pp!r} keeps {unknown}, which the training step does '
                       'not read; keep only "image" and the labels.')
    return shapes


def label_keys(op: pp_syntax.OpCall) -> tuple[str, str]:
  """(key, key_result) of a label op, from its arguments or data/pp/op_specs.py's defaults (a
missing depth is left to the op's own check)."""
  try:
    bound = op_specs.OPS[op.name].signature.bind_partial(*op.args, **op.kwargs)
  except TypeError as e:
    raise ValueError(f'pp op {op.spec!r}: {e}.') from None
  bound.apply_defaults()
  return bound.arguments['key'], bound.arguments['key_result']


def label_depth(op: pp_syntax.OpCall) -> int:
  """The class count of a label op: its `depth`, the first argument."""
  return op.kwargs['depth'] if 'depth' in op.kwargs else op.args[0]


def label_depths(pp: str) -> list[int]:
  """The class counts of `pp`'s label ops, in order."""
  return [label_depth(op) for op in pp_syntax.parse(pp)
          if op.name in LABEL_OPS and (op.args or 'depth' in op.kwargs)]


def check_label_depths(pp: str, num_classes: int, where: str) -> None:
  """Fails when a label op of `pp` makes another number of classes than `num_classes`."""
  for depth in label_depths(pp):
    if depth != num_classes:
      raise ValueError(f'{where}: {pp!r} makes {depth} classes but data.num_classes is '
                       f'{num_classes}; make them equal.')


def tail_on_device(pp: str, augment_on: str) -> Split | None:
  """The Split of `pp` when data.augment_on = `augment_on` moves a tail to the accelerator, else
  None (a host run, or a pp that ends in the host's ops)."""
  if augment_on != 'device':
    return None
  cut = split(pp)
  return cut if cut.tail else None


def split(pp: str) -> Split:
  """The Split of `pp` (the module docstring). A tail that has ops but does not end in keep fails:
  the host would not know which keys to ship."""
  calls = pp_syntax.parse(pp)
  head = len(calls)
  while head and calls[head - 1].name in DEVICE_OPS:
    head -= 1
  tail = tuple(calls[head:])
  if tail and tail[-1].name != 'keep':
    raise ValueError(f'pp {pp!r} ends in ops the accelerator runs under data.augment_on="device" '
                     f'but not in keep(...): end it with keep naming the keys the model reads, '
                     'e.g. keep("image", "labels").')
  for op in tail:
    if op.name in LABEL_OPS and 'image' in label_keys(op):
      raise ValueError(f'pp op {op.spec!r} reads or writes "image"; name its label keys.')
  return Split(pp, head, tail)


def check_augment_on(value: str) -> None:
  if value not in AUGMENT_ON:
    raise ValueError(f'data.augment_on must be one of {", ".join(AUGMENT_ON)} (where the pp\'s '
                     f'tail runs: docs/data.md), got {value!r}.')
