"""SGLang's hybrid-model (mamba / Gated DeltaNet) cache settings: the strategy, the state pool.

SGLang 0.5.23 serves a model with linear-attention layers (Qwen3-Next, Qwen3.5) with its radix
cache's MambaComponent (simcore/mamba_radix_cache.py has the rule for where states are kept):
- strategy (arg_groups/overrides.py, _mamba_radix_cache_resolution): ``auto`` becomes
  ``extra_buffer`` when the overlap scheduler runs or pages exceed one token (and the model
  supports it: Qwen3.5 / Qwen3-Next with the triton linear-attention backend), else
  ``no_buffer``, which needs page_size 1 and no overlap (mamba_hook.py, validate_mamba_no_buffer).
  ``extra_buffer_lazy`` defers a ping-pong slot but tracks prefill states as ``extra_buffer``.
- state pool (mem_cache/kv_cache_configurator.py, _handle_max_mamba_cache): with no
  ``--max-mamba-cache-size``, states get ``ratio / (1 + ratio)`` of the memory left after the
  weights (``--mamba-full-memory-ratio``, 0.9), one slot of padding; the full-attention KV pool
  gets the rest. Running requests are capped at slots // (3 + tracking slots): 2 under overlap
  with extra_buffer, 1 without overlap, 0 under no_buffer (_calculate_mamba_ratio;
  allocation_sizing.py, get_mamba_tracking_slots); 1 a request without a radix cache.
One state per GPU: the linear layers' fp32 recurrent state and conv state over TP
(costmodel/host_tier.py's count).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import require
from costmodel.host_tier import STATE_BYTES

STRATEGY_CHOICES = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
MAMBA_FULL_MEMORY_RATIO = 0.9  # --mamba-full-memory-ratio's fallback
BASE_SLOTS_PER_REQUEST = 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO


def resolve_strategy(cfg) -> str:
    """The strategy SGLang runs (extra_buffer_lazy tracks prefill states as extra_buffer)."""
    s = cfg.mamba_radix_cache_strategy
    require(s in STRATEGY_CHOICES, "mamba_radix_cache_strategy", s, f"must be one of {', '.join(STRATEGY_CHOICES)}")
    if s == "auto":
        return "extra_buffer" if (not cfg.disable_overlap_schedule or cfg.page_size > 1) else "no_buffer"
    if s == "no_buffer":
        require(cfg.page_size == 1, "mamba_radix_cache_strategy", s, "no_buffer needs page_size 1")
        require(
            cfg.disable_overlap_schedule, "mamba_radix_cache_strategy", s, "no_buffer needs disable_overlap_schedule"
        )
        return s
    return "extra_buffer"


def state_bytes(model, tp: int) -> float:
    """One request's linear-attention state on one GPU: recurrent (fp32) and conv state."""
    m = model
    return m.linear_layers * (m.linear_state_elems * STATE_BYTES + m.linear_conv_state_elems * m.b) / tp


def slots_per_request(cfg, strategy: str) -> int:
    """_calculate_mamba_ratio: state slots SGLang counts per running request."""
    if cfg.disable_radix_cache:
        return 1
    if strategy == "extra_buffer":
        lazy = cfg.mamba_radix_cache_strategy == "extra_buffer_lazy"
        return BASE_SLOTS_PER_REQUEST + (1 if lazy or cfg.disable_overlap_schedule else 2)
    return BASE_SLOTS_PER_REQUEST


@dataclass(frozen=True)
class MambaPool:
    slots: int  # max_mamba_cache_size
    kv_bytes: float  # what the full-attention KV pool gets
    max_running_requests: int  # the cap the state pool puts on running requests


def mamba_pool(rest_bytes: float, per_state: float, per_request: int, ratio: float = MAMBA_FULL_MEMORY_RATIO):
    """The split of the memory left after the weights: states first, the KV pool the rest."""
    require(per_state > 0, "per_state", per_state, "a hybrid model's state must have a size")
    budget = rest_bytes * ratio / (1 + ratio)
    slots = int((budget - per_state) // per_state)
    require(slots > 0, "mamba state pool", slots, "not enough GPU memory for one linear-attention state")
    return MambaPool(slots, rest_bytes - (slots + 1) * per_state, slots // per_request)
