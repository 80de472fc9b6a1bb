"""What vLLM's schedule() will do in the steps ahead, told without stepping: the fast-forward hooks
(policies/base.py, PolicyHooks) that VLLMScheduler (policies/vllm.py) inherits, and the closed-form
chunk plans they read from its rules.

Each hook answers for schedule() as it stands in policies/vllm.py: ``_clamp`` is its
num_new_tokens (the request's tokens left, capped by long_prefill_token_threshold, then by the
budget), ``_threshold`` its threshold (off when running + waiting == 1). A change to schedule()
that these do not follow shows up as fast-forward parting from stepping (tests/test_chunked_runs.py,
test_arrival_folds.py, test_cohort.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Plan, PolicyHooks, SchedulerState


class VLLMLookahead(PolicyHooks):
    """Needs VLLMScheduler's cfg and _thr (the threshold its last schedule() used)."""

    if TYPE_CHECKING:  # VLLMScheduler provides these; declared for mypy only
        cfg: Any
        _thr: int

    lazy_decodes = True  # the replica may keep plain decodes in a DecodeCohort

    def _threshold(self, s: SchedulerState) -> int:
        """schedule()'s long_prefill_token_threshold: "When it is the only request there is nobody
        to starve" -- it applies only with running + waiting > 1 (running counts the finished
        requests async scheduling still holds)."""
        thr = self.cfg.long_prefill_token_threshold
        if not thr:
            return 0
        return thr if s.num_running + len(s.finished) + len(s.waiting) > 1 else 0

    def _clamp(self, req, budget: int) -> int:
        """schedule()'s num_new_tokens for req with `budget` left, under the threshold ``_thr``."""
        n = req.prompt_len + req.num_output_tokens - req.num_computed_tokens
        thr = self._thr
        if 0 < thr < n:
            n = thr
        return min(n, budget)

    def _wants(self, req) -> int:
        """``_clamp`` with no budget: what each running request asks of the step beside the
        cohort (SchedulerState.cohort_rides)."""
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
        if nc and (nc != len(c.members) or c.top_seq > req.seq) or not nc and c is not None and c.members:  # type: ignore[union-attr]  # nc > 0: a cohort
            return [], 0
        for r, _ in items:
            if r.seq > req.seq:
                return [], 0
        cfg, thr0 = self.cfg, self._thr
        budget = cfg.max_num_batched_tokens - (len(items) - 1 + nc)
        running, waiting = len(items) + nc, len(s.waiting)
        if not leaves:
            return _even_chunks(
                req.prompt_len + req.num_output_tokens - req.num_computed_tokens - q,
                budget,
                cfg.long_prefill_token_threshold,
                running + waiting > 1,
                bool(waiting) and running < cfg.max_num_seqs,
            )
        out: list[int]
        out, sealed, done, now = [], 0, req.num_computed_tokens + q, req.num_computed_tokens
        hold = self.cfg.async_scheduling  # holds_finished
        li, nl, tokens = 0, len(leaves), req.prompt_len + req.num_output_tokens
        if (
            not cfg.long_prefill_token_threshold
        ):  # _clamp is min(left, budget) at every step; every full chunk is sealed
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
                while li < nl and leaves[li] <= j:  # a decode fewer from this step on
                    budget += 1
                    running -= 1
                    held += hold and leaves[li] == j
                    li += 1
                req.num_computed_tokens = done  # _clamp reads the request as it would stand then
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

    def arrival_chunks(
        self, s: SchedulerState, req, decodes: int, seated: int, leaves=(), extra: int = 0, queued: bool = False
    ) -> tuple[list[int], int]:
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
        out: list[int]
        out, sealed, li, nl = [], 0, 0, len(leaves)
        while rem > 0:
            while li < nl and leaves[li] <= len(out):
                budget += 1
                li += 1
            n = budget - extra if out == [] else budget
            if rem < n:
                n = rem
            if out and n == budget and sealed == len(out) - 1:  # the whole budget
                sealed += 1
            out.append(n)
            rem -= n
        if queued and out[0] < cfg.max_num_batched_tokens - decodes - extra:  # the next in the queue would get the rest
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
