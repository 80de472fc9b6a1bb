"""The KV block pool, and vLLM's pool size.

vLLM usable = total·gpu_memory_utilization − weights − activation peak of the profile run
(vllm/v1/worker/gpu_worker.py, determine_available_memory); blocks of block_size tokens.
SGLang's memory defaults live with its policy (policies/sglang_config.py, sglang_kv_tokens).
"""

from __future__ import annotations

from costmodel import CostModel
from costmodel.errors import require


class BlockPool:
    """Counts blocks only: which physical block holds what does not change any timing."""

    def __init__(self, total_blocks: int, block_size: int, cache=None):
        require(total_blocks > 0, "kv_cache_blocks", total_blocks, "the KV pool has no room; the weights do not fit")
        self.total, self.block_size, self.used = int(total_blocks), int(block_size), 0
        self.cache = cache

    @property
    def free(self) -> int:
        return self.total - self.used

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    @property
    def available(self) -> int:
        """Free blocks plus cached blocks nobody references (they are evicted on demand)."""
        return self.free + (self.cache.evictable_blocks if self.cache else 0)

    def shared(self, req) -> int:
        return self.cache.shared_blocks(req) if self.cache else 0

    def blocks_held(self, req, tokens: int) -> int:
        """Private blocks `req` holds once it holds `tokens` positions (its cached prefix is shared)."""
        return self.blocks_for(tokens) - self.shared(req)

    def blocks_missing(self, req, tokens: int) -> int:
        """Blocks `req` must still get to hold `tokens` positions (its cached prefix counts as held)."""
        return self.blocks_held(req, tokens) - req.num_blocks

    def grow(self, req, tokens: int) -> bool:
        """Hold enough blocks for `tokens` positions of `req`, evicting cached blocks if that makes room;
        False (nothing held, nothing evicted) if it does not."""
        need = self.blocks_missing(req, tokens)
        if need <= 0:
            return True
        free = self.total - self.used
        if need > free:  # evict only when that makes room (vLLM allocate_slots checks first)
            if not self.cache or need > free + self.cache.evictable_blocks:
                return False
            self.used -= self.cache.evict(need - free)
            free = self.total - self.used
            if need > free:
                return False
        self.used += need
        req.num_blocks += need
        return True

    def release(self, req) -> None:
        """The request's KV goes; with a prefix cache its computed full prompt blocks stay cached."""
        adopted = self.cache.release(req) if self.cache else 0
        self.used -= req.num_blocks - adopted
        req.num_blocks = 0

    def check(self, running=()) -> None:
        assert 0 <= self.used <= self.total
        cached = self.cache.cached_blocks if self.cache else 0
        assert self.used == sum(r.num_blocks for r in running) + cached, "KV blocks leaked"


def vllm_block_pool(num_gpu_blocks: int, block_size: int) -> BlockPool:
    """vLLM's pool of num_gpu_blocks blocks: BlockPool.__init__ (vllm/v1/core/block_pool.py) takes
    the first free block as the null block, which no request ever gets, so N − 1 are usable."""
    if num_gpu_blocks <= 0:
        return BlockPool(num_gpu_blocks, block_size)  # says why: the weights do not fit
    require(num_gpu_blocks > 1, "num_gpu_blocks", num_gpu_blocks, "leaves no block beside vLLM's null block")
    return BlockPool(num_gpu_blocks - 1, block_size)


def activation_peak_bytes(cm: CostModel, max_num_batched_tokens: int) -> float:
    """Rough peak activation of vLLM's profile run: the widest per-layer tensors of a full batch
    (hidden in/out, QKV, gate+up of the MLP) plus the logits of the sampled rows."""
    m, tp = cm.model, cm.tp
    ffn = max(m.ffn, m.expert_ffn * max(1, m.experts_per_tok), m.shared_expert_ffn)
    per_row = (4 * m.H + (m.h + 2 * m.h_kv) * m.d_h / tp + 4 * ffn / tp) * m.b
    return max_num_batched_tokens * per_row + 256 * m.vocab / tp * 4


def vllm_kv_blocks(
    cm: CostModel,
    gpu_memory_utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    weight_bytes: float | None = None,
) -> int:
    """weight_bytes: per GPU, when not ``cm``'s (data-parallel ranks sharing the experts)."""
    avail = (
        cm.hw.memory_bytes * gpu_memory_utilization
        - (cm.weight_bytes_per_gpu if weight_bytes is None else weight_bytes)
        - activation_peak_bytes(cm, max_num_batched_tokens)
    )
    return int(avail // (block_size * cm.kv_coef))
