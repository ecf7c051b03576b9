"""Where a paper step's time goes: XLA's per-op trace of the step, summed by model component.

  python -m bench.op_profile --arch L/16 --routers dense,softmax_tc,sinkhorn_ec \
      --out bench/results/op_profile_l16.json

Each row is bench/paper_step.py's step of one router (same config, batch, E and mesh), compiled
with XLA:CPU's per-thunk trace events on (`TRACE_OPTIONS`), run once untraced on a fresh state
(timed: first_step_ms, with its page faults and system time), then `--steps` steps under
jax.profiler. Every trace event named after an instruction of the compiled program is
one op's run; its instruction's metadata (the JAX name stack) gives its component (`component`):
forward or backward x router, dispatch/combine, experts, attention, dense MLP, layer norms, the
rest of the model, and outside the model the mixup sampling and the update + loss.

Fields of a row: arch, router, dtype, dispatch_dtype, per_device_batch, num_experts, step_ms
(median wall time of the traced steps), op_ms (all ops' time per step, summed over the threads
that ran them: XLA:CPU runs independent ops concurrently, so it can exceed step_ms), components
({name: ms per step}, largest first), top_ops (the longest ops: name, ms, component, shape, the
JAX op name), top_routing_ops (the same, of the router and dispatch/combine components: what MoE
adds besides its experts), the process's minor page faults, user and system CPU seconds per step
over the traced steps, and the same for the untraced first step (first_step_ms,
first_step_minor_faults, first_step_system_s). MoE rows add extra_ms_by_component: their
component times minus the dense row's (same arch, batch, dtype).
"""
import argparse
import collections
import glob
import json
import re
import resource
import sys
import tempfile

from jax import profiler

from base import atomic
from bench import moe_layer
from bench import paper_step
from vmoe import moe

TRACE_OPTIONS = {'xla_cpu_enable_xprof_traceme': True}
_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = (\S+) .*?metadata=\{op_name="([^"]*)"')
MODEL = 'VisionTransformer'
# (substring of the name stack inside the model, component), first match wins.
MODEL_PARTS = (('/moe/router', 'router'), ('/moe/experts', 'experts'),
               ('/moe/', 'dispatch_combine'), ('/attention/', 'attention'), ('/mlp/', 'mlp'),
               ('/norm', 'layer_norms'))
ROUTING = ('/router', '/dispatch_combine')     # The components MoE adds besides its experts.


def instructions(hlo_text: str) -> dict[str, tuple[str, str]]:
  """{instruction name: (shape, JAX op name)} of every instruction of an HLO module's text that
  carries an op name."""
  found = {}
  for line in hlo_text.splitlines():
    match = _INSTRUCTION.match(line)
    if match:
      found[match.group(1)] = (match.group(2), match.group(3))
  return found


def component(op_name: str) -> str:
  """The component of an op from its JAX name stack: 'forward/router', 'backward/experts', ...,
  'forward/other' (embedding, head), or outside the model 'mixup' and 'update_and_loss'."""
  if MODEL not in op_name:
    return 'mixup' if '_dirichlet' in op_name or '_gamma' in op_name else 'update_and_loss'
  # The backward pass is JAX's transpose of the model's linearised forward: transpose(jvp(...)).
  direction = 'backward' if 'transpose(' in op_name[:op_name.find(MODEL)] else 'forward'
  part = next((name for key, name in MODEL_PARTS if key in op_name), 'other')
  return f'{direction}/{part}'


def op_nanoseconds(xspace_path: str, names) -> collections.Counter:
  """{instruction: summed duration (ns)} of the trace events named after an instruction in
  `names`, over every thread of the trace."""
  totals = collections.Counter()
  for plane in profiler.ProfileData.from_file(xspace_path).planes:
    for line in plane.lines:
      for event in line.events:
        if event.name in names:
          totals[event.name] += event.duration_ns
  return totals


