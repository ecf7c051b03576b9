"""Five routers published after the paper, each one RouterSpec (docs/fidelity.md, "Routers after
the paper", traces every default; docs/routers.md explains the entries). Their titles and option
defaults are their declarations' (declarations.py).

Axis letters: g = routing group, s = token of a group (T), e = expert, c = buffer slot.

  sigmoid_tc   DeepSeek-V3 (arXiv 2412.19437, Sec. 2.1.2, eqs. 13-16): token choice on
               sigmoid(x W); combine weights normalised over the k chosen (s itself at k = 1).
  lossfree_tc  sigmoid_tc plus auxiliary-loss-free balancing (Wang et al., arXiv 2408.15664,
               Algorithm 1): a per-expert bias for the choice only, b += u sign(mean load - load)
               after each step. The router with state. DeepSeek-V3 adds a sequence-wise balance
               loss of weight 1e-4; it is left out here, as Wang et al. have none.
  base         BASE layers (Lewis et al., arXiv 2103.16716): in training the assignment of tokens
               to slots of maximal total affinity (an auction, balanced_assignment.py); greedy
               top-1 in evaluation; combine sigmoid(x W), with the block's residual fairseq's
               alpha * expert(x) + (1 - alpha) * x.
  topp_tc      Dynamic routing (Huang et al., arXiv 2403.07652): each token takes the fewest
               experts whose probabilities pass p = 0.4, at most k_max = capacity_factor (as
               token choice's k; buffers as token choice at k = k_max); combine with the
               unnormalised probabilities; their dynamic (entropy) and balance losses.
  random_tc    Hash layers (Roller et al., arXiv 2106.04426) as routing fixed at initialisation:
               token choice top-k on x W0, W0 drawn once and never trained; combine 1/k.

Each router uses the paper's capacity C = round(c T / E) (c = k for the token-choice ones) and
no router noise.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from vmoe.routing import allocation
from vmoe.routing import balanced_assignment
from vmoe.routing import fixed_routing
from vmoe.routing import declarations
from vmoe.routing import paper_routers
from vmoe.routing import router_spec
from vmoe.routing import sigmoid_gate
from vmoe.routing import top_p

def _k(config) -> int:
  return config.experts_per_token


def _sigmoid_choice(inputs: router_spec.GroupInputs):
  options = inputs.config.options
  return sigmoid_gate.choice_scores(inputs.logits, inputs.state.get('bias'), options['n_groups'],
                                    options['topk_groups']), None


def _sigmoid_combine(inputs: router_spec.GroupInputs, scores):
  """The unbiased s at the experts that `scores` (biased, group-limited: what dispatched) chose,
  normalised over them and scaled, as DeepSeek-V3's `Gate`."""
  return sigmoid_gate.combine_weights(inputs.logits, scores, _k(inputs.config),
                                      inputs.config.options['route_scale'])


def _check_sigmoid(config, num_tokens, num_experts):
  paper_routers.check_token_choice(config, num_tokens, num_experts)
  if num_experts is not None:
    options = config.options
    sigmoid_gate.check_groups(num_experts, config.experts_per_token, options['n_groups'],
                              options['topk_groups'], options['route_scale'])


def _zero_bias(rng, dim, num_experts, config):
  del rng, dim, config
  return {'bias': jnp.zeros((num_experts,), jnp.float32)}


def _load_statistics(inputs: router_spec.GroupInputs, scores, slot_token):
  del slot_token   # Counted from the requests, before any token is dropped.
  return {'load': sigmoid_gate.requested_load(scores, _k(inputs.config))}


def _bias_update(state, statistics, config):
  return {'bias': sigmoid_gate.update_bias(state['bias'], statistics['load'],
                                           config.options['bias_update_rate'])}


def _logits(inputs: router_spec.GroupInputs):
  """The logits themselves: BASE's affinity (the raw dot products x W), and random_tc's (top-k
  of x W0 equals top-k of its softmax)."""
  return inputs.logits, None


def _assignment_slots(scores, capacity, config):
  slot_token, _ = balanced_assignment.balanced_assignment_slots(
      scores, capacity, config.options['auction_epsilon'], config.options['auction_max_iters'])
  return slot_token


