"""Speed of one MoE layer for every router, against baselines (a benchmark, not a test).

  python -m bench.moe_layer --groups 16 --out bench/results/moe_layer.json     # as `make bench`

Per shape (--group-sizes: 8 images of 50 tokens, B/32 at 224 px, or of 197, B/16) and capacity,
the grid times one layer's forward and forward+backward over --groups routing groups, in
interleaved rounds: each of --routers (the configs' presets; any registered router, a user's
through --router-module) as moe.MoeMlp, and the baselines round_robin (no router, buffers of the
row's capacity: the sparse layers' floor), dense_mlp (one MLP over the same tokens) and
soft_moe_experts (Soft MoE's experts alone, on buffers copied from the tokens). `ratios` divides
each router's forward+backward by the baselines', and by the dense MLP's scaled by the FLOPs ratio
(expert_tokens: the token-slots the experts process) or by XLA's FLOPs count (xla_flops: routing,
dispatch and combine included). vs_round_robin is the routing overhead; where
ROUTING_OVERHEAD_TARGETS sets one, the entry says whether it meets it. A layer runs as the train
step runs it (compile_row). A row of a router whose allocation is BASE's auction also gives the
auction's bids per group on the row's own routing logits (auction_report).

--expert-shards N times one device of a mesh of N expert devices: it routes its own groups over
all E experts, then runs its E / N experts on N devices' slots (sharded_layer, ExpertShard); the
all-to-all is a local transpose of the same bytes, not timed.
"""
import argparse
import json
import statistics
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from bench import step
from bench import timing
from configs import common
from vmoe.model import moe
from vmoe.model import moe_config
from vmoe.routing import capacity as capacity_lib
from vmoe.routing import balanced_assignment
from vmoe.routing import lab_routers
from vmoe.routing import declarations
from vmoe.routing import router as router_lib
from vmoe.routing import router_config as router_config_lib
from vmoe.routing import user_module
from vmoe.train import flops

BASELINES = ('round_robin', 'dense_mlp', 'soft_moe_experts')
# Issue 40's targets for the routers after the paper, at the recipe's shape: forward+backward over
# round robin's at the router's defined setting, c = 1, but k_max = 2 for topp_tc (c is its k_max).
ROUTING_OVERHEAD_TARGETS = {('sigmoid_tc', 1.0): 1.05, ('lossfree_tc', 1.0): 1.05,
                            ('random_tc', 1.0): 1.05, ('topp_tc', 2.0): 1.05, ('base', 1.0): 1.3}
IMAGES_PER_GROUP = 8    # V-MoE's routing groups: 8 images.
# Tokens of a routing group at 224 px: 8 images of (224 / patch)^2 patches + the class token.
GROUP_SIZES = (IMAGES_PER_GROUP * (7 * 7 + 1), IMAGES_PER_GROUP * (14 * 14 + 1))   # B/32, B/16.


class ExpertShard(moe.Experts):
  """One device's `num_experts` = E / shards experts on a mesh of `shards` expert devices, on
  buffers (E, G, C, D). There the all-to-all would hand it its experts' slots of every device's
  groups, (E / shards, shards * G, C, D); here a local transpose of the same bytes makes that
  shape (expert e's slots go to local expert e mod E / shards)."""
  shards: int = 1

  def __call__(self, buffers, *, train):
    num_experts, num_groups, capacity, dim = buffers.shape
    relayout = lambda a, n, m: jnp.swapaxes(a.reshape(n, m, num_groups, capacity, dim), 0, 1)
    received = relayout(buffers, self.shards, self.num_experts).reshape(
        self.num_experts, -1, capacity, dim)
    outputs = super().__call__(received, train=train)
    return relayout(outputs, self.num_experts, self.shards).reshape(buffers.shape)