def profile_row(stepper, steps: int, top: int) -> dict:
  """The profile of one compiled paper step (see the module's docstring)."""
  known = instructions(stepper.compiled.as_text())
  stepper.load()
  first = resource.getrusage(resource.RUSAGE_SELF)
  # Untraced: the first step on a fresh state.
  first_step_ms = moe_layer.time_ms(stepper, warmup=0, repeats=1)
  with tempfile.TemporaryDirectory() as log_dir:
    before = resource.getrusage(resource.RUSAGE_SELF)
    with profiler.trace(log_dir):
      step_ms = moe_layer.time_ms(stepper, warmup=0, repeats=steps)
    after = resource.getrusage(resource.RUSAGE_SELF)
    path = glob.glob(f'{log_dir}/**/*.xplane.pb', recursive=True)[0]
    op_ns = op_nanoseconds(path, known)
  stepper.unload()
  per_step = lambda ns: round(ns / 1e6 / steps, 3)
  describe = lambda name, ns: {'name': name, 'ms': per_step(ns), 'shape': known[name][0],
                               'component': component(known[name][1]), 'op_name': known[name][1]}
  components = collections.Counter()
  for name, ns in op_ns.items():
    components[component(known[name][1])] += ns
  fields = stepper.fields
  return {
      **{k: fields[k] for k in ('arch', 'router', 'dtype', 'per_device_batch', 'num_experts')},
      'step_ms': round(step_ms, 3), 'op_ms': per_step(sum(op_ns.values())),
      'components': {name: per_step(ns) for name, ns in components.most_common()},
      'top_ops': [describe(name, ns) for name, ns in op_ns.most_common(top)],
      'top_routing_ops': [describe(name, ns) for name, ns in op_ns.most_common()
                          if component(known[name][1]).endswith(ROUTING)][:top],
      'first_step_ms': round(first_step_ms, 3),
      'first_step_minor_faults': before.ru_minflt - first.ru_minflt,
      'first_step_system_s': round(before.ru_stime - first.ru_stime, 3),
      'minor_faults_per_step': round((after.ru_minflt - before.ru_minflt) / steps),
      'user_s_per_step': round((after.ru_utime - before.ru_utime) / steps, 3),
      'system_s_per_step': round((after.ru_stime - before.ru_stime) / steps, 3)}


def add_extra(rows: list[dict]) -> list[dict]:
  """MoE rows with their component times minus the dense row's (when the run has it)."""
  dense = next((r for r in rows if r['router'] == paper_step.DENSE), None)
  if dense is None:
    return rows
  out = []
  for r in rows:
    if r is not dense:
      names = sorted(set(r['components']) | set(dense['components']))
      extra = {n: round(r['components'].get(n, 0) - dense['components'].get(n, 0), 3)
               for n in names}
      r = {**r, 'extra_ms_by_component': dict(sorted(extra.items(), key=lambda kv: -kv[1]))}
    out.append(r)
  return out


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--arch', default='B/32', choices=paper_step.ARCHS)
  parser.add_argument('--routers', default=','.join(paper_step.ROUTERS))
  parser.add_argument('--dtype', default='float32', choices=paper_step.DTYPES)
  parser.add_argument('--per-device-batch', type=int, default=paper_step.CPU_PER_DEVICE_BATCH)
  parser.add_argument('--num-experts', type=int, default=paper_step.CPU_NUM_EXPERTS)
  parser.add_argument('--dispatch-dtypes', default='',
                      help='comma-separated --config.moe.dispatch_dtype values: each MoE router '
                           'is profiled with each (default: the paper configs\' bfloat16)')
  parser.add_argument('--steps', type=int, default=2, help='traced steps per router')
  parser.add_argument('--top', type=int, default=15, help='longest ops kept per row')
  parser.add_argument('--out', default='bench/results/op_profile.json')
  args = parser.parse_args(argv)
  args.routers = [r for r in args.routers.split(',') if r]
  if not set(args.routers) <= set(paper_step.ROUTERS):
    parser.error(f'--routers: valid values are {", ".join(paper_step.ROUTERS)}')
  args.dispatch_dtypes = [d for d in args.dispatch_dtypes.split(',') if d] or [None]
  if not set(args.dispatch_dtypes) <= {None, *moe.DISPATCH_DTYPES}:
    parser.error(f'--dispatch-dtypes: valid values are {", ".join(moe.DISPATCH_DTYPES)}')
  if args.steps < 1 or args.per_device_batch < 1 or args.num_experts < 1:
    parser.error('--steps, --per-device-batch and --num-experts must be >= 1')
  return args


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  rows = []
  grid = [(router, dispatch) for router in args.routers
          for dispatch in ([None] if router == paper_step.DENSE else args.dispatch_dtypes)]
  for router, dispatch in grid:   # One compiled step alive at a time (L/16 on a 24 GiB host).
    overrides = {'moe.dispatch_dtype': dispatch} if dispatch else {}
    stepper = paper_step.Stepper(args.arch, router, args.dtype, args.per_device_batch,
                                 args.num_experts, False, compiler_options=TRACE_OPTIONS,
                                 overrides=overrides)
    rows.append({**profile_row(stepper, args.steps, args.top),
                 'dispatch_dtype': stepper.fields['dispatch_dtype']})
    del stepper
    print(json.dumps({k: rows[-1][k] for k in ('router', 'dispatch_dtype', 'step_ms', 'op_ms',
                                                'components')}),
          flush=True)
  atomic.write_json(args.out, {
      'machine': moe_layer.machine(),
      'method': f'XLA:CPU per-op trace ({TRACE_OPTIONS}) of {args.steps} steps per router after '
                'one untraced step; ms per step', 'rows': add_extra(rows)})
  print(f'wrote {args.out}')


if __name__ == '__main__':
  main()
