"""V-MoE with the paper's routers, by concern; each subpackage's docstring says what it may
import, and testing/layers_test.py checks it:

  routing/  the routers: affinities, allocations, the registry of RouterSpecs.
  model/    the ViT and its MoE layer, and how arrays shard over a mesh.
  run/      a run's plumbing: checkpoints, preemption, logs, metric writers, outputs, the CLI.
  train/    the training loop (train/trainer.py) and what it runs: the parsed experiment, the
            step, optimizer, losses, evaluations, and the workdir a run claims.
"""