def round_robin(num_groups: int, num_tokens: int, num_experts: int,
                capacity_factor: float = 1.0) -> router_lib.SparseRouting:
  """Token t to expert t mod E, slot t div E, weight 1, in buffers of C = round(c T / E) slots
  (tokens past E C dropped, slots past T empty)."""
  capacity = capacity_lib.compute_capacity(num_tokens, num_experts, capacity_factor)
  slot_token = jnp.arange(num_experts * capacity, dtype=jnp.int32).reshape(capacity, num_experts).T
  slot_token = jnp.where(slot_token < num_tokens, slot_token, num_tokens)    # (E, C): c E + e.
  slot_token = jnp.broadcast_to(slot_token, (num_groups,) + slot_token.shape)
  return router_lib.SparseRouting(slot_token, jnp.ones(slot_token.shape, jnp.float32))


class RoundRobin(nn.Module):
  """A router for moe.MoeMlp without parameters: groups (G, S, D) -> (round_robin's routing, no
  auxiliary loss)."""
  num_experts: int
  capacity_factor: float = 1.0

  def __call__(self, x, *, train):
    del train
    route = round_robin(*x.shape[:2], self.num_experts, self.capacity_factor)
    return route, {'aux_loss': jnp.zeros((), jnp.float32)}


def sharded_layer(router: nn.Module, images_per_group: int, num_experts: int, mlp_dim: int,
                  shards: int, dispatch_dtype=jnp.float32) -> moe.MoeMlp:
  """moe.MoeMlp around one device's experts of a mesh of `shards` expert devices (ExpertShard),
  `router` routing over all `num_experts`; at shards = 1 it is the library's layer
  (moe_layer_test)."""
  experts = ExpertShard(num_experts // shards, mlp_dim, shards=shards, output_dtype=dispatch_dtype)
  return moe.MoeMlp(router, experts, images_per_group, dispatch_dtype=dispatch_dtype)


class DenseMlp(moe.Experts):
  """One GELU MLP over all tokens (the Experts module with a single expert)."""

  def __call__(self, x, *, train):
    return super().__call__(x[None], train=train)[0]


class SoftMoeExperts(nn.Module):
  """Soft MoE's experts alone: buffers (E, images, C, D) copied from each image's tokens (slot k
  takes token k mod T), with no routing, dispatch or combine."""
  num_experts: int
  mlp_dim: int
  slots_per_expert: int = 1
  shards: int = 1

  @nn.compact
  def __call__(self, x, *, train):
    images, tokens_per_image, dim = x.shape
    slots = jnp.arange(self.num_experts * self.slots_per_expert) % tokens_per_image
    buffers = x[:, slots].reshape(images, self.num_experts, self.slots_per_expert, dim)
    experts = ExpertShard(self.num_experts // self.shards, self.mlp_dim, shards=self.shards,
                          name='experts')
    return experts(jnp.transpose(buffers, (1, 0, 2, 3)), train=train)


def router_config(name: str, capacity: float, experts: int,
                  router_module: str = '') -> router_config_lib.RouterConfig:
  """The configs' preset of router `name` at this capacity (noise, balance losses, solver);
  router_module registers a router of the user's own (docs/routers.md)."""
  preset = common.moe_config(name, capacity, experts, IMAGES_PER_GROUP, router_module)
  return router_config_lib.RouterConfig(**preset.router.to_dict())


def expert_tokens(args) -> int:
  """Token-slots the experts process per call: E x C per routing group (Soft MoE routes each
  image, round robin is a c = 1 layer) times the groups; every token for the dense MLP."""
  if args.router == 'dense_mlp':
    return args.groups * args.group_size
  if args.router == 'round_robin':
    return args.groups * args.experts * capacity_lib.compute_capacity(
        args.group_size, args.experts, args.capacity)
  config = router_config(step.SOFT_MOE if args.router == 'soft_moe_experts' else args.router,
                         args.capacity, args.experts, args.router_module)
  images = moe_config.images_per_routing_group(config, IMAGES_PER_GROUP)    # Soft MoE: 1.
  tokens = args.group_size // IMAGES_PER_GROUP * images
  return args.groups * IMAGES_PER_GROUP // images * args.experts * config.capacity(
      tokens, args.experts)


