"""SGLang's hierarchical cache in the scheduler (``--enable-hierarchical-cache``), mixed into SGLangScheduler.

The tree with its host tier is simcore/hiradix_cache.py; this drives it as SGLang 0.5.23's
scheduler does:
- sizing (``HiCacheSettings.host_blocks``): ``--hicache-size`` GB per rank over the bytes a token
  takes on one GPU, else ``--hicache-ratio`` (2.0) × the device pool (mem_cache/pool_host/base.py).
- admission (schedule_policy.py, ``PrefillAdder.add_one_req``): a looked-up request counts its
  host hit as cached; before its load-back the budget must hold the loaded tokens, the extend,
  its clipped max_new and a page (``memory_budget.prepare_load_back``), else NO_TOKEN; once added
  the load-back is started (``init_load_back``): the device evicts for it and the nodes move in.
- pricing: the step that extends the request waits for the copy layer by layer
  (costmodel/host_tier.py), so HiCache runs the reference loop (``needs_stepping``).
Refused: the L3 storage backends and ``--hicache-io-backend direct`` (per-page cudaMemcpy, whose
rate is not modelled); vLLM's CPU offloading is refused in experiments/engines.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from costmodel.errors import require
from simcore.hiradix_cache import WRITE_POLICIES, HiRadixCache
from simcore.mamba_radix_cache import MambaHiRadixCache

from .sglang_prefill import CLIP_MAX_NEW_TOKENS
from .sglang_radix import evict_for

DEFAULT_RATIO = 2.0  # --hicache-ratio's default in cache mode (arg_groups/fields/memory.py)
IO_BACKENDS = ("kernel",)


@dataclass(frozen=True)
class HiCacheSettings:
    """The host tier's size in KV tokens per rank and its write policy."""

    host_tokens: int
    write_policy: str


def hicache_settings(cfg, device_tokens: int, bytes_per_token: float) -> HiCacheSettings | None:
    """From SGLangConfig's hicache fields (None when HiCache is off)."""
    if not cfg.enable_hierarchical_cache:
        return None
    require(not cfg.disable_radix_cache, "enable_hierarchical_cache", True, "needs the radix cache")
    if cfg.hicache_size:
        tokens = int(cfg.hicache_size * 1e9 // bytes_per_token)
    else:
        tokens = int(device_tokens * (cfg.hicache_ratio or DEFAULT_RATIO))
    return HiCacheSettings(tokens, cfg.hicache_write_policy)


def check_hicache_fields(cfg) -> None:
    """SGLangConfig.__post_init__'s checks of the hicache fields."""
    require(
        cfg.hicache_write_policy in WRITE_POLICIES,
        "hicache_write_policy",
        cfg.hicache_write_policy,
        f"must be one of {', '.join(WRITE_POLICIES)}",
    )
    require(
        cfg.hicache_io_backend in IO_BACKENDS,
        "hicache_io_backend",
        cfg.hicache_io_backend,
        "not modelled (modelled: kernel, SGLang's default)",
    )
    require(cfg.hicache_ratio is None or cfg.hicache_ratio > 0, "hicache_ratio", cfg.hicache_ratio, "must be positive")
    require(cfg.hicache_size >= 0, "hicache_size", cfg.hicache_size, "must be >= 0 (GB per rank; 0: use the ratio)")


class HiCacheDriving:
    """Needs SGLangScheduler's cfg; RadixDriving's _cache."""

    if TYPE_CHECKING:
        cfg: Any
        _cache: Any

    hicache: HiCacheSettings | None = None

    def new_prefix_cache(self, block_tokens: int, engine_block_size: int):
        if self.hicache is None:
            return super().new_prefix_cache(block_tokens, engine_block_size)  # type: ignore[misc]
        blocks = self.hicache.host_tokens // block_tokens
        mamba = getattr(self, "mamba", None)
        if mamba is not None:
            self._cache = MambaHiRadixCache(block_tokens, engine_block_size, blocks, self.hicache.write_policy, *mamba)
        else:
            self._cache = HiRadixCache(block_tokens, engine_block_size, blocks, self.hicache.write_policy)
        return self._cache

    @property
    def needs_stepping(self) -> bool:
        return self.hicache is not None

    def step_cost(self, cm):
        if self.hicache is None or getattr(cm, "model", None) is None:
            return cm
        from costmodel.host_tier import WithHostLoads

        return WithHostLoads(cm, self._take_loads, self.cfg.page_size if self.cfg.page_size > 1 else 1)

    def _take_loads(self) -> list[int]:
        cache = self._cache
        if not isinstance(cache, HiRadixCache) or not cache.pending_loads:
            return []
        loads, cache.pending_loads = cache.pending_loads, []
        return loads

    def _host_fits(self, adder, req) -> bool:
        """memory_budget.prepare_load_back: the loaded tokens, the extend, max_new and a page fit."""
        cache = self._cache
        if not isinstance(cache, HiRadixCache):
            return True
        blocks = cache.host_hit_blocks(req)
        if not blocks:
            return True
        pool = adder.pool
        max_new = min(max(req.outputs_left, 0), CLIP_MAX_NEW_TOKENS)
        return blocks * pool.block_size + req.remaining_tokens + max_new + adder.page < adder.rem_total

    def _load_back(self, pool, req) -> None:
        """init_load_back for an added request: room on the device, then its host hit moves in."""
        cache = self._cache
        if not isinstance(cache, HiRadixCache):
            return
        blocks = cache.host_hit_blocks(req)
        if not blocks:
            return
        cache.pin_host_hit(req)
        evict_for(pool, blocks * pool.block_size)
        assert pool.free >= blocks, "a load-back was admitted without room"
        pool.used += cache.load_back(req)
