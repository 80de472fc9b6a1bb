"""What SGLang's scheduler will do in the steps ahead, told without stepping: the fast-forward hooks
(policies/base.py, PolicyHooks) that SGLangScheduler (policies/sglang.py) inherits.

Runs are taken only where SGLang's next batches follow from what the replica already knows: no
chunked request and nobody waiting for a decode run (``can_fast_forward``), the chunked request's
prefill batches alone for a lead (``prefill_chunks``, cut by PrefillAdder as schedule() would).
The radix tree keeps SGLang's order (policies/sglang_radix.py): a run's completed prefills are
checkpointed after its first step (``on_fast_forward``), a lead chunk by chunk
(``_lead_checkpoints``), and runs stop short of any step that would evict (``run_headroom``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Plan, PolicyHooks, SchedulerState
from .sglang_prefill import CLIP_MAX_NEW_TOKENS, PrefillAdder
from .sglang_radix import checkpoint


class SGLangLookahead(PolicyHooks):
    """Needs SGLangScheduler's cfg, chunked_req, new_token_ratio (and its min_ratio, ratio_decay),
    _extends and _decoding, and
    RadixDriving's _cache, _pool, _last and _decoded."""

    if TYPE_CHECKING:  # SGLangScheduler and RadixDriving provide these; declared for mypy only
        cfg: Any
        chunked_req: Any
        new_token_ratio: float
        min_ratio: float
        ratio_decay: float
        _extends: int
        _decoding: Any
        _cache: Any
        _pool: Any
        _last: Any
        _decoded: Any

    @property
    def lazy_decodes(self) -> bool:
        """The replica may keep plain decodes in a DecodeCohort; not under the overlap scheduler
        (policies/sglang_overlap.py), whose lagged outputs the cohort does not keep."""
        return bool(self.cfg.disable_overlap_schedule)

    cohort_max_outputs_left = CLIP_MAX_NEW_TOKENS  # then a member's reserve is its outputs left, unclipped
    kv_observed = False  # set by Simulation when the router reads replicas' KV usage mid-run (can_fast_forward)

    @property
    def planned_extends(self) -> int:
        """The last plan's first items that are extends (the rest decode): simcore/replica.py orders a
        step's finishers by it, as the batch results are processed."""
        return self._extends

    def can_fast_forward(self, s: SchedulerState) -> bool:
        """Not with a chunked request or a queue; nor, when a router reads the KV usage mid-run, a
        plan with extends under the radix cache: their checkpoint after the first step frees what
        the tree already held (``checkpoint``), which ``Replica.kv_usage`` cannot show inside a run."""
        return (
            self.chunked_req is None
            and not s.waiting
            and not (self.kv_observed and self._cache is not None and self._extends)
        )

    def on_fast_forward(self, steps: int) -> None:
        """FAST-FORWARD HOOK: the plan's completed prefills are checkpointed after its first step,
        before anything later in the run (process_batch_result_prefill); the chunked request's
        chunks are on_lead's."""
        if self._cache is not None:
            self._checkpoint_completed(steps)
        for _ in range(steps):
            if self.new_token_ratio <= self.min_ratio:
                break
            self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.min_ratio)

    def prefill_chunks(self, s: SchedulerState, plan: Plan, leaves=()) -> tuple[list[int], int]:
        """FAST-FORWARD HOOK (policies/base.py). A prefill batch of the chunked request alone,
        nobody waiting, not mixed: the decodes sit out and each next batch is the chunked
        request's next chunk, as PrefillAdder.add_chunked cuts it with the KV it holds by then
        (the new-token ratio and the decodes' outputs left stand still in prefill batches). An
        arrival would join the next prefill batch, so no chunk is sealed. Declined when the radix
        checkpoint after a chunk (``schedule``) would meet blocks the tree already holds: it frees
        the request's copies, which changes the KV the next chunk is cut with."""
        if self.cfg.is_mixed_chunk or s.waiting or plan.cohort or len(plan.items) != 1:
            return [], 0
        req, q = plan.items[0]
        if req is not self.chunked_req or (s.pool.cache is not None and s.pool.cache.holds_next(req)):
            return [], 0
        pool, decoding, page = s.pool, self._decoding(s), self.cfg.page_size
        out, done = [], req.num_computed_tokens + q
        now, used, blocks = req.num_computed_tokens, pool.used, req.num_blocks
        try:
            while done < req.num_tokens:
                held = pool.blocks_held(req, done)  # the request as it would stand then
                req.num_computed_tokens, req.num_blocks, pool.used = done, held, used + held - blocks
                adder = PrefillAdder(self.cfg, s, decoding, self.new_token_ratio)
                adder.add_chunked(req)
                n = adder.items[-1][1]
                if n <= 0 or (self._cache is not None and pool.blocks_for(n + (page if page > 1 else 0)) > pool.free):
                    break  # (prepare_for_extend would evict: the tree changes shape)
                out.append(n)
                done += n
        finally:
            req.num_computed_tokens, req.num_blocks, pool.used = now, blocks, used
        return out, 0

    def on_lead(self, s: SchedulerState, req, chunks: list) -> None:
        """FAST-FORWARD HOOK: a lead that completed the chunked request's prompt ends its chunking,
        as add_chunked returning False does. With the radix cache each chunk but the last is
        checkpointed as the next schedule() would have (a node per chunk), and the last too when
        the run went on decoding."""
        if self._cache is not None:
            self._lead_checkpoints(s, req, chunks)
        if req is self.chunked_req and req.num_computed_tokens >= req.num_tokens:
            self.chunked_req = None

    def _checkpoint_completed(self, steps: int) -> None:
        """A run of `steps` is being applied: the plan's completed prefills are checkpointed now,
        after its first step, before anything later in the run."""
        self._decoded = steps
        if self._last:
            rest = []
            for r, end in self._last:
                if end is not None and r is not self.chunked_req:
                    checkpoint(self._pool, r, end)
                    end = None
                rest.append((r, end))
            self._last = rest

    def _lead_checkpoints(self, s, req, chunks: list) -> None:
        """Each chunk of a lead but the last is checkpointed as the next schedule() would have (a
        node per chunk), the last too when the run went on decoding; `req` holds the blocks of
        each chunk's end in turn."""
        now, pool = req.num_computed_tokens, s.pool
        end, ends = now - sum(chunks), []
        for q in chunks:
            end += q
            ends.append(end)
        final = now >= req.num_tokens and self._decoded > 0
        try:
            for end in ends if final else ends[:-1]:
                req.num_computed_tokens = end
                held = pool.blocks_held(req, end)
                pool.used += held - req.num_blocks
                req.num_blocks = held
                checkpoint(pool, req, end)
        finally:
            req.num_computed_tokens = now
        self._last = [] if final else [(req, now)]

    def run_headroom(self, s) -> int:
        """FAST-FORWARD HOOK (simcore/fastforward/runs.py): a decode run keeps a page a request free before each
        of its steps, since prepare_for_decode evicts from the tree below that and every eviction
        reshapes it."""
        return s.num_running if self._cache is not None else 0