def layer(args) -> nn.Module:
  """The module of one row: a baseline, or moe.MoeMlp (around ExpertShard on an expert-sharded
  mesh)."""
  mlp_dim, shards = args.mlp_dim or 4 * args.dim, args.expert_shards
  if args.router == 'dense_mlp':
    return DenseMlp(1, mlp_dim)
  if args.router == 'soft_moe_experts':
    slots = expert_tokens(args) // (args.groups * IMAGES_PER_GROUP * args.experts)
    return SoftMoeExperts(args.experts, mlp_dim, slots, shards)
  if args.router == 'round_robin':
    return sharded_layer(RoundRobin(args.experts, args.capacity), IMAGES_PER_GROUP, args.experts,
                         mlp_dim, shards)
  config = router_config(args.router, args.capacity, args.experts, args.router_module)
  dtype = moe.buffer_dtype(jnp.float32, args.dispatch_dtype)
  if shards > 1:
    return sharded_layer(router_lib.Router(config, args.experts),
                         moe_config.images_per_routing_group(config, IMAGES_PER_GROUP),
                         args.experts, mlp_dim, shards, dtype)
  return moe.moe_mlp(args.experts, mlp_dim, config, group_size=IMAGES_PER_GROUP,
                     dispatch_dtype=dtype)


class CompiledRow(NamedTuple):
  """One row's forward and forward+backward compiled, its inputs (parameters, routers' state,
  tokens), and XLA's FLOPs of the forward+backward (vmoe/train/flops.py says what they count)."""
  forward: Any
  forward_backward: Any
  params: Any
  state: Any
  x: jax.Array
  xla_flops: float

  def time_round(self) -> dict:
    """One timed call of each."""
    return {name: timing.time_ms(fn, self.params, self.state, self.x, warmup=0, repeats=1)
            for name, fn in (('forward_ms', self.forward),
                             ('forward_backward_ms', self.forward_backward))}


