"""A router's buffer capacity C = c T / E, made an integer (free of JAX: the configs and the
router's config read it)."""
import math


# How C = c T / E becomes an integer (`RouterConfig.capacity_rounding`). The paper's Sec. 4.1
# ("Models") writes C = round(c T / E) for every router; the V-MoE code it ran on computes that
# with Python's round(), which sends halves to the even integer (B/32 at c = 1: 400 / 32 = 12.5 ->
# 12, an effective c of 0.96). Sec. 2 also mentions ceil(T / E) as an example, and the reference
# library's own default is ceil, then up to a multiple of 4 (google-research/vmoe
# vmoe/nn/routing.py, compute_capacity).
CAPACITY_ROUNDINGS = {
    'round_half_even': round,
    'round_half_up': lambda x: math.floor(x + 0.5),
    'ceil': math.ceil,
    'ceil_multiple_of_4': lambda x: 4 * math.ceil(math.ceil(x) / 4),
}


def compute_capacity(num_tokens: int, num_experts: int, capacity_factor: float,
                     rounding: str = 'round_half_even') -> int:
  """Buffer capacity C = c T / E made an integer by `rounding` (CAPACITY_ROUNDINGS), at least 1.

  For token choice routers c is k. The default is the paper's round(c T / E) as the V-MoE code
  computes it (halves to even: round(24.5) = 24).
  """
  if capacity_factor <= 0:
    raise ValueError(
        f'capacity factor must be > 0 (the paper uses 1 or 2), got {capacity_factor}.')
  if num_experts < 1 or num_tokens < 1:
    raise ValueError(f'need T >= 1 tokens and E >= 1 experts, got T={num_tokens}, E={num_experts}.')
  if rounding not in CAPACITY_ROUNDINGS:
    raise ValueError(f'unknown capacity rounding {rounding!r}; valid: '
                     f'{", ".join(CAPACITY_ROUNDINGS)}.')
  return max(1, int(CAPACITY_ROUNDINGS[rounding](capacity_factor * num_tokens / num_experts)))