def _assignment_extras(batch: router_spec.BatchRouting):
  """No loss; `assignment_unfilled`, the share of the min(T, E C) placements a full assignment
  makes that are missing: an auction stopped by its bound (auction_max_iters) leaves some. (In
  evaluation, BASE's greedy top-1 misses those its full buffers drop.)"""
  num_tokens = batch.logits.shape[1]
  slot_token = batch.slot_token
  expected = min(num_tokens, slot_token.shape[1] * slot_token.shape[2])    # A group's placements.
  filled = jnp.sum(slot_token < num_tokens, axis=(1, 2))                   # (G,)
  return 0.0, {'assignment_unfilled': 1.0 - jnp.mean(filled) / expected}


def _top1_slots(scores, capacity, config):
  del config
  return allocation.token_choice_slots(scores, capacity, 1)


def _topp_choices(probs, config):
  return top_p.num_choices(probs, config.options['top_p'], _k(config))


def _topp_slots(scores, capacity, config):
  return allocation.token_choice_slots(scores, capacity, _k(config),
                                       _topp_choices(scores, config))


def _topp_extras(batch: router_spec.BatchRouting):
  """Huang et al.'s auxiliary losses, averaged over groups: their dynamic (entropy) loss and
  their balance loss E sum_e f_e Q_e, with f from the top-p choices, of the clean logits; and
  the router's metrics (experts a token asks for, the share of requests dropped)."""
  config, logits = batch.config, batch.clean_logits
  options = config.options
  probs = jax.nn.softmax(logits, axis=-1)

  def balance(p):
    return top_p.balance_loss(p, top_p.chosen_experts(p, _topp_choices(p, config), _k(config)))

  loss = (options['dynamic_loss_weight'] * jnp.mean(jax.vmap(top_p.dynamic_loss)(logits))
          + options['balance_loss_weight'] * jnp.mean(jax.vmap(balance)(probs)))
  choices = jax.vmap(lambda p: _topp_choices(p, config))(jax.nn.softmax(batch.logits, axis=-1))
  return loss, top_p.routing_metrics(choices, batch.slot_token, batch.logits.shape[1])


def _probs(inputs: router_spec.GroupInputs):
  return inputs.probs, None


def _frozen_kernel(rng, dim, num_experts, config):
  """W0 (D, E), drawn once as a trained gating kernel would be and never trained."""
  del config
  return {'kernel': nn.initializers.lecun_normal()(rng, (dim, num_experts))}


def _uniform_combine(inputs: router_spec.GroupInputs, scores):
  del scores
  return fixed_routing.uniform_combine_scores(inputs.logits, _k(inputs.config))


_SIGMOID = dict(affinity=_sigmoid_choice,
                allocation=router_spec.Allocation(declarations.TOKEN_CHOICE,
                                                  paper_routers.TOKEN_CHOICE.slots, _check_sigmoid),
                combine=_sigmoid_combine)
ROUTERS = {
    'sigmoid_tc': router_spec.RouterSpec(**_SIGMOID),
    'lossfree_tc': router_spec.RouterSpec(
        **_SIGMOID, state=router_spec.RouterState(_zero_bias, _load_statistics, _bias_update)),
    'base': router_spec.RouterSpec(
        _logits, router_spec.Allocation(
            declarations.BALANCED_ASSIGNMENT, _assignment_slots,
            in_evaluation=router_spec.Allocation(declarations.TOKEN_CHOICE, _top1_slots)),
        combine=lambda inputs, scores: balanced_assignment.combine_scores(inputs.logits),
        extras=_assignment_extras),
    'topp_tc': router_spec.RouterSpec(
        _probs, router_spec.Allocation(declarations.TOKEN_CHOICE, _topp_slots,
                                       paper_routers.check_token_choice),
        combine=lambda inputs, scores: inputs.probs, extras=_topp_extras),
    'random_tc': router_spec.RouterSpec(
        _logits, paper_routers.TOKEN_CHOICE, combine=_uniform_combine,
        state=router_spec.RouterState(_frozen_kernel)),
}
