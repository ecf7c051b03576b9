import jax
import jax.numpy as jnp
import pytest

from bench import op_profile

HLO = """
ENTRY %main.2 (a.1: f32[4,4]) -> f32[] {
  %a.1 = f32[4,4]{1,0} parameter(0), metadata={op_name="a"}
  %ynn_fusion.3 = f32[4,4]{1,0} fusion(%a.1), kind=kCustom, metadata={op_name="jit(f)/dot" stack_frame_id=2}
  ROOT %reduce-sum.0 = f32[] reduce(%ynn_fusion.3), metadata={op_name="jit(f)/reduce_sum"}
}
"""


def test_instructions_maps_names_to_shape_and_op_name():
  assert op_profile.instructions(HLO) == {
      'a.1': ('f32[4,4]{1,0}', 'a'), 'ynn_fusion.3': ('f32[4,4]{1,0}', 'jit(f)/dot'),
      'reduce-sum.0': ('f32[]', 'jit(f)/reduce_sum')}


@pytest.mark.parametrize('op_name, expected', [
    ('jit(mixup_step)/jvp(VisionTransformer)/block_01/moe/router/softmax', 'forward/router'),
    ('jit(mixup_step)/transpose(jvp(VisionTransformer))/block_03/moe/experts/dot_general',
     'backward/experts'),
    ('jit(mixup_step)/jvp(VisionTransformer)/block_01/moe/vmap()/gather', 'forward/dispatch_combine'),
    # A transpose inside the model's forward pass is not the backward pass.
    ('jit(mixup_step)/jvp(VisionTransformer)/block_11/moe/transpose(jvp())/x',
     'forward/dispatch_combine'),
    ('jit(mixup_step)/transpose(jvp(VisionTransformer))/block_00/attention/query/dot_general',
     'backward/attention'),
    ('jit(mixup_step)/jvp(VisionTransformer)/block_00/mlp/fc1/dot_general', 'forward/mlp'),
    ('jit(mixup_step)/jvp(VisionTransformer)/block_00/norm2/mul', 'forward/layer_norms'),
    ('jit(mixup_step)/jvp(VisionTransformer)/embedding/conv', 'forward/other'),
    ('jit(mixup_step)/jit(_dirichlet)/jit(_gamma)/vmap()/while', 'mixup'),
    ('jit(mixup_step)/div', 'update_and_loss'),
])
def test_component(op_name, expected):
  assert op_profile.component(op_name) == expected


class TinyStepper:
  """A stand-in for paper_step.Stepper: one compiled matmul traced per op."""

  def __init__(self):
    x = jnp.ones((64, 64))
    forward = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
    self.compiled = forward.lower(x).compile(op_profile.TRACE_OPTIONS)
    self.fields = {'arch': 'tiny', 'router': 'dense', 'dtype': 'float32',
                   'per_device_batch': 1, 'num_experts': 0}
    self.x = x
    self.loads = 0

  def load(self):
    self.loads += 1

  def unload(self):
    self.loads -= 1

  def __call__(self):
    return self.compiled(self.x)


def test_profile_row_attributes_every_traced_op_to_its_instruction():
  stepper = TinyStepper()
  row = op_profile.profile_row(stepper, steps=2, top=5)
  assert stepper.loads == 0
  known = op_profile.instructions(stepper.compiled.as_text())
  assert row['top_ops'] and all(op['name'] in known for op in row['top_ops'])
  # Every op of this function is outside a model: one component holds all the op time.
  assert list(row['components']) == ['update_and_loss']
  assert row['components']['update_and_loss'] == row['op_ms'] > 0
  assert row['top_routing_ops'] == []      # No router here.
  assert row['step_ms'] > 0 and row['first_step_ms'] > 0 and row['minor_faults_per_step'] >= 0


def test_add_extra_subtracts_the_dense_rows_components():
  rows = [{'router': 'dense', 'components': {'forward/mlp': 5.0, 'mixup': 1.0}},
          {'router': 'soft_moe', 'components': {'forward/experts': 7.0, 'mixup': 1.5}}]
  extra = op_profile.add_extra(rows)[1]['extra_ms_by_component']
  assert extra == {'forward/experts': 7.0, 'mixup': 0.5, 'forward/mlp': -5.0}
  assert list(extra) == ['forward/experts', 'mixup', 'forward/mlp']


@pytest.mark.parametrize('flag', ['--routers=dense,nope', '--dispatch-dtypes=float32,float16'])
def test_bad_values_exit_2(flag, capsys):
  with pytest.raises(SystemExit) as exit_info:
    op_profile.parse_args([flag])
  assert exit_info.value.code == 2
  assert 'valid values' in capsys.readouterr().err


def test_dispatch_dtypes_default_to_the_configs():
  assert op_profile.parse_args([]).dispatch_dtypes == [None]
  assert op_profile.parse_args(['--dispatch-dtypes', 'float32,bfloat16']).dispatch_dtypes == [
      'float32', 'bfloat16']
