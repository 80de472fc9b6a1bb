"""vLLM V1's Scheduler.schedule() (vllm/v1/core/sched/scheduler.py), as of vLLM 0.33.0.

No prefill or decode phase: one token budget per step, drawn down by the running queue (decodes
and partial prefills, in order) before the waiting queue is touched. A prefill longer than the
budget left is clamped to it (chunked prefill); long_prefill_token_threshold clamps first, but
not when the request is the only one (running + waiting == 1). When a running request cannot get
KV blocks, the last running request is preempted (recompute, to the front of waiting) until it
can; a step with a preemption admits no waiting request. With scheduler_reserve_full_isl (on by
default) a waiting request is admitted only when the free blocks hold its whole current token
count, not just its first chunk. With async_scheduling (on by default) a request that sampled its
last token keeps its slot and blocks through the next schedule() (SchedulerState.retire). With
prefix caching, blocks are cached, hit and evicted as vLLM's BlockPool does (simcore/apc.py).
Checked step for step against vLLM's own Scheduler and AsyncScheduler (tests/conformance).
"""
from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import require
from costmodel.hardware import GiB

from simcore.apc import BlockHashCache

from .base import Plan, PolicyHooks, SchedulerState


@dataclass(frozen=True)
class VLLMConfig:
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    long_prefill_token_threshold: int = 0      # 0 = off
    enable_chunked_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 0                     # 0 = the model's max_position_embeddings
    enable_prefix_caching: bool = True         # V1 default; acts only when requests carry block hashes
    async_scheduling: bool = True              # vllm/config/vllm.py: None resolves to True unless incompatible
    scheduler_reserve_full_isl: bool = True    # SchedulerConfig.scheduler_reserve_full_isl

    def __post_init__(self):
        require(self.max_num_seqs > 0, "max_num_seqs", self.max_num_seqs, "must be positive")
        require(self.max_num_batched_tokens >= self.max_num_seqs, "max_num_batched_tokens", self.max_num_batched_tokens,
                f"must be greater than or equal to max_num_seqs ({self.max_num_seqs})")
        require(self.long_prefill_token_threshold >= 0, "long_prefill_token_threshold", self.long_prefill_token_threshold, "must be >= 0")
        require(self.block_size > 0, "block_size", self.block_size, "must be positive")
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", self.gpu_memory_utilization, "must be in (0, 1]")
        require(self.enable_chunked_prefill or self.max_num_batched_tokens >= self.max_model_len, "max_num_batched_tokens",
                self.max_num_batched_tokens, f"is smaller than max_model_len ({self.max_model_len}) with chunked prefill disabled")


def vllm_defaults(memory_bytes: float, device_name: str, usage_context: str = "api_server",
                  enable_chunked_prefill: bool = True, max_model_len: int = 0) -> dict:
    """EngineArgs defaults by device memory and usage context (vllm/engine/arg_utils.py, seed 000)."""
    big = memory_bytes >= 160 * GiB
    mid = memory_bytes >= 70 * GiB and "a100" not in device_name.lower()
    llm_class = usage_context == "llm_class"
    if big:
        tokens, seqs = 16384, 1024
    elif mid:
        tokens, seqs = (16384 if llm_class else 8192), 1024
    else:
        tokens, seqs = (8192 if llm_class else 2048), 256
    if not enable_chunked_prefill:
        tokens = max(max_model_len, tokens)
    return {"max_num_batched_tokens": tokens, "max_num_seqs": min(seqs, tokens)}


