"""Routing maps: which expert each patch of a few test images goes to, router by router.

  python -m launch.routing_maps --runs workdirs/study/tiny --out results/tiny/routing_maps.png

reads the trained runs under --runs (a workdir with summary.json and checkpoints) of every
router at c = 1, seed 0, restores each one's last checkpoint, and routes the first
`moe.group_size` images of Fashion-MNIST's test split (one routing group, as in evaluation: no
noise) through the model. The figure has a row per (router, MoE layer) and a column per image
(the first IMAGES): each patch is tinted with the colour of its expert.
- Token choice and expert choice: the expert whose slot holds the patch (the one of largest
  combine weight if several experts chose it); a patch no expert processes (dropped by a full
  buffer under token choice, chosen by no expert under expert choice) is crossed out.
- Soft MoE: every patch feeds every slot; the tint is the expert of the patch's largest dispatch
  weight, its opacity that weight (as a fraction of the largest in the image).
The class token is routed too; the map shows the 16 patches only.
"""
import argparse
import dataclasses
import io
import json
import os
import sys
from typing import Sequence

import jax
import matplotlib

matplotlib.use('Agg')   # Files only.
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from base import atomic  # pylint: disable=g-import-not-at-top,wrong-import-position
from base import errors  # pylint: disable=g-import-not-at-top,wrong-import-position
from configs import common  # pylint: disable=g-import-not-at-top,wrong-import-position
from data.datasets import embedded  # pylint: disable=g-import-not-at-top,wrong-import-position
from data.datasets import sources  # pylint: disable=g-import-not-at-top,wrong-import-position
from results import paper  # pylint: disable=g-import-not-at-top,wrong-import-position
from results import summaries  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmoe.routing import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    declarations)
from vmoe.routing import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    router as router_lib)
from vmoe.run import checkpointing  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmoe.run import run_outputs  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmoe.train import (  # pylint: disable=g-import-not-at-top,wrong-import-position
    experiment as experiment_lib)
from vmoe.train import train_program  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmoe.train import train_step  # pylint: disable=g-import-not-at-top,wrong-import-position

IMAGES = 8
NO_EXPERT = -1


@dataclasses.dataclass(frozen=True)
class LayerRouting:
  """One MoE layer's routing of a batch: per image and token, the expert (NO_EXPERT: none) and
  the weight that picked it (combine weight; Soft MoE: dispatch weight)."""
  block: str
  expert: np.ndarray      # (B, N) int
  weight: np.ndarray      # (B, N) float


def token_experts(route, images: int, tokens_per_image: int) -> tuple[np.ndarray, np.ndarray]:
  """(expert, weight), each (images, tokens_per_image), of one layer's routing of G groups.

  Sparse routing (slot_token (G, E, C), S marking an empty slot): the expert of largest combine
  weight among those whose slots hold the token, NO_EXPERT if none does. Dense (Soft MoE)
  routing, dispatch (G, S, E, C): the expert of the token's largest dispatch weight.
  """
  if isinstance(route, router_lib.DenseRouting):
    dispatch = np.asarray(route.dispatch, np.float32)                 # (G, S, E, C)
    groups, tokens, experts, slots = dispatch.shape
    flat = dispatch.reshape(groups, tokens, experts * slots)
    best = flat.argmax(-1)
    expert, weight = best // slots, np.take_along_axis(flat, best[..., None], -1)[..., 0]
  else:
    slot_token = np.asarray(route.slot_token)                         # (G, E, C)
    slot_weight = np.asarray(route.slot_weight, np.float32)
    groups, experts, _ = slot_token.shape
    tokens = images * tokens_per_image // groups
    weight = np.zeros((groups, tokens), np.float32)
    expert = np.full((groups, tokens), NO_EXPERT)
    for g in range(groups):
      for e in range(experts):
        for token, w in zip(slot_token[g, e], slot_weight[g, e]):
          if token < tokens and (expert[g, token] == NO_EXPERT or w > weight[g, token]):
            expert[g, token], weight[g, token] = e, w
  return (expert.reshape(images, tokens_per_image), weight.reshape(images, tokens_per_image))


def route_images(workdir: str, images: np.ndarray,
                 experiment: experiment_lib.Experiment | None = None) -> list[LayerRouting]:
  """Every MoE layer's routing of `images` ((B, H, W, C) in the model's input range) by the
  newest intact checkpoint of the run in `workdir` (read as a resumed run would, moving nothing);
  `experiment`: the run's, if already read (recorded_experiment)."""
  program = train_program.build(experiment or recorded_experiment(workdir))
  _, state = checkpointing.read_run_state(workdir, program)
  tokens_per_image = route_tokens_per_image(program.model, images)
  return [LayerRouting(block, *token_experts(route, images.shape[0], tokens_per_image))
          for block, route in routes(program.model, train_step.model_variables(state),
                                     images).items()]


def routes(model, variables, images: np.ndarray) -> dict:
  """{block name: its router's routing of `images`} of `model` with `variables` (parameters and
  routers' state, train_step.model_variables), in block order."""
  @jax.jit
  def apply(variables, images):
    _, captured = model.apply(
        variables, images, train=False, mutable=['intermediates'],
        capture_intermediates=lambda module, _: isinstance(module, router_lib.Router))
    return {block: tree['moe']['router']['__call__'][0][0]
            for block, tree in captured['intermediates'].items()}
  return dict(sorted(apply(variables, images).items()))


