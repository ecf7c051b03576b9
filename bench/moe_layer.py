"""Speed of the MoE layer for every router, against three baselines (a benchmark, not a test).

One measurement:
  python -m bench.moe_layer --router sinkhorn_ec --groups 8 --group-size 400 --dim 768 \
      --experts 32 --capacity 1 --json
prints one JSON line with the median forward and forward+backward milliseconds after warm-up.
Besides the router names of vmoe.routing.router.ROUTERS, --router accepts the baselines
  round_robin       tokens assigned to experts in fixed order, no router: the sparse layers' floor;
  dense_mlp         one MLP over the same tokens: the same active compute at c=1;
  soft_moe_experts  Soft MoE's experts alone, on its (E, images, C, D) buffers copied from the
                    tokens: the floor of the Soft MoE layer (its routing, dispatch and combine
                    removed);
and --dispatch einsum runs a sparse router with the dense one-hot einsum dispatch/combine instead
of gather/scatter (the `einsum` baseline). --dispatch-dtype bfloat16 runs the MoE layers with the
paper configs' moe.dispatch_dtype (default float32, in which the committed results were made).

`--all --out FILE` (what `make bench` runs, with --groups 16: 128 images per device, the V-MoE
recipe's per-core batch of 4096 images on a TPUv3-32) times every paper router, with both
dispatches, and the baselines at a B/32-like shape (S=400 tokens per group, 8 images of 50
tokens) and a B/16-like one (S=1576, 8 images of 197 tokens), c = 1 and 2 (--capacities), then
writes all rows and the target ratios to FILE atomically. Every row records `expert_tokens`, the
token-slots its experts process per call (E x C per routing group, or every token for the dense
MLP), so the ratios include each router's step over the dense MLP scaled by that FLOPs ratio
(`vs_flops_scaled_dense`: the issue's Soft MoE target is <= 1.1), and Soft MoE's step over its own
experts alone (`vs_own_experts`). Every row also records `xla_flops`, XLA's count of its compiled
forward+backward (routing, dispatch and combine arithmetic included), and the ratios scale the
dense MLP by it too (`vs_xla_flops_scaled_dense`). The grid's rows of one shape and
capacity are timed in interleaved rounds (measure_interleaved), so host noise does not skew the
ratios between them. --routers narrows the grid (the baselines always run).

--expert-shards N times one device of a mesh of N expert devices (mesh.expert = N; the paper
configs' default on 32 devices is N = 32, V-MoE's num_expert_partitions = E): the device routes its
own groups over all E experts, then runs its E / N experts on the slots of N devices' groups
(ExpertShard). `make bench` writes that layout at N = 32 to bench/results/moe_layer_sharded.json.
"""
import argparse
import functools
import json
import os
import platform
import statistics
import time
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from base import atomic
from configs import common
from vmoe import flops
from vmoe import moe
from vmoe.routing import allocation
from vmoe.routing import router as router_lib

BASELINES = ('round_robin', 'dense_mlp', 'soft_moe_experts')
IMAGES_PER_GROUP = 8    # V-MoE's routing groups: 8 images.
# Tokens the MoE layers of a 224 px image see: (224 / patch)^2 patches plus the class token.
TOKENS_PER_IMAGE = {'B/32': 7 * 7 + 1, 'B/16': 14 * 14 + 1}     # 50 and 197.
GROUP_SIZES = tuple(IMAGES_PER_GROUP * n for n in TOKENS_PER_IMAGE.values())   # 400 and 1576.


class ExpertShard(nn.Module):
  """One device's experts on a mesh of `shards` expert devices, emulated on this one device.

  On that mesh the device holds E / shards experts, and the all-to-all hands it their slots of
  every device's groups: buffers (E / shards, shards * G, C, D). Here the device's own buffers
  (E, G, C, D) are re-laid into that shape by a local transpose of the same bytes, so routing,
  dispatch, the experts' matmuls and combine run at the mesh's per-device shapes; the
  communication itself (the all-to-all over the interconnect) is not timed.
  """
  num_experts: int
  mlp_dim: int
  dropout_rate: float = 0.0
  expert_init: str = 'shared'
  dtype: jnp.dtype = jnp.float32
  output_dtype: jnp.dtype | None = None
  shards: int = 1

  @nn.compact
  def __call__(self, buffers, *, train):
    num_experts, num_groups, capacity, dim = buffers.shape
    local = num_experts // self.shards
    relayout = lambda a, n, m: jnp.swapaxes(a.reshape(n, m, num_groups, capacity, dim), 0, 1)
    received = relayout(buffers, self.shards, local).reshape(local, -1, capacity, dim)
    outputs = moe.Experts(local, self.mlp_dim, self.dropout_rate, self.expert_init, self.dtype,
                          self.output_dtype, name='experts')(received, train=train)
    return relayout(outputs, local, self.shards).reshape(buffers.shape)


