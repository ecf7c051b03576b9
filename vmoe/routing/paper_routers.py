"""The paper's routers (Sec. 2-3), each one literal RouterSpec: an affinity composed with an
allocation, with the presets the paper configs give it (docs/fidelity.md traces each), and
sparsity_tc, the sparsity-constrained affinity with token choice (any affinity composes with any
sparse allocation). lab_routers.py writes the routers published after the paper the same way.

Axis letters: s = token of a group (T = S in the paper's notation), e = expert.

Presets. V-MoE's router noise, std noise_std / E with noise_std = 1.0 ("Actually, it's 1.0 /
num_experts"), for the softmax and Sinkhorn routers: the paper's softmax affinity is softmax(X W +
sigma eps) for Softmax Token and Expert Choice (eq. softmax-affinity), and the reference's
expert-choice and Sinkhorn routers default to the same noise (vmoe/nn/routing.py). Only Softmax
Token Choice needs balancing losses (Sec. 3.1, Appendix A): importance and load losses of weight
0.005 each (V-MoE common.get_vmoe_config); Sinkhorn (Sec. 3.2: "eliminate the need for auxiliary
losses"), expert choice (balanced by construction) and Soft MoE use neither. The reference's
token-choice Sinkhorn (KL-projection) router combines with the softmax of the clean logits
(vmoe/projects/sparsity_constrained_ot/kl_projection_routing.py, `gates_softmax_noisy =
jax.nn.softmax(gates_logits)`); its other routers with the noisy softmax (docs/fidelity.md, D5).
The combine of every router here is the paper's (registry.paper_combine).
"""
from vmoe.routing import affinity
from vmoe.routing import names
from vmoe.routing import registry


def softmax_scores(inputs: registry.GroupInputs):
  """Pi_softmax = softmax(X W) itself (with the training noise where drawn)."""
  return inputs.probs, None


def sinkhorn_scores(inputs: registry.GroupInputs):
  """The entropic OT plan of the logits toward balanced marginals (Sec. 3.2)."""
  return affinity.sinkhorn(inputs.logits, inputs.config.sinkhorn_iters), None


def sparsity_constrained_scores(inputs: registry.GroupInputs):
  """The sparsity-constrained OT plan of the utility softmax(X W) (Sec. 3.3), and its solver's
  report."""
  config = inputs.config
  return affinity.sparsity_constrained_with_info(inputs.probs, inputs.capacity,
                                                 config.sparsity_steps,
                                                 memory_size=config.sparsity_memory,
                                                 warm_start_iters=config.sparsity_warm_start)


NOISE = {'noise_std': 1.0}
BALANCING_LOSSES = {'importance_loss_weight': 0.005, 'load_loss_weight': 0.005}


def _spec(name: str, scores, allocation: registry.Allocation, **presets) -> registry.RouterSpec:
  return registry.RouterSpec(scores, allocation, presets=presets, title=names.TITLES[name])


ROUTERS = {
    'softmax_tc': _spec('softmax_tc', softmax_scores, registry.TOKEN_CHOICE, **NOISE,
                        **BALANCING_LOSSES),
    'sinkhorn_tc': _spec('sinkhorn_tc', sinkhorn_scores, registry.TOKEN_CHOICE, **NOISE,
                         noisy_combine=False),
    'sparsity_tc': _spec('sparsity_tc', sparsity_constrained_scores, registry.TOKEN_CHOICE),
    'softmax_ec': _spec('softmax_ec', softmax_scores, registry.EXPERT_CHOICE, **NOISE),
    'sinkhorn_ec': _spec('sinkhorn_ec', sinkhorn_scores, registry.EXPERT_CHOICE, **NOISE),
    'sparsity_ec': _spec('sparsity_ec', sparsity_constrained_scores, registry.EXPERT_CHOICE),
    'soft_moe': _spec('soft_moe', None, registry.SOFT),
}