def recorded_experiment(workdir: str, overrides: dict | None = None) -> experiment_lib.Experiment:
  """The run's experiment, read back from the config.json it recorded at its start, with
  `overrides` ({'dotted.key': value}) set on it first."""
  with open(os.path.join(workdir, run_outputs.CONFIG_FILE), encoding='utf-8') as f:
    config = common.override(json.load(f), overrides or {})
  return experiment_lib.parse(config, num_devices=1)


def route_tokens_per_image(model, images: np.ndarray) -> int:
  """Patches per image, plus the class token with pool = 'tok'."""
  patches = (images.shape[1] // model.patch_size) * (images.shape[2] // model.patch_size)
  return patches + (model.pool == 'tok')


def draw(images: np.ndarray, rows: Sequence[tuple[str, LayerRouting]], patch: int,
         num_experts: int, path: str) -> str:
  """The figure: the images on top, then one row per (title, layer routing)."""
  shown = min(IMAGES, images.shape[0])
  colors = plt.get_cmap('tab10' if num_experts <= 10 else 'tab20').colors
  height = 0.9 * (len(rows) + 1) + 0.6          # Square cells, a title above, a legend below.
  fig, axes = plt.subplots(len(rows) + 1, shown, figsize=(0.9 * shown, height), squeeze=False)
  fig.subplots_adjust(left=0, right=1, top=1 - 0.35 / height, bottom=0.25 / height, wspace=0.06,
                      hspace=0.06)
  side = images.shape[1] // patch
  for i in range(shown):
    axes[0][i].imshow(images[i, ..., 0], cmap='gray')
  for r, (title, layer) in enumerate(rows, 1):
    soft = title.startswith(paper.ROUTER_TITLES['soft_moe'])
    for i in range(shown):
      ax = axes[r][i]
      ax.imshow(images[i, ..., 0], cmap='gray')
      expert = layer.expert[i, -side * side:].reshape(side, side)   # Patches, not the class token.
      weight = layer.weight[i, -side * side:].reshape(side, side)
      top = weight.max() or 1.0
      for y in range(side):
        for x in range(side):
          box = (x * patch - 0.5, y * patch - 0.5)
          if expert[y, x] == NO_EXPERT:
            ax.plot([box[0], box[0] + patch], [box[1], box[1] + patch], color='red', lw=1)
            ax.plot([box[0], box[0] + patch], [box[1] + patch, box[1]], color='red', lw=1)
            continue
          alpha = 0.6 * (weight[y, x] / top if soft else 1.0)
          ax.add_patch(plt.Rectangle(box, patch, patch, color=colors[expert[y, x] % len(colors)],
                                     alpha=alpha, lw=0))
    axes[r][0].set_ylabel(title, rotation=0, ha='right', va='center', fontsize=7)
  for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
  handles = [plt.Rectangle((0, 0), 1, 1, color=colors[e % len(colors)], alpha=0.6,
                           label=f'expert {e}') for e in range(num_experts)]
  handles.append(plt.Line2D([], [], color='red', marker='x', ls='', label='no expert'))
  fig.legend(handles=handles, loc='lower center', ncol=min(len(handles), 9), frameon=False,
             fontsize=7, bbox_to_anchor=(0.5, 0))
  fig.suptitle('Expert of each patch (Soft MoE: of its largest dispatch weight, opacity = weight)',
               fontsize=9, y=1 - 0.1 / height)
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=110, bbox_inches='tight')
  plt.close(fig)
  atomic.write_bytes(path, buffer.getvalue())
  return path


def maps_runs(root: str, capacity: float = 1.0, seed: int = 0) -> list[summaries.Run]:
  """The runs under root of each router at `capacity` and `seed`, with softmax combine, that
  kept their checkpoints: the paper's routers in its order, then any other by name."""
  runs, _ = summaries.load_runs(root)
  chosen = {}
  for run in runs:
    router, c, softmax_combine = run.key[2:]
    if (router != declarations.DENSE and c == capacity and softmax_combine and run.seed == seed and
        os.path.isdir(checkpointing.checkpoints_dir(os.path.dirname(run.path)))):
      chosen[router] = run
  return [chosen[r] for r in sorted(chosen, key=paper.router_order)]


def test_images(count: int) -> np.ndarray:
  """The first `count` Fashion-MNIST test images, (count, 28, 28, 1) in [-1, 1] (pp_eval's
  value_range)."""
  images = embedded.read_idx(os.path.join(sources.DEBIAN_FASHION_MNIST_DIR,
                                           embedded.FASHION_MNIST_FILES['test'][0]))[:count]
  return images[..., None].astype(np.float32) / 127.5 - 1.0


def write(root: str, out: str) -> str | None:
  """The routing maps of the runs under root, or None when no run kept its checkpoints."""
  runs = maps_runs(root)
  if not runs:
    return None
  rows, images, patch, num_experts = [], None, None, None
  for run in runs:
    workdir = os.path.dirname(run.path)
    experiment = recorded_experiment(workdir)
    if images is None:
      images = test_images(experiment.moe.group_size)
      patch, num_experts = experiment.model.patch, experiment.moe.num_experts
    title = run.title
    for layer in route_images(workdir, images, experiment):
      rows.append((f'{title}\n{layer.block}', layer))
  return draw(images, rows, patch, num_experts, out)


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--runs', required=True, help='Directory searched for trained runs.')
  parser.add_argument('--out', required=True, help='The PNG to write.')
  args = parser.parse_args(argv)
  path = write(args.runs, args.out)
  if path is None:
    print(f'No run under {args.runs} kept its checkpoints (c = 1, seed 0); routing maps need the '
          'trained workdirs of a sweep (make study or make demo).', file=sys.stderr)
    return 1
  print(path)
  return 0


if __name__ == '__main__':
  sys.exit(errors.run_tool(main))
