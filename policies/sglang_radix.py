"""How SGLang's scheduler drives its radix cache (simcore/radix_cache.py), mixed into SGLangScheduler.

When the tree is touched decides what it evicts, so the order is SGLang's:
- a step's results in batch order (BatchResultProcessor.process_batch_result_prefill / _decode):
  a finished request's KV goes into the tree (release_kv_cache), a completed prefill's prompt is
  checkpointed (checkpoint_kv_cache); the chunked request's chunk when the next batch is formed
  (Scheduler.get_next_batch_to_run). Finished requests are therefore held to the next schedule()
  (``holds_finished``) and released there with the checkpoints.
- the eviction points, each freeing whole nodes for its own count of tokens: before an extend
  (ScheduleBatch.prepare_for_extend: the extend tokens, a page a request when paged), in
  check_decode_mem (the decodes' new pages), before a decode (prepare_for_decode: a page a
  request), after each retraction (release_req: SGLANG_RETRACT_DECODE_STEPS a request left).
- every 32nd prefill attempt with requests waiting walks their prefixes for LRU
  (SchedulePolicy._touch_waiting_prefixes).
Fast-forward keeps the same order (policies/sglang_lookahead.py): completed prefills are
checkpointed after a run's first step (``on_fast_forward``), a chunked lead node by node
(``_lead_checkpoints``), and runs stop short of any step that would evict (``run_headroom``; the
tree would change shape between steps nobody plans).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simcore.mamba_radix_cache import MambaRadixCache
from simcore.radix_cache import REFRESH_INTERVAL, REFRESH_MAX, RadixCache


class RadixDriving:
    """Needs SGLangScheduler's chunked_req, cfg and _extends."""

    if TYPE_CHECKING:  # the SGLangScheduler this mixes into provides these; declared for mypy only
        chunked_req: Any

    def _init_radix(self) -> None:
        self._cache = self._pool = None
        self._last = []  # type: ignore[var-annotated]  # the last plan in batch order: (request, its extend's end, or None for a decode)
        self._refreshes = 0
        self._decoded = 0  # decode-only steps of the run being applied (on_fast_forward, for on_lead)

    mamba: tuple | None = None  # a hybrid model's (strategy, grid): simcore/mamba_radix_cache.py

    def new_prefix_cache(self, block_tokens: int, engine_block_size: int) -> RadixCache:
        if self.mamba is not None:
            self._cache = MambaRadixCache(block_tokens, engine_block_size, *self.mamba)  # type: ignore[assignment]
        else:
            self._cache = RadixCache(block_tokens, engine_block_size)  # type: ignore[assignment]
        return self._cache  # type: ignore[return-value]

    @property
    def holds_finished(self) -> bool:
        return self._cache is not None

    def _settle(self, s) -> None:
        """The last step's results into the tree, in batch order (see the module): its extends as
        planned, then its finished decodes in the order they are held (by queue order, the cohort's
        among the planned ones: simcore/replica.py)."""
        self._pool, self._decoded = s.pool, 0
        fin, last, self._last = s.finished, self._last, []
        done = {id(r) for r in fin}
        chunked = None
        for r, end in last:
            if end is None:
                continue
            if id(r) in done:
                self._release_finished_kv(s, r, end)
                done.discard(id(r))
            elif r.finish_s is None:
                if r is self.chunked_req:
                    chunked = (r, end)
                else:
                    checkpoint(s.pool, r, end)
        for r in fin:
            if id(r) in done:
                self._release_finished_kv(s, r, None)
        fin.clear()
        if chunked is not None:
            checkpoint(s.pool, *chunked)

    def _release_finished_kv(self, s, r, end) -> None:
        """release_kv_cache of a finished request (`end`: its extend's end when it finished in a prefill)."""
        s.pool.release(r)

    def _remember(self, plan):
        if self._cache is not None:
            self._last = [
                (r, r.num_computed_tokens + n if i < self._extends else None) for i, (r, n) in enumerate(plan.items)
            ]
        return plan

    def _refresh_waiting(self, s) -> None:
        """SchedulePolicy.calc_priority → _touch_waiting_prefixes: every REFRESH_INTERVAL-th call
        with requests waiting, the first REFRESH_MAX of them, the head last."""
        if self._cache is not None and s.waiting:
            if self._refreshes % REFRESH_INTERVAL == 0:
                for r in reversed(list(s.waiting)[:REFRESH_MAX]):
                    self._cache.touch_prefix(r)
            self._refreshes += 1


def checkpoint(pool, req, end: int) -> None:
    """checkpoint_kv_cache: the request's first `end` positions into the tree; its private blocks
    shrink by what the tree took over, and by its copies of what the tree held."""
    adopted, dup = pool.cache.checkpoint(req, end)
    req.num_blocks -= adopted + dup
    pool.used -= dup


def evict_for(pool, tokens: int) -> None:
    """evict_from_tree_cache: whole nodes go until `tokens` are free (or nothing is evictable)."""
    short = pool.blocks_for(tokens) - pool.free
    if pool.cache is not None and short > 0:
        pool.used -= pool.cache.evict(short)
