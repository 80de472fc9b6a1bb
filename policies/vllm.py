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

from costmodel.errors import require
from simcore.apc import BlockHashCache

from .base import Plan, SchedulerState
from .vllm_config import VLLMConfig, vllm_defaults
from .vllm_lookahead import VLLMLookahead
from .vllm_pd import ConnectorState, after_schedule, parse_kv_transfer_config, schedule_waiting
from .vllm_spec import SpecHooks, parse_speculative_config

__all__ = ["VLLMConfig", "VLLMScheduler", "vllm_defaults"]


class VLLMScheduler(SpecHooks, VLLMLookahead):
    """vLLM's Scheduler (async_scheduling off) or AsyncScheduler (on).

    ``overlaps_host``: with async scheduling, vLLM schedules step n+1 and prepares its inputs on
    the host while the GPU runs step n (vllm/v1/engine/core.py, step_with_batch_queue, two
    batches in flight), so a step's wall time is max(GPU, host) rather than GPU + host. The
    replica hands this to the cost model, which prices the host part of a step accordingly.
    The fast-forward hooks are VLLMLookahead's (policies/vllm_lookahead.py).
    """

    def __init__(self, cfg: VLLMConfig):
        self.cfg = cfg
        self._thr = cfg.long_prefill_token_threshold
        spec = parse_speculative_config(cfg.speculative_config, cfg.spec_acceptance, cfg.spec_seed)
        self.init_spec(spec, bool(cfg.async_scheduling))
        self.kv_transfer = parse_kv_transfer_config(cfg.kv_transfer_config)

    def new_connector(self) -> ConnectorState | None:
        """The scheduler's connector state (policies/vllm_pd.py), or None without a connector."""
        return ConnectorState(lag=self.cfg.async_scheduling) if self.kv_transfer is not None else None

    @property
    def needs_stepping(self) -> bool:
        return self.spec is not None or self.kv_transfer is not None  # the fast paths know neither

    def new_prefix_cache(self, block_tokens: int, engine_block_size: int) -> BlockHashCache:
        """vLLM's own block-hash cache (simcore/apc.py); not with drafts (EAGLE's block drop, the
        caching of verified tokens only: not modelled)."""
        require(
            self.kv_transfer is None,
            "enable_prefix_caching",
            True,
            "prefix caching with a KV connector is not modelled yet (the workload carries block hashes); "
            "pass --no-enable-prefix-caching",
        )
        require(
            self.spec is None,
            "enable_prefix_caching",
            True,
            "prefix caching with speculative decoding is not modelled yet (the workload carries block "
            "hashes); pass --no-enable-prefix-caching",
        )
        return BlockHashCache(block_tokens, engine_block_size, outputs_lag=self.cfg.async_scheduling)

    @property
    def overlaps_host(self) -> bool:
        return self.cfg.async_scheduling

    @property
    def holds_finished(self) -> bool:
        return self.cfg.async_scheduling

    def schedule(self, s: SchedulerState) -> Plan:
        plan, token_budget, cfg = Plan(), self.cfg.max_num_batched_tokens, self.cfg
        cache = s.pool.cache if isinstance(s.pool.cache, BlockHashCache) else None
        if cache is not None:
            cache.begin_schedule()  # kv_cache_manager.new_step_starts()

        # `long_prefill_token_threshold` exists to stop a long prefill from starving other
        # requests of the token budget. When it is the only request there is nobody to starve.
        long_prefill_token_threshold = cfg.long_prefill_token_threshold
        holding = len(s.connector.holding) if s.connector is not None else 0  # kv_holding_waiting
        if long_prefill_token_threshold and s.num_running + len(s.finished) + len(s.waiting) + holding <= 1:
            long_prefill_token_threshold = 0
        self._thr = long_prefill_token_threshold

        # The decode cohort (policies/base.py): its members decode one token each, as the walk
        # below would give them, or it dissolves back into the running queue.
        plan.cohort = s.cohort_rides(self._wants, token_budget)
        token_budget -= plan.cohort
        num_scheduled_tokens, preempted_reqs = {}, plan.preempted
        spec, max_len, ahead, prefill_scheduled = self.spec, cfg.max_model_len, 0, False
        if spec is not None:
            plan.spec = {}  # request -> drafts scheduled (negative: padding placeholders)

        # First, schedule the RUNNING requests.
        req_index, running, allocate_slots = 0, s.running, s.allocate_slots
        while req_index < len(running) and token_budget > 0:
            request = running[req_index]
            if request.spec_placeholders and self.certain_to_finish(request):
                req_index += 1
                continue
            num_new_tokens = request.prompt_len + request.num_output_tokens - request.num_computed_tokens
            if spec is not None:  # num_tokens_with_spec + num_output_placeholders (async)
                num_new_tokens += request.spec_tokens + request.spec_placeholders
            if 0 < long_prefill_token_threshold < num_new_tokens:
                num_new_tokens = long_prefill_token_threshold
            if num_new_tokens > token_budget:  # min(num_new_tokens, token_budget): no call in the hot loop
                num_new_tokens = token_budget
            if spec is not None:  # "Make sure the input position does not exceed the max model len."
                num_new_tokens = min(num_new_tokens, max_len - request.num_computed_tokens - 1)
                if num_new_tokens <= 0:
                    req_index += 1
                    continue
                ahead = min(spec.lookahead, max_len - request.num_computed_tokens - num_new_tokens)
            # allocate_slots, preempting the last running request until it fits
            if not allocate_slots(request, num_new_tokens, preempted_reqs, ahead):
                break
            num_scheduled_tokens[request] = num_new_tokens
            if spec is not None:
                drafts = request.num_computed_tokens + num_new_tokens - request.num_tokens - request.spec_placeholders
                if drafts > 0:
                    plan.spec[request] = drafts  # type: ignore[index]
                request.spec_tokens = 0
                prefill_scheduled |= request in self._chunking
            token_budget -= num_new_tokens
            req_index += 1
        if cache is not None:
            cache.end_schedule(running[req_index:])

        # Next, schedule the WAITING requests.
        if s.connector is not None:  # with a KV connector: policies/vllm_pd.py
            if not preempted_reqs:
                token_budget = schedule_waiting(self, s, num_scheduled_tokens, token_budget)
                plan.loads = s.connector.loads
        elif not preempted_reqs and s.waiting:
            waiting = s.waiting
            num_running = s.num_running + len(s.finished)
            ran = len(num_scheduled_tokens)
            while waiting and token_budget > 0 and num_running < cfg.max_num_seqs:
                request = waiting[0]
                if s.pool.cache is not None:
                    s.lookup(request)  # get_computed_blocks
                num_new_tokens = request.prompt_len + request.num_output_tokens - request.num_computed_tokens
                pad = False
                if spec is not None and num_new_tokens == 1 and not prefill_scheduled:
                    # "Pad new decode requests to uniform spec decoding size"
                    if (ran or request.num_computed_tokens > 0) and request.num_computed_tokens + spec.k + 2 <= max_len:
                        if spec.k + 1 > token_budget:
                            break  # "Prefer to not schedule than schedule un-padded."
                        num_new_tokens, pad = spec.k + 1, True
                if 0 < long_prefill_token_threshold < num_new_tokens:
                    num_new_tokens = long_prefill_token_threshold
                if not cfg.enable_chunked_prefill and num_new_tokens > token_budget:
                    break
                if num_new_tokens > token_budget:
                    num_new_tokens = token_budget
                if spec is not None:
                    ahead = min(spec.lookahead, max_len - request.num_computed_tokens - num_new_tokens)
                if not s.allocate_new(request, num_new_tokens, cfg.scheduler_reserve_full_isl, ahead):
                    break
                if pad:  # k placeholder drafts (-1), never accepted
                    plan.spec[request] = request.num_tokens - request.num_computed_tokens - num_new_tokens  # type: ignore[index]
                waiting.popleft()
                s.admit(request)
                num_running += 1
                num_scheduled_tokens[request] = num_new_tokens
                token_budget -= num_new_tokens
        plan.items = list(num_scheduled_tokens.items())
        if s.connector is not None:
            after_schedule(s.connector, plan.items, preempted_reqs)
        if spec is not None:
            self.after_schedule(plan)
        if s.finished:
            plan.released = s.release_finished()
        return plan

    def check(self, plan, s) -> None:
        assert plan.num_tokens <= self.cfg.max_num_batched_tokens, "token budget exceeded"
        assert plan.cohort == s.num_in_cohort, "the decode cohort sat out a step"
        assert s.num_running <= self.cfg.max_num_seqs
        thr = self._thr
        assert not thr or all(n <= thr for _, n in plan.items)

    @property
    def prefix_caching(self) -> bool:
        return self.cfg.enable_prefix_caching
