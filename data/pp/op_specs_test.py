"""Each executor registers exactly data/pp/op_specs.py's ops and reads their arguments from it."""
import inspect

import pytest

from data.pp import device_augment
from data.pp import op_specs
from data.pp import ops


def test_the_host_runs_every_op_and_the_accelerator_every_op_but_the_heads():
  assert set(ops.OPS) == set(op_specs.OPS)
  assert set(device_augment.OPS) == set(op_specs.DEVICE_OPS) == set(op_specs.OPS) - set(
      op_specs.names('head'))
  assert all(spec.role in op_specs.ROLES for spec in op_specs.OPS.values())


@pytest.mark.parametrize('executor', [ops.OPS, device_augment.OPS], ids=['host', 'device'])
def test_every_registered_factory_is_declared_for_its_own_op(executor):
  for name, factory in executor.items():
    assert inspect.signature(factory) == op_specs.OPS[name].signature, name


def test_a_factory_receives_every_argument_with_the_defaults_filled_in():
  received = []

  @op_specs.takes('onehot')
  def onehot(*args):
    received.append(args)

  onehot(10, key_result='y')
  onehot(3, 'id', on=2.0)
  assert received == [(10, 'label', 'y', 1.0, 0.0), (3, 'id', 'labels', 2.0, 0.0)]
  with pytest.raises(TypeError, match='depth'):
    onehot()
  with pytest.raises(TypeError, match='unexpected'):
    onehot(10, colour='red')
  assert str(op_specs.OPS['keep'].signature) == '(*keys)'