class VLLMScheduler(PolicyHooks):
    """vLLM's Scheduler (async_scheduling off) or AsyncScheduler (on).

    ``overlaps_host``: with async scheduling, vLLM schedules step n+1 and prepares its inputs on
    the host while the GPU runs step n (vllm/v1/engine/core.py, step_with_batch_queue, two
    batches in flight), so a step's wall time is max(GPU, host) rather than GPU + host. The
    replica hands this to the cost model, which prices the host part of a step accordingly.
    """
    lazy_decodes = True     # the replica may keep plain decodes in a DecodeCohort

    def __init__(self, cfg: VLLMConfig):
        self.cfg = cfg
        self._thr = cfg.long_prefill_token_threshold

    def new_prefix_cache(self, block_tokens: int, engine_block_size: int) -> BlockHashCache:
        """vLLM's own block-hash cache (simcore/apc.py)."""
        return BlockHashCache(block_tokens, engine_block_size, outputs_lag=self.cfg.async_scheduling)

    @property
    def overlaps_host(self) -> bool:
        return self.cfg.async_scheduling

    @property
    def holds_finished(self) -> bool:
        return self.cfg.async_scheduling

    def _threshold(self, s: SchedulerState) -> int:
        """Scheduler.schedule: "When it is the only request there is nobody to starve, so let it use
        the whole budget" -- the threshold applies only with running + waiting > 1 (running counts
        the finished requests async scheduling still holds)."""
        thr = self.cfg.long_prefill_token_threshold
        if not thr:
            return 0
        return thr if s.num_running + len(s.finished) + len(s.waiting) > 1 else 0

    def _clamp(self, req, budget: int) -> int:
        n = req.prompt_len + req.num_output_tokens - req.num_computed_tokens
        thr = self._thr
        if 0 < thr < n:
            n = thr
        return min(n, budget)

    def _full_isl_fits(self, s: SchedulerState, req) -> bool:
        """KVCacheManager.allocate_slots(..., full_sequence_must_fit): the blocks for all
        num_tokens of the request (its prefix-cache hit counted as held, hit blocks nobody else
        uses counted as taken) must be free, evictable cached blocks included."""
        return not self.cfg.scheduler_reserve_full_isl or s.pool.blocks_missing(req, req.num_tokens) <= s.pool.available

    def schedule(self, s: SchedulerState) -> Plan:
        plan, budget = Plan(), self.cfg.max_num_batched_tokens
        cache = s.pool.cache if isinstance(s.pool.cache, BlockHashCache) else None
        if cache is not None:
            cache.begin_schedule()
        self._thr = self._threshold(s) if self.cfg.long_prefill_token_threshold else 0
        plan.cohort = s.cohort_rides(self._wants, budget)
        budget -= plan.cohort
        scheduled = {}
        i, running, pool = 0, s.running, s.pool
        plain, bs, thr = pool.cache is None, pool.block_size, self._thr
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.prompt_len + req.num_output_tokens - req.num_computed_tokens   # _clamp, inlined
            if 0 < thr < n:
                n = thr
            if n > budget:
                n = budget
            if plain:   # grow_or_preempt and publish without a cache: the blocks fit, or the slow path preempts
                need = -(-(req.num_computed_tokens + n) // bs) - req.num_blocks
                if need <= 0 or need <= pool.total - pool.used:
                    if need > 0:
                        pool.used += need
                        req.num_blocks += need
                    scheduled[req] = n
                    budget -= n
                    i += 1
                    continue
            before = len(plan.preempted)
            fits = s.grow_or_preempt(req, req.num_computed_tokens + n, plan.preempted)
            for victim in plan.preempted[before:]:
                budget += scheduled.pop(victim, 0)
            if not fits:
                break
            s.publish(req, req.num_computed_tokens + n)
            scheduled[req] = n
            budget -= n
            i += 1
        if cache is not None:
            cache.end_schedule(s.running[i:])
        if not plan.preempted and s.waiting:
            waiting, cfg = s.waiting, self.cfg
            num_running = s.num_running + len(s.finished)
            while waiting and budget > 0 and num_running < cfg.max_num_seqs:
                req = waiting[0]
                if pool.cache is not None:
                    s.lookup(req)
                n = req.prompt_len + req.num_output_tokens - req.num_computed_tokens   # _clamp, inlined
                if 0 < self._thr < n:
                    n = self._thr
                if not cfg.enable_chunked_prefill and n > budget:
                    break
                if n > budget:
                    n = budget
                if pool.cache is None and not req.num_blocks:   # _full_isl_fits and grow, without a cache to consult
                    need = -(-(req.num_computed_tokens + n) // pool.block_size)
                    if (cfg.scheduler_reserve_full_isl
                            and -(-(req.prompt_len + req.num_output_tokens) // pool.block_size) > pool.total - pool.used) \
                            or need > pool.total - pool.used:
                        break
                    pool.used += need
                    req.num_blocks = need
                elif not self._full_isl_fits(s, req) or not pool.grow(req, req.num_computed_tokens + n):
                    break
                waiting.popleft()
                s.admit(req)
                if pool.cache is not None:
                    s.publish(req, req.num_computed_tokens + n)
                num_running += 1
                scheduled[req] = n
                budget -= n
        plan.items = list(scheduled.items())
        if s.finished:
            plan.released = s.release_finished()
        return plan

    def _wants(self, req) -> int:
        """``_clamp`` with no budget (the cohort's check of the running queue)."""
        n = req.prompt_len + req.num_output_tokens - req.num_computed_tokens
        return self._thr if 0 < self._thr < n else n

    def prefill_chunks(self, s: SchedulerState, plan: Plan, leaves=()) -> tuple[list[int], int]:
        """FAST-FORWARD HOOK (policies/base.py). P last in the running queue (every decode is
        walked before it, one token each) takes ``_clamp`` of the budget the decodes leave; the
        waiting queue is reached only when budget is left after P, so with a request waiting
        (and max_num_seqs not reached) the chunks stop before the first that leaves budget over,
        and the chunks that use the whole budget are the ones an arrival cannot change. Each
        step's long_prefill_token_threshold is ``_threshold`` as that step's schedule() sees it:
        the finished requests held through this plan's schedule() are gone by the next, a decode
        that leaves at step f still counts at step f (async scheduling holds it) and not after,
        and a chunk is sealed only if the threshold an arrival would switch on leaves it as is."""
        items, nc, c = plan.items, plan.cohort, s.cohort
        req, q = items[-1]
        if len(items) != len(s.running) or s.running[-1] is not req:
            return [], 0
        if nc and (nc != len(c.members) or c.top_seq > req.seq) or not nc and c is not None and c.members:
            return [], 0
        for r, _ in items:
            if r.seq > req.seq:
                return [], 0
        cfg, thr0 = self.cfg, self._thr
        budget = cfg.max_num_batched_tokens - (len(items) - 1 + nc)
        running, waiting = len(items) + nc, len(s.waiting)
        if not leaves:
            return _even_chunks(req.prompt_len + req.num_output_tokens - req.num_computed_tokens - q, budget, cfg.long_prefill_token_threshold,
                                running + waiting > 1, waiting and running < cfg.max_num_seqs)
        out, sealed, done, now = [], 0, req.num_computed_tokens + q, req.num_computed_tokens
        hold = self.cfg.async_scheduling   # holds_finished
        li, nl, tokens = 0, len(leaves), req.prompt_len + req.num_output_tokens
        if not cfg.long_prefill_token_threshold:   # _clamp is min(left, budget) at every step; every full chunk is sealed
            cap = cfg.max_num_seqs
            while done < tokens:
                j = len(out) + 1
                held = 0
                while li < nl and leaves[li] <= j:
                    budget += 1
                    running -= 1
                    held += hold and leaves[li] == j
                    li += 1
                n = tokens - done
                if n > budget:
                    n = budget
                if n <= 0 or (waiting and running + held < cap and n < budget):
                    break
                out.append(n)
                if n == budget and sealed == len(out) - 1:
                    sealed += 1
                done += n
            return out, sealed
        try:
            while done < tokens:
                j = len(out) + 1
                held = 0
                while li < nl and leaves[li] <= j:   # a decode fewer from this step on
                    budget += 1
                    running -= 1
                    held += hold and leaves[li] == j
                    li += 1
                req.num_computed_tokens = done   # _clamp reads the request as it would stand then
                self._thr = cfg.long_prefill_token_threshold if running + held + waiting > 1 else 0
                n = self._clamp(req, budget)
                if n <= 0 or (waiting and running + held < cfg.max_num_seqs and n < budget):
                    break
                out.append(n)
                if n == budget and sealed == len(out) - 1:
                    self._thr = cfg.long_prefill_token_threshold
                    if self._clamp(req, budget) == n:
                        sealed += 1
                done += n
        finally:
            req.num_computed_tokens, self._thr = now, thr0
        return out, sealed

    def arrival_chunks(self, s: SchedulerState, req, decodes: int, seated: int, leaves=(), extra: int = 0,
                       queued: bool = False) -> tuple[list[int], int]:
        """FAST-FORWARD HOOK (policies/base.py). Schedule() walks the decodes (one token each)
        and reaches the waiting queue with ``budget − decodes`` left; req is admitted while
        `seated` is below max_num_seqs (the replica's KV bound covers scheduler_reserve_full_isl)
        and takes ``_clamp`` of what is left, then, last in the running queue, the same each
        step. Only without long_prefill_token_threshold (an arrival would switch it on) and
        without a prefix cache (its lookup and publishing are schedule()'s). A chunk of the whole
        budget left is sealed: a request waiting behind it gets nothing."""
        cfg = self.cfg
        if cfg.long_prefill_token_threshold or s.pool.cache is not None or seated >= cfg.max_num_seqs:
            return [], 0
        budget = cfg.max_num_batched_tokens - decodes
        rem = req.prompt_len + req.num_output_tokens - req.num_computed_tokens
        if budget - extra <= 0 or rem <= 0 or (rem > budget - extra and not cfg.enable_chunked_prefill):
            return [], 0
        out, sealed, li, nl = [], 0, 0, len(leaves)
        while rem > 0:
            while li < nl and leaves[li] <= len(out):
                budget += 1
                li += 1
            n = budget - extra if out == [] else budget
            if rem < n:
                n = rem
            if out and n == budget and sealed == len(out) - 1:   # the whole budget
                sealed += 1
            out.append(n)
            rem -= n
        if queued and out[0] < cfg.max_num_batched_tokens - decodes - extra:   # the next in the queue would get the rest
            return [], 0
        return out, sealed

    def on_lead(self, s: SchedulerState, req, chunks: list) -> None:
        """FAST-FORWARD HOOK: the prefix cache takes each later chunk's full blocks as
        schedule() would have when planning it (``SchedulerState.publish``), chunk by chunk:
        a chunk that meets a block cached by someone else stops the publishing for good."""
        if s.pool.cache is None or len(chunks) < 2:
            return
        now = req.num_computed_tokens
        done = now - sum(chunks[1:])
        try:
            for q in chunks[1:]:
                req.num_computed_tokens = done
                done += q
                s.publish(req, done)
        finally:
            req.num_computed_tokens = now

    def can_fast_forward(self, s: SchedulerState) -> bool:
        """Decode-only steps repeat while no waiting request can be admitted: the queue is empty,
        or max_num_seqs is reached, or its head cannot get blocks (free blocks only shrink)."""
        running = s.num_running
        if running > self.cfg.max_num_batched_tokens:
            return False
        if not s.waiting or running >= self.cfg.max_num_seqs:
            return True
        self._thr = self._threshold(s)
        full = self.cfg.scheduler_reserve_full_isl

        def need(head):
            n = min(self._clamp(head, 1 << 62), self.cfg.max_num_batched_tokens - running)
            return max(n, head.num_tokens - head.num_computed_tokens) if full and n > 0 else n
        return s.head_blocked(need)

    def check(self, plan, s) -> None:
        assert plan.num_tokens <= self.cfg.max_num_batched_tokens, "token budget exceeded"
        assert plan.cohort == s.num_in_cohort, "the decode cohort sat out a step"
        assert s.num_running <= self.cfg.max_num_seqs
        thr = self._thr
        assert not thr or all(n <= thr for _, n in plan.items)

    @property
    def prefix_caching(self) -> bool:
        return self.cfg.enable_prefix_caching


def _even_chunks(rem: int, budget: int, thr: int, thr_on: bool, cut: bool) -> tuple[list[int], int]:
    """``prefill_chunks`` when nobody leaves (one threshold for every step): `rem` tokens in chunks
    of _clamp's cap, the last one shorter; `cut` (a request waiting, a seat free): only the chunks
    that take the whole budget. Sealed: the leading chunks of the whole budget when the threshold
    an arrival would switch on leaves them so."""
    if rem <= 0 or budget <= 0:
        return [], 0
    cap = thr if thr_on and 0 < thr < budget else budget
    full, last = divmod(rem, cap)
    if cut and cap < budget:
        return [], 0
    out = [cap] * full
    if last and not cut:
        out.append(last)
    return out, (full if cap == budget and (thr <= 0 or thr >= budget) else 0)
