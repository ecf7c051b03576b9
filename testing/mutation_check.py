"""Breaks the library (routing, augmentation, and what the goldens pin) on purpose, one line at
a time, and checks that the suite notices.

  python -m testing.mutation_check [--only NAME] [--out FILE]

Each mutation replaces one line's text of the library (the exact text must occur once) in a
fresh copy of the tracked files, then runs the tests that should catch it; the mutation is
caught when they fail. A mutation that survives is a hole in the tests. Prints one line per
mutation and exits 1 if any survived. It costs a pytest process per mutation (a few minutes in
all), so it is a tool to run by hand after changing the mutated code or its tests, not part of
the suite.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import NamedTuple

from base import atomic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mutation(NamedTuple):
  name: str
  path: str
  old: str
  new: str
  tests: tuple[str, ...]


MUTATIONS = (
    Mutation('lossfree combine without its bias', 'vmoe/routing/lab_routers.py',
             'return sigmoid_gate.combine_weights(inputs.logits, scores,',
             'return sigmoid_gate.combine_weights(inputs.logits, inputs.logits,',
             ('vmoe/routing/lab_routers_test.py::'
              'test_lossfree_combine_weighs_the_experts_its_bias_chose',)),
    Mutation('top-p loss dropped', 'vmoe/routing/lab_routers.py',
             'return loss, top_p.routing_metrics(', 'return 0.0, top_p.routing_metrics(',
             ('vmoe/routing/lab_routers_test.py::test_top_p_losses_and_metrics_by_value',)),
    Mutation('assignment_unfilled inverted', 'vmoe/routing/lab_routers.py',
             "{'assignment_unfilled': 1.0 - jnp.mean(filled) / expected}",
             "{'assignment_unfilled': jnp.mean(filled) / expected}",
             ('vmoe/routing/lab_routers_test.py::'
              'test_assignment_unfilled_counts_the_missing_placements',)),
    Mutation('bias update with the wrong sign', 'vmoe/routing/sigmoid_gate.py',
             'return bias + rate * jnp.sign(jnp.mean(load) - load)',
             'return bias + rate * jnp.sign(load - jnp.mean(load))',
             ('vmoe/routing/router_test.py::test_a_router_with_state_updates_it_once_per_'
              'training_call_and_never_in_evaluation',)),
    Mutation('group score of a gate without bias from its top 2', 'vmoe/routing/sigmoid_gate.py',
             'group_score = jnp.max(grouped, axis=-1)',
             'group_score = jnp.sum(jax.lax.top_k(grouped, 2)[0], axis=-1)',
             ('vmoe/routing/lab_routers_test.py::test_grouped_gate_equals_deepseek_v3s',)),
    Mutation('route scale dropped', 'vmoe/routing/sigmoid_gate.py',
             'return route_scale * scores / total', 'return scores / total',
             ('vmoe/routing/lab_routers_test.py::test_grouped_gate_equals_deepseek_v3s',)),
    Mutation('a router state range inverted', 'vmoe/routing/router.py',
             "metrics[f'state_{name}_range'] = jnp.max(value) - jnp.min(value)",
             "metrics[f'state_{name}_range'] = jnp.min(value) - jnp.max(value)",
             ('vmoe/routing/lab_routers_test.py::test_a_router_state_reports_its_range',)),
    Mutation('top-p dropped share inverted', 'vmoe/routing/top_p.py',
             "'dropped_share': 1.0 - placed / requested}", "'dropped_share': placed / requested}",
             ('vmoe/routing/lab_routers_test.py::test_top_p_losses_and_metrics_by_value',)),
    Mutation('token choice in token-major order', 'vmoe/routing/allocation.py',
             'expert = choice.T.reshape(-1)', 'expert = choice.reshape(-1)',
             ('vmoe/routing/reference_test.py',)),
    Mutation('fixed routing weighs 1 at every k', 'vmoe/routing/fixed_routing.py',
             'return jnp.full(logits.shape, 1.0 / k, jnp.float32)',
             'return jnp.full(logits.shape, 1.0, jnp.float32)',
             ('vmoe/routing/reference_test.py',)),
    Mutation('device tail draws every op from the same key', 'data/pp/device_augment.py',
             'jax.vmap(jax.random.fold_in, (0, None))(keys, call.index)',
             'jax.vmap(jax.random.fold_in, (0, None))(keys, 0)',
             ('data/pp/device_augment_test.py::'
              'test_each_random_op_draws_from_its_place_in_the_string',)),
    Mutation('shipped key ignores the example seed', 'data/stream/shipping.py',
             'low = tf.bitwise.bitwise_and(tf.cast(seed, tf.int64), '
             'tf.constant(0xFFFFFFFF, tf.int64))',
             'low = tf.zeros([2], tf.int64)',
             ('data/stream/pipeline_test.py::'
              'test_the_device_path_ships_uint8_ids_and_keys_that_resume',)),
    Mutation('device multi-hot keeps the padding', 'data/pp/device_augment.py',
             'columns = jnp.where(ids < 0, depth, ids)', 'columns = jnp.where(ids < 0, 0, ids)',
             ('data/pp/device_augment_test.py::test_multi_hot_on_the_device_is_the_hosts',)),
    Mutation('Solarize without the wrap', 'data/pp/randaug_spec.py',
             'return solarize_threshold(level) % 256', 'return solarize_threshold(level)',
             ('data/pp/randaug_golden_test.py::'
              'test_every_op_equals_the_reference_exactly_under_its_arithmetic',)),
    Mutation('Contrast toward the true mean', 'data/pp/randaug.py',
             'level_value = reference_contrast_level(tf.shape(image)[0], tf.shape(image)[1])',
             'level_value = tf.reduce_mean(_grayscale(image))',
             ('data/pp/randaug_golden_test.py::'
              'test_every_op_equals_the_reference_exactly_under_its_arithmetic',)),
    # Caught exactly where this CPU's convolution sums as the golden's did (sums_differ_here);
    # on one that sums otherwise, a level of rounding is within the golden test's bound.
    Mutation('Sharpness rounds its smoothing under the reference arithmetic', 'data/pp/randaug.py',
             'lambda x: tf.floor(tf.clip_by_value(x, 0.0, 255.0))',
             'lambda x: tf.round(tf.clip_by_value(x, 0.0, 255.0))',
             ('data/pp/randaug_golden_test.py::'
              'test_every_op_equals_the_reference_exactly_under_its_arithmetic',)),
    Mutation('MLP GELU without its tanh approximation', 'vmoe/model/vit.py',
             "h = dropout(nn.gelu(dense(self.mlp_dim, 'fc1')(x)))",
             "h = dropout(nn.gelu(dense(self.mlp_dim, 'fc1')(x), approximate=False))",
             ('vmoe/model/vmoe_params_golden_test.py::'
              'test_converted_model_routes_and_classifies_as_v_moe',)),
    Mutation('expert GELU without its tanh approximation', 'vmoe/model/moe.py',
             'h = nn.Dropout(self.dropout_rate, deterministic=not train)(nn.gelu(h))',
             'h = nn.Dropout(self.dropout_rate, deterministic=not train)(nn.gelu(h, False))',
             ('vmoe/model/vmoe_params_golden_test.py::'
              'test_converted_model_routes_and_classifies_as_v_moe',)),
    Mutation('the warm-up one step off', 'vmoe/train/optim.py',
             'warmup = optax.linear_schedule(0.0, schedule.peak_lr, schedule.warmup_steps)',
             'warmup = optax.linear_schedule(0.0, schedule.peak_lr, schedule.warmup_steps + 1)',
             ('vmoe/train/optim_golden_test.py::test_schedule_equals_v_moes_warmup_linear_decay',)),
    Mutation("Adam's b2", 'vmoe/train/optim_config.py', 'b2: float = 0.999', 'b2: float = 0.99',
             ('vmoe/train/optim_golden_test.py::test_ten_adam_steps_equal_v_moes_optimizer',)),
    Mutation("Adam's epsilon", 'vmoe/train/optim.py',
             'optax.adamw(schedule, b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay,',
             'optax.adamw(schedule, b1=opt.b1, b2=opt.b2, eps=1e-7, '
             'weight_decay=opt.weight_decay,',
             ('vmoe/train/optim_golden_test.py::test_ten_adam_steps_equal_v_moes_optimizer',)),
    Mutation("the load loss's threshold without noise", 'vmoe/routing/losses.py',
             'threshold = jax.lax.top_k(noisy_logits, k)[0][:, -1:]',
             'threshold = jax.lax.top_k(logits, k)[0][:, -1:]',
             ('vmoe/routing/losses_golden_test.py::'
              'test_load_loss_equals_v_moes_per_group_at_k_1_and_2',)),
    Mutation("mixup's concentration", 'vmoe/train/train_step.py',
             'jnp.full((num_chunks, size), concentration, jnp.float32))',
             'jnp.full((num_chunks, size), 2 * concentration, jnp.float32))',
             ('vmoe/train/train_step_golden_test.py::'
              'test_mixup_equals_v_moes_given_its_key_and_batch',)),
    Mutation("few-shot's l2 scaled", 'evaluation/fewshot.py',
             'path.rhs / (path.eigenvalues + l2)[:, None]',
             'path.rhs / (path.eigenvalues + 2 * l2)[:, None]',
             ('evaluation/fewshot_golden_test.py::'
              'test_ridge_accuracy_equals_big_visions_for_every_l2',)),
    Mutation("the inception crop's area range", 'data/pp/op_specs.py',
             "('area_min', 5)", "('area_min', 8)",
             ('data/pp/ops_golden_test.py::'
              'test_window_area_and_aspect_are_distributed_as_v_moes',)),
)


def _copy_tracked(destination: str) -> None:
  files = subprocess.run(['git', '-C', REPO, 'ls-files', '--cached', '--others',
                          '--exclude-standard'], capture_output=True, text=True,
                         check=True).stdout.split()
  for path in files:
    source = os.path.join(REPO, path)
    if os.path.isfile(source):
      os.makedirs(os.path.dirname(os.path.join(destination, path)) or destination, exist_ok=True)
      shutil.copy2(source, os.path.join(destination, path))


def check(mutation: Mutation, directory: str) -> dict:
  """Applies `mutation` in `directory` (a copy), runs its tests, restores the file."""
  path = os.path.join(directory, mutation.path)
  with open(path, encoding='utf-8') as f:
    original = f.read()
  if original.count(mutation.old) != 1:
    raise ValueError(f'{mutation.name}: {mutation.old!r} must occur once in {mutation.path}')
  with open(path, 'w', encoding='utf-8') as f:
    f.write(original.replace(mutation.old, mutation.new))
  try:
    done = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-x', '-p', 'no:xdist',
                           *mutation.tests], cwd=directory, capture_output=True, text=True,
                          check=False)
  finally:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(original)
  failed = [line.split(' - ')[0].removeprefix('FAILED ') for line in done.stdout.splitlines()
            if line.startswith('FAILED ')]
  return {'mutation': mutation.name, 'file': mutation.path, 'caught': done.returncode == 1,
          'failing': failed}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--only', help='Run the mutations whose name contains this.')
  parser.add_argument('--out', help='Also write the results as JSON here.')
  args = parser.parse_args()
  chosen = [m for m in MUTATIONS if not args.only or args.only in m.name]
  results = []
  with tempfile.TemporaryDirectory() as directory:
    _copy_tracked(directory)
    for mutation in chosen:
      results.append(check(mutation, directory))
      r = results[-1]
      print(f'{"caught  " if r["caught"] else "SURVIVED"} {r["mutation"]} ({r["file"]}): '
            f'{", ".join(r["failing"]) or "no test failed"}', flush=True)
  if args.out:
    atomic.write_json(args.out, results)
  return 0 if all(r['caught'] for r in results) else 1


if __name__ == '__main__':
  sys.exit(main())
