"""The paper's routers (Sec. 2-3): its allocations (Algorithms 1 and 2, and Soft MoE's), and each
router one literal RouterSpec, an affinity composed with an allocation. sparsity_tc composes the
sparsity-constrained affinity with token choice (any affinity composes with any sparse
allocation). lab_routers.py writes the routers published after the paper the same way; each
router's title, presets and options are its declaration's (declarations.py).

Axis letters: s = token of a group (T = S in the paper's notation), e = expert.

The combine of every router here is the paper's (router_spec.paper_combine).
"""
from vmoe.routing import affinity
from vmoe.routing import allocation
from vmoe.routing import declarations
from vmoe.routing import router_spec


def check_token_choice(config, num_tokens: int | None, num_experts: int | None) -> None:
  """Token choice takes k experts per token, k <= E: config.experts_per_token, which is the
  capacity factor (then an integer) unless num_selected_experts sets k apart."""
  del num_tokens
  key = 'moe.router.capacity_factor'
  if config.num_selected_experts is None and int(config.capacity_factor) != config.capacity_factor:
    raise ValueError(f'router {config.name}: token choice uses capacity_factor as k, the number '
                     f'of experts per token, which must be an integer; got '
                     f'{config.capacity_factor} ({key}).')
  if config.num_selected_experts is not None:
    key = 'moe.router.num_selected_experts'
  k = config.experts_per_token
  if num_experts is not None and k > num_experts:
    raise ValueError(f'router {config.name} selects k={k} experts per token but only '
                     f'E={num_experts} experts exist; lower k ({key}) or raise moe.num_experts.')


def check_expert_choice(config, num_tokens: int | None, num_experts: int | None) -> None:
  """An expert choosing its top C tokens needs C <= T, in training and in evaluation."""
  if num_tokens is not None and num_experts is not None:
    for train in (True, False):
      allocation.check_expert_choice_capacity(config.capacity(num_tokens, num_experts, train),
                                              num_tokens)


TOKEN_CHOICE = router_spec.Allocation(
    declarations.TOKEN_CHOICE,
    lambda scores, capacity, config: allocation.token_choice_slots(
        scores, capacity, config.experts_per_token),
    check_token_choice)
EXPERT_CHOICE = router_spec.Allocation(
    declarations.EXPERT_CHOICE,
    lambda scores, capacity, config: allocation.expert_choice_slots(scores, capacity),
    check_expert_choice)
SOFT = router_spec.Allocation(declarations.SOFT_ALLOCATION, None)


def softmax_scores(inputs: router_spec.GroupInputs):
  """Pi_softmax = softmax(X W) itself (with the training noise where drawn)."""
  return inputs.probs, None


def sinkhorn_scores(inputs: router_spec.GroupInputs):
  """The entropic OT plan of the logits toward balanced marginals (Sec. 3.2)."""
  return affinity.sinkhorn(inputs.logits, inputs.config.sinkhorn_iters), None


def sparsity_constrained_scores(inputs: router_spec.GroupInputs):
  """The sparsity-constrained OT plan of the utility softmax(X W) (Sec. 3.3), and its solver's
  report."""
  config = inputs.config
  return affinity.sparsity_constrained_with_info(inputs.probs, inputs.capacity,
                                                 config.sparsity_steps,
                                                 memory_size=config.sparsity_memory,
                                                 warm_start_iters=config.sparsity_warm_start)


ROUTERS = {
    'softmax_tc': router_spec.RouterSpec(softmax_scores, TOKEN_CHOICE),
    'sinkhorn_tc': router_spec.RouterSpec(sinkhorn_scores, TOKEN_CHOICE),
    'sparsity_tc': router_spec.RouterSpec(sparsity_constrained_scores, TOKEN_CHOICE),
    'softmax_ec': router_spec.RouterSpec(softmax_scores, EXPERT_CHOICE),
    'sinkhorn_ec': router_spec.RouterSpec(sinkhorn_scores, EXPERT_CHOICE),
    'sparsity_ec': router_spec.RouterSpec(sparsity_constrained_scores, EXPERT_CHOICE),
    'soft_moe': router_spec.RouterSpec(None, SOFT),
}