def compile_row(args) -> CompiledRow:
  """The row's layer on --groups groups of 8 images, each of group_size / 8 tokens, applied as
  the train step applies the model (vmoe/train/train_step.py): the routers' state mutable
  (lossfree_tc's bias update timed), the auxiliary loss added to the loss, gradients of the
  parameters (not of the state: random_tc's frozen kernel has none) and of the tokens."""
  module = layer(args)
  shape = (args.groups * IMAGES_PER_GROUP, args.group_size // IMAGES_PER_GROUP, args.dim)
  x = jax.random.normal(jax.random.PRNGKey(0), shape)
  variables = module.init(jax.random.PRNGKey(1), x, train=False)
  params, state = variables['params'], variables.get(router_lib.ROUTER_STATE, {})

  def apply(params, state, x):
    out, updated = module.apply({'params': params, router_lib.ROUTER_STATE: state}, x, train=True,
                                rngs={'gating': jax.random.PRNGKey(2)},
                                mutable=[router_lib.ROUTER_STATE])
    y, aux_loss = (out, 0.0) if isinstance(out, jax.Array) else (out[0], out[1]['aux_loss'])
    return y, aux_loss, updated

  def loss(params, state, x):
    y, aux_loss, updated = apply(params, state, x)
    return jnp.mean(y ** 2) + aux_loss, updated
  forward = jax.jit(apply).lower(params, state, x).compile()
  forward_backward = jax.jit(jax.value_and_grad(loss, argnums=(0, 2), has_aux=True)).lower(
      params, state, x).compile()
  return CompiledRow(forward, forward_backward, params, state, x,
                     flops.compiled_flops(forward_backward))


def auction_report(args, row: CompiledRow) -> dict:
  """For a router whose allocation is BASE's auction: the auction run alone on the row's routing
  logits (x W of its parameters, in the layer's groups of 8 images), at the router's options; the
  bids per group (median, max) and the placements left missing. {} for any other router."""
  if args.router in BASELINES:
    return {}
  config = router_config(args.router, args.capacity, args.experts, args.router_module)
  if declarations.get(config.name).allocation != declarations.BALANCED_ASSIGNMENT:
    return {}
  groups = row.x.reshape(args.groups, args.group_size, args.dim)
  logits = jnp.einsum('gsd,de->gse', groups, row.params['router']['kernel'])
  capacity = config.capacity(args.group_size, args.experts)
  epsilon, max_iters = config.options['auction_epsilon'], config.options['auction_max_iters']
  _, report = jax.jit(jax.vmap(lambda a: balanced_assignment.balanced_assignment_slots(
      a, capacity, epsilon, max_iters)))(logits)
  return {'auction_epsilon': epsilon, 'auction_max_iters': max_iters,
          'auction_iterations_median': float(jnp.median(report.iterations)),
          'auction_iterations_max': int(jnp.max(report.iterations)),
          'auction_unfilled': int(jnp.sum(report.unfilled))}


def row_fields(args) -> dict:
  baseline = args.router in BASELINES
  return {'router': args.router, 'dispatch_dtype': None if baseline else args.dispatch_dtype,
          'groups': args.groups, 'group_size': args.group_size, 'dim': args.dim,
          'mlp_dim': args.mlp_dim or 4 * args.dim, 'experts': args.experts,
          'capacity': args.capacity, 'expert_shards': args.expert_shards,
          'expert_tokens': expert_tokens(args)}


def measure(rows_args: list, args) -> list[dict]:
  """The rows compiled and warmed up, then timed in args.repeats interleaved rounds; a row's
  times are its medians over the rounds."""
  compiled = [compile_row(row_args) for row_args in rows_args]
  for row in compiled:
    for _ in range(args.warmup):
      row.time_round()
  times = timing.interleaved([row.time_round for row in compiled], args.repeats)
  return [{**row_fields(row_args), 'xla_flops': row.xla_flops, **auction_report(row_args, row),
           **{name: round(statistics.median(ms), 2) for name, ms in t.items()},
           'rounds_forward_backward_ms': [round(ms, 2) for ms in t['forward_backward_ms']]}
          for row_args, row, t in zip(rows_args, compiled, times)]


def ratios(rows: list) -> list:
  """Forward+backward ratios per shape, capacity and mesh: each router's step over the dense
  MLP's, over it scaled by the router's expert_tokens / the dense MLP's (the FLOPs ratio) and by
  their XLA FLOPs, over round robin, and Soft MoE over its own experts."""
  out = []
  key = lambda r: (r['group_size'], r['capacity'], r.get('expert_shards', 1))
  for shape in sorted({key(r) for r in rows}):
    at = {r['router']: r for r in rows if key(r) == shape}
    ms = lambda name: at[name]['forward_backward_ms']
    dense = at['dense_mlp']
    for name, row in sorted(at.items()):
      if name in BASELINES:
        continue
      flops_ratio = row['expert_tokens'] / dense['expert_tokens']
      found = {'group_size': shape[0], 'capacity': shape[1], 'expert_shards': shape[2],
               'router': name, 'vs_dense_mlp': round(ms(name) / ms('dense_mlp'), 3),
               'flops_ratio': round(flops_ratio, 3),
               'vs_flops_scaled_dense': round(ms(name) / (ms('dense_mlp') * flops_ratio), 3),
               'vs_round_robin': round(ms(name) / ms('round_robin'), 3)}
      xla_ratio = row['xla_flops'] / dense['xla_flops']
      found['xla_flops_ratio'] = round(xla_ratio, 3)
      found['vs_xla_flops_scaled_dense'] = round(ms(name) / (ms('dense_mlp') * xla_ratio), 3)
      target = ROUTING_OVERHEAD_TARGETS.get((name, float(shape[1])))
      if target is not None:
        found['routing_overhead_target'] = target
        found['meets_target'] = found['vs_round_robin'] <= target
      if name == step.SOFT_MOE and 'soft_moe_experts' in at:
        found['vs_own_experts'] = round(ms(name) / ms('soft_moe_experts'), 3)
        found['own_experts_vs_flops_scaled_dense'] = round(
            ms('soft_moe_experts') / (ms('dense_mlp') * flops_ratio), 3)
      out.append(found)
  return out


def grid_rows(args, group_size: int, capacity: float) -> list:
  """The rows of one shape and capacity: each of --routers, then the baselines (soft_moe_experts
  only beside soft_moe)."""
  baselines = [b for b in BASELINES if b != 'soft_moe_experts' or step.SOFT_MOE in args.routers]
  return [argparse.Namespace(**{**vars(args), 'router': name, 'group_size': group_size,
                                'capacity': capacity}) for name in args.routers + baselines]


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  numbers = lambda kind: lambda text: [kind(x) for x in text.split(',') if x]
  routers = (*router_lib.PAPER_ROUTERS, *lab_routers.ROUTERS)
  parser.add_argument('--routers', default=','.join(routers),
                      help='comma-separated registered routers (default: the six paper routers '
                           'and the five after the paper)')
  parser.add_argument('--router-module', default='',
                      help='a module (.py path or dotted name) registering routers of your own')
  parser.add_argument('--dispatch-dtype', default='float32', choices=tuple(moe.DISPATCH_DTYPES),
                      help="the MoE layers' moe.dispatch_dtype (the paper configs': bfloat16)")
  parser.add_argument('--groups', type=int, default=8)
  parser.add_argument('--group-sizes', type=numbers(int), default=list(GROUP_SIZES),
                      help='tokens a group of 8 images: the B/32-like and B/16-like shapes')
  parser.add_argument('--capacities', type=numbers(float), default=[1.0, 2.0])
  parser.add_argument('--dim', type=int, default=768)
  parser.add_argument('--mlp-dim', type=int, default=0, help='default 4 * dim')
  parser.add_argument('--experts', type=int, default=32)
  parser.add_argument('--expert-shards', type=int, default=1,
                      help='time one device of a mesh of this many expert devices')
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--repeats', type=int, default=5, help='interleaved rounds')
  parser.add_argument('--out', default='bench/results/moe_layer.json')
  args = parser.parse_args(argv)
  args.routers = [r for r in args.routers.split(',') if r]
  try:
    user_module.import_router_module(args.router_module)
  except ValueError as e:
    parser.error(f'--router-module: {e}')
  if not set(args.routers) <= set(router_lib.ROUTERS):
    parser.error(f'--routers: valid values are {", ".join(sorted(router_lib.ROUTERS))}')
  if any(s < IMAGES_PER_GROUP or s % IMAGES_PER_GROUP for s in args.group_sizes):
    parser.error(f'--group-sizes: each must be {IMAGES_PER_GROUP} images of equal size')
  if args.expert_shards < 1 or args.experts % args.expert_shards:
    parser.error(f'--expert-shards {args.expert_shards} must be >= 1 and divide --experts '
                 f'{args.experts}')
  if min(args.groups, args.repeats, args.warmup + 1) < 1:
    parser.error('--groups and --repeats must be >= 1, --warmup >= 0')
  return args


def main(argv=None):
  args = parse_args(argv)
  rows = []
  for group_size in args.group_sizes:
    for capacity in args.capacities:
      for row in measure(grid_rows(args, group_size, capacity), args):
        print(json.dumps(row), flush=True)
        rows.append(row)
  mesh = ('every expert on the device' if args.expert_shards == 1 else
          f'one device of {args.expert_shards} expert devices (ExpertShard; all-to-all not timed)')
  timing.write_result(
      args.out, rows, ratios=ratios(rows),
      method=f'jitted; per shape and capacity, every row compiled and warmed up ({args.warmup} '
             f'calls), then {args.repeats} interleaved rounds of one call per row; medians '
             f'over rounds; {args.groups} groups of 8 images per call; {mesh}')


if __name__ == '__main__':
  main()