def experts_class(shards: int):
  """The experts of one device: all E (shards = 1, the layout of mesh.expert = 1) or its
  E / shards of an expert-sharded mesh (ExpertShard)."""
  return moe.Experts if shards == 1 else functools.partial(ExpertShard, shards=shards)


class RoundRobin(nn.Module):
  """Token t goes to expert t mod E, slot t div E (tokens past E*C are dropped); weight 1."""
  num_experts: int
  mlp_dim: int
  experts_class: type = moe.Experts

  @nn.compact
  def __call__(self, x, *, train):
    num_groups, num_tokens, _ = x.shape
    capacity = allocation.compute_capacity(num_tokens, self.num_experts, 1)
    slot_token = jnp.arange(self.num_experts * capacity, dtype=jnp.int32)
    slot_token = slot_token.reshape(capacity, self.num_experts).T       # (E, C): slot c of e -> c*E+e
    slot_token = jnp.where(slot_token < num_tokens, slot_token, num_tokens)
    slot_token = jnp.broadcast_to(slot_token, (num_groups,) + slot_token.shape)
    weight = jnp.ones(slot_token.shape, jnp.float32)
    experts = self.experts_class(self.num_experts, self.mlp_dim, name='experts')
    outputs = experts(moe.dispatch_by_index(x, slot_token), train=train)
    return moe.combine_by_index(outputs, slot_token, weight, num_tokens)


class DenseMlp(moe.Experts):
  """One GELU MLP over all tokens (the Experts module with a single expert)."""

  def __call__(self, x, *, train):
    return super().__call__(x[None], train=train)[0]


