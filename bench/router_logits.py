"""Router logits of a trained run, for measuring the routers' solvers on real scores.

  python -m bench.router_logits --workdir workdirs/tiny/sparsity_ec_c1 \
      --out bench/data/router_logits_tiny.npz

Rebuilds the model from WORKDIR/config.json (the run's resolved config), restores the newest
checkpoint, runs it (evaluation mode: no router noise) on the first --batches batches of the run's
held-out split, and records
the logits X W of every MoE layer's router for the first --groups routing groups of each batch: an
array (layers x batches x groups, tokens per group, experts), stored as float16 with the run's
name and step.
`--init` records the same model at its initialisation instead (step 0).
`python -m bench.sparsity_solver --logits FILE` measures the sparsity-constrained solver on them.
"""
import argparse
import dataclasses
import io
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from base import atomic
from vmoe import experiment as experiment_parser
from data import pipeline
from vmoe import checkpointing
from vmoe import run_protocol
from vmoe import setup as setup_lib
from vmoe import sharding
from vmoe.routing import router as router_lib


def load_params(workdir: str, init: bool):
  """(experiment, model, params, step) of the run in workdir: its newest checkpoint, or its
  initialisation."""
  path = os.path.join(workdir, run_protocol.CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found: --workdir must be a training run\'s workdir.')
  with open(path, encoding='utf-8') as f:
    experiment = experiment_parser.parse(json.load(f), num_devices=1)
  # On this process's first device, whatever mesh the run trained on.
  setup = setup_lib.build(experiment, sharding.make_mesh(sharding.MeshConfig(1, 1),
                                                         jax.devices()[:1]))
  rng = jax.random.split(jax.random.PRNGKey(experiment.seed))[0]    # The trainer's init key.
  if init:
    return experiment, setup.model, setup.init(rng).params, 0
  manager = checkpointing.make_manager(workdir, dataclasses.replace(experiment.checkpoint,
                                                                    asynchronous=False))
  restored = checkpointing.restore_latest(manager, setup.abstract_state)
  if restored is None:
    raise FileNotFoundError(f'{workdir} holds no checkpoint; train it first or pass --init.')
  state, _ = restored
  return experiment, setup.model, state.params, int(state.step)


def record_router_logits(model: nn.Module, params, images) -> list[np.ndarray]:
  """The logits (G, S, E) of every router call when `model` runs on `images`, in call order."""
  logits = []

  def interceptor(next_fun, args, kwargs, context):
    if isinstance(context.module, router_lib.Router) and context.method_name == '__call__':
      kernel = context.module.variables['params']['kernel']
      logits.append(np.asarray(jnp.einsum('gsd,de->gse', args[0].astype(jnp.float32), kernel)))
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(interceptor):
    model.apply({'params': params}, images, train=False)
  return logits


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--out', required=True)
  parser.add_argument('--batches', type=int, default=1)
  parser.add_argument('--groups', type=int, default=4, help='routing groups per layer and batch')
  parser.add_argument('--init', action='store_true', help='the model at initialisation')
  args = parser.parse_args(argv)
  experiment, model, params, step = load_params(args.workdir, args.init)
  if not experiment.moe.num_experts:
    raise ValueError(f'{args.workdir} trained a dense model: it has no router.')
  batches = pipeline.make_eval_iterator(experiment.data, experiment.data.eval_split,
                                        batch_size=experiment.eval.batch_size)
  logits = []
  for _, batch in zip(range(args.batches), batches):
    logits += [layer[:args.groups]
               for layer in record_router_logits(model, params, jnp.asarray(batch['image']))]
  logits = np.concatenate(logits).astype(np.float16)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  buffer = io.BytesIO()
  np.savez_compressed(buffer, logits=logits, step=step,
                      run=os.path.basename(os.path.normpath(args.workdir)))
  atomic.write_bytes(args.out, buffer.getvalue())
  print(f'{args.out}: logits {logits.shape} of {args.workdir} at step {step}, '
        f'std {float(logits.astype(np.float32).std(-1).mean()):.3f} over experts')


if __name__ == '__main__':
  main()