class SoftMoeExperts(nn.Module):
  """The experts of Soft MoE alone: buffers (E, images, C, D) copied from each image's tokens
  (slot k takes token k mod T), with no routing, dispatch or combine."""
  num_experts: int
  mlp_dim: int
  slots_per_expert: int = 1
  experts_class: type = moe.Experts

  @nn.compact
  def __call__(self, x, *, train):
    num_groups, num_tokens, dim = x.shape
    images = x.reshape(num_groups * IMAGES_PER_GROUP, num_tokens // IMAGES_PER_GROUP, dim)
    slots = jnp.arange(self.num_experts * self.slots_per_expert) % images.shape[1]
    buffers = images[:, slots].reshape(images.shape[0], self.num_experts, self.slots_per_expert,
                                       dim)
    experts = self.experts_class(self.num_experts, self.mlp_dim, name='experts')
    return experts(jnp.transpose(buffers, (1, 0, 2, 3)), train=train)


def router_config(name: str, capacity: float, experts: int) -> router_lib.RouterConfig:
  """The configs' router preset (noise and balance losses for softmax token choice, the
  sparsity-constrained solver's steps and start for this capacity)."""
  preset = common.moe_config(name, capacity, experts, IMAGES_PER_GROUP)
  return router_lib.RouterConfig(**preset.router.to_dict())


def expert_tokens(args) -> int:
  """Token-slots the experts process per call: E x C per routing group (Soft MoE routes each
  image, round robin is a c=1 layer) times the groups; every token for the dense MLP."""
  if args.router == 'dense_mlp':
    return args.groups * args.group_size
  if args.router == 'round_robin':
    return args.groups * args.experts * allocation.compute_capacity(
        args.group_size, args.experts, 1)
  name = 'soft_moe' if args.router == 'soft_moe_experts' else args.router
  config = router_config(name, args.capacity, args.experts)
  per_image = config.spec.allocation == router_lib.SOFT
  groups = args.groups * IMAGES_PER_GROUP if per_image else args.groups
  tokens = args.group_size // IMAGES_PER_GROUP if per_image else args.group_size
  return groups * args.experts * config.capacity(tokens, args.experts)


def build(args):
  """Returns (apply(params, x) -> y, params, x) for one benchmark row."""
  x = jax.random.normal(jax.random.PRNGKey(0), (args.groups, args.group_size, args.dim))
  mlp_dim = args.mlp_dim or 4 * args.dim
  experts = experts_class(args.expert_shards)
  if args.router == 'round_robin':
    module = RoundRobin(args.experts, mlp_dim, experts)
  elif args.router == 'dense_mlp':
    module = DenseMlp(1, mlp_dim)
  elif args.router == 'soft_moe_experts':
    slots = expert_tokens(args) // (args.groups * IMAGES_PER_GROUP * args.experts)
    module = SoftMoeExperts(args.experts, mlp_dim, slots_per_expert=slots, experts_class=experts)
  else:
    config = router_config(args.router, args.capacity, args.experts)
    # As in the model: a group is IMAGES_PER_GROUP images (S = 8 x 50 or 8 x 197 tokens), which
    # the sparse routers route together and Soft MoE routes image by image (T = 50 or 197).
    module = moe.MoeMlp(args.experts, mlp_dim, config, group_size=IMAGES_PER_GROUP,
                        dispatch=args.dispatch, experts_class=experts,
                        dispatch_dtype=moe.buffer_dtype(jnp.float32, args.dispatch_dtype))
    module = ImageGroups(module)
  params = module.init(jax.random.PRNGKey(1), x, train=False)
  rngs = {'gating': jax.random.PRNGKey(2)}

  def apply(params, x):
    out = module.apply(params, x, train=True, rngs=rngs)
    return out if isinstance(out, jax.Array) else out[0] + 0 * out[1]['aux_loss']
  return apply, params, x


class ImageGroups(nn.Module):
  """Feeds groups (G, S, D) to an MoE layer as G * 8 images of S / 8 tokens, as the model does."""
  layer: nn.Module

  def __call__(self, x, *, train):
    num_groups, num_tokens, dim = x.shape
    if num_tokens % IMAGES_PER_GROUP:
      raise ValueError(f'--group-size {num_tokens} must be {IMAGES_PER_GROUP} images of equal size.')
    images = x.reshape(num_groups * IMAGES_PER_GROUP, num_tokens // IMAGES_PER_GROUP, dim)
    y, metrics = self.layer(images, train=train)
    return y.reshape(x.shape), metrics


def machine() -> dict:
  """What a benchmark file records of the machine it was measured on."""
  return {'platform': platform.platform(), 'device': str(jax.devices()[0].device_kind),
          'num_devices': jax.device_count(), 'cpu_count': os.cpu_count(), 'jax': jax.__version__}


def time_ms(fn, *args, warmup, repeats):
  """Median wall-clock milliseconds of fn(*args) after `warmup` calls (compilation included)."""
  for _ in range(warmup):
    jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append((time.perf_counter() - start) * 1e3)
  return statistics.median(times)


class CompiledRow(NamedTuple):
  """One benchmark row compiled ahead of time, with XLA's FLOPs of its forward+backward
  (vmoe/flops.py says what they count)."""
  forward: Any
  forward_backward: Any
  params: Any
  x: jax.Array
  xla_flops: float


def compile_row(args) -> CompiledRow:
  apply, params, x = build(args)
  loss = lambda p, x: jnp.mean(apply(p, x) ** 2)
  forward = jax.jit(apply).lower(params, x).compile()
  forward_backward = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(params, x).compile()
  return CompiledRow(forward, forward_backward, params, x, flops.compiled_flops(forward_backward))


def row_fields(args) -> dict:
  baseline = args.router in BASELINES
  return {'router': args.router, 'dispatch': 'indices' if baseline else args.dispatch,
          'dispatch_dtype': None if baseline else args.dispatch_dtype,
          'groups': args.groups, 'group_size': args.group_size, 'dim': args.dim,
          'mlp_dim': args.mlp_dim or 4 * args.dim, 'experts': args.experts,
          'capacity': args.capacity, 'expert_shards': args.expert_shards,
          'expert_tokens': expert_tokens(args)}


def measure(args) -> dict:
  row = compile_row(args)
  return {
      **row_fields(args), 'xla_flops': row.xla_flops,
      'forward_ms': round(time_ms(row.forward, row.params, row.x, warmup=args.warmup,
                                  repeats=args.repeats), 2),
      'forward_backward_ms': round(time_ms(row.forward_backward, row.params, row.x,
                                           warmup=args.warmup, repeats=args.repeats), 2),
  }


def measure_interleaved(rows_args: list, args) -> list:
  """Rows timed in round-robin rounds: every row compiled and warmed up first, then each round
  times one forward and one forward+backward call of every row in turn. A row's time is its median
  over the rounds, so a slow stretch of a shared machine hits every row alike and the ratios
  between rows stay meaningful."""
  compiled = [compile_row(row_args) for row_args in rows_args]
  for row in compiled:
    for _ in range(args.warmup):
      jax.block_until_ready((row.forward(row.params, row.x),
                             row.forward_backward(row.params, row.x)))
  times = [([], []) for _ in compiled]
  for _ in range(args.repeats):
    for row, (forward_ms, forward_backward_ms) in zip(compiled, times):
      forward_ms.append(time_ms(row.forward, row.params, row.x, warmup=0, repeats=1))
      forward_backward_ms.append(time_ms(row.forward_backward, row.params, row.x, warmup=0,
                                         repeats=1))
  return [{**row_fields(row_args), 'xla_flops': row.xla_flops,
           'forward_ms': round(statistics.median(forward_ms), 2),
           'forward_backward_ms': round(statistics.median(forward_backward_ms), 2),
           'rounds_forward_backward_ms': [round(t, 2) for t in forward_backward_ms]}
          for row_args, row, (forward_ms, forward_backward_ms) in zip(rows_args, compiled, times)]


def ratios(rows: list) -> list:
  """Forward+backward ratios behind the issue's targets, per shape and capacity: each router's
  step over the dense MLP, over it scaled by the router's expert_tokens / the dense MLP's (the
  FLOPs ratio), over it scaled by their XLA FLOPs (rows that have them), over round robin, einsum
  over index dispatch, and Soft MoE over its own experts."""
  out = []
  key = lambda r: (r['group_size'], r['capacity'], r.get('expert_shards', 1))
  for shape in sorted({key(r) for r in rows}):
    at = {(r['router'], r['dispatch']): r for r in rows if key(r) == shape}
    ms = lambda name, dispatch='indices': at[(name, dispatch)]['forward_backward_ms']
    dense = at[('dense_mlp', 'indices')]
    for (name, dispatch), row in sorted(at.items()):
      if name in BASELINES or dispatch != 'indices':
        continue
      flops_ratio = row['expert_tokens'] / dense['expert_tokens']
      found = {'group_size': shape[0], 'capacity': shape[1], 'expert_shards': shape[2],
               'router': name,
               'vs_dense_mlp': round(ms(name) / ms('dense_mlp'), 3),
               'flops_ratio': round(flops_ratio, 3),
               'vs_flops_scaled_dense': round(ms(name) / (ms('dense_mlp') * flops_ratio), 3),
               'vs_round_robin': round(ms(name) / ms('round_robin'), 3)}
      if 'xla_flops' in row and 'xla_flops' in dense:
        # All the work XLA counts (routing, dispatch and combine arithmetic included), not only
        # the experts' token-slots.
        xla_ratio = row['xla_flops'] / dense['xla_flops']
        found['xla_flops_ratio'] = round(xla_ratio, 3)
        found['vs_xla_flops_scaled_dense'] = round(ms(name) / (ms('dense_mlp') * xla_ratio), 3)
      if (name, 'einsum') in at:
        found['einsum_over_indices'] = round(ms(name, 'einsum') / ms(name), 3)
      if name == 'soft_moe' and ('soft_moe_experts', 'indices') in at:
        found['vs_own_experts'] = round(ms(name) / ms('soft_moe_experts'), 3)
        found['own_experts_vs_flops_scaled_dense'] = round(
            ms('soft_moe_experts') / (ms('dense_mlp') * flops_ratio), 3)
      out.append(found)
  return out


def grid_rows(args, group_size: int, capacity: float) -> list:
  """The --all grid's rows of one shape and capacity: each of --routers with both dispatches
  (Soft MoE has no einsum variant) and the baselines (soft_moe_experts only beside soft_moe)."""
  baselines = [b for b in BASELINES if b != 'soft_moe_experts' or 'soft_moe' in args.routers]
  return [argparse.Namespace(**{**vars(args), 'router': name, 'dispatch': dispatch,
                                'group_size': group_size, 'capacity': capacity})
          for name in list(args.routers) + baselines
          for dispatch in ['indices'] + (['einsum'] if name != 'soft_moe' else [])
          if name not in BASELINES or dispatch == 'indices']


def run_all(args):
  """The grid: per (group size, capacity), grid_rows timed interleaved (measure_interleaved)."""
  rows = []
  for group_size in args.group_sizes:
    for capacity in args.capacities:
      rows_args = grid_rows(args, group_size, capacity)
      for row in measure_interleaved(rows_args, args):
        print(json.dumps(row), flush=True)
        rows.append(row)
  atomic.write_json(args.out, {
      'machine': machine(),
      'method': f'jitted; per shape and capacity, all rows compiled and warmed up ({args.warmup} '
                f'calls), then {args.repeats} round-robin rounds of one call per row; median over '
                f'rounds; {args.groups} groups per call; ' + (
                    'every expert on the device' if args.expert_shards == 1 else
                    f'one device of {args.expert_shards} expert devices (ExpertShard: '
                    f'{args.experts // args.expert_shards} experts on {args.expert_shards} x '
                    f'{args.groups} groups, the all-to-all emulated by a local transpose and not '
                    'timed)'),
      'rows': rows, 'ratios': ratios(rows)})


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--router', default='softmax_ec',
                      help=f'one of {sorted(router_lib.ROUTERS)} or {list(BASELINES)}')
  parser.add_argument('--dispatch', default='indices', choices=('indices', 'einsum'))
  parser.add_argument('--dispatch-dtype', default='float32', choices=tuple(moe.DISPATCH_DTYPES),
                      help="the MoE layers' moe.dispatch_dtype (the paper configs': bfloat16); "
                           'the baselines run in float32')
  parser.add_argument('--groups', type=int, default=8)
  parser.add_argument('--group-size', type=int, default=GROUP_SIZES[0])
  parser.add_argument('--dim', type=int, default=768)
  parser.add_argument('--mlp-dim', type=int, default=0, help='default 4 * dim')
  parser.add_argument('--experts', type=int, default=32)
  parser.add_argument('--capacity', type=float, default=1)
  parser.add_argument('--expert-shards', type=int, default=1,
                      help='time one device of a mesh of this many expert devices (ExpertShard: '
                           'E / N experts on N times the groups); 1: every expert on the device')
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--json', action='store_true', help='print only the JSON line')
  parser.add_argument('--all', action='store_true', help='the full grid of `make bench`')
  parser.add_argument('--capacities', type=float, nargs='+', default=[1, 2],
                      help='capacities of the --all grid (the issue\'s targets are at c=1)')
  parser.add_argument('--group-sizes', type=int, nargs='+', default=list(GROUP_SIZES),
                      help='group sizes of the --all grid: the B/32-like and B/16-like shapes')
  parser.add_argument('--routers', nargs='+', default=list(router_lib.PAPER_ROUTERS),
                      help='routers of the --all grid (default: the six paper routers)')
  parser.add_argument('--out', default='bench/results/moe_layer.json')
  args = parser.parse_args(argv)
  if args.expert_shards < 1 or args.experts % args.expert_shards:
    parser.error(f'--expert-shards {args.expert_shards} must be >= 1 and divide --experts '
                 f'{args.experts}.')
  for name in [args.router] + args.routers:
    if name not in BASELINES:
      router_lib.get_router_spec(name)
  if args.all:
    run_all(args)
    return
  row = measure(args)
  print(json.dumps(row) if args.json else json.dumps(row, indent=1))


if __name__ == '__main__':
  main()
