"""SGLang's overlap scheduler (scheduler.py, Scheduler.event_loop_overlap, SGLang's default on
CUDA: disable_overlap_schedule=False), mixed into SGLangScheduler (policies/sglang.py).

event_loop_overlap forms batch n+1 (get_next_batch_to_run) before it processes batch n's result
(pop_and_process → process_batch_result), so when n+1 is scheduled:
- n's tokens are not counted: len(output_ids) of every request that samples in n lags by one,
  in PrefillAdder's reserve (max_new_tokens − outputs, add_one_req_ignore_eos), the retraction
  order and the new-token ratio after a retraction. Here their num_output_tokens is one lower
  for the length of schedule() (``_lag_begin`` / ``_lag_end``).
- a request that finishes by length in n is still in the running batch: it counts against
  max_running_requests and in PrefillAdder's reserve and mixed decode tokens, and it holds its
  KV and req_to_token row; it is not decoded again (Scheduler._reqs_finishing_inflight, under
  enable_skip_finishing_decode, takes it out of the decode or mixed batch:
  update_running_batch, _get_new_batch_prefill_raw). Its KV goes when n is processed, after
  n+1 is formed: the replica holds it (``holds_finished``, SchedulerState.retire) and it is
  released at the end of schedule(). Its leaving resets batch_is_full only for the schedule
  after that (running_batch.filter_batch in get_next_batch_to_run), so a prefill waits a step.
- when the decodes do not fit and some request finishes in flight, update_running_batch runs
  nothing (returns None): n is processed and the next batch is formed at once (the empty plan
  releases the finished requests, so the replica plans again at the same instant).
- a request retracted while its token is in flight drops that token (process_batch_result_*
  skips req.is_retracted): it re-prefills without it and samples it again.
- with the radix cache, n's completed prefills are checkpointed and its finished requests'
  KV goes into the tree after n+1 is formed, in batch order; the chunked request's chunk is
  stashed when n+1 is formed (get_next_batch_to_run), before them.
Under the overlap the decode cohort is off (its members' lagged outputs are not kept); decode runs
and chunked leads are taken as without it (SGLangLookahead), checked against the reference loop
with the overlap drawn (tests/test_fast_forward_oracle.py) and by the conformance harness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sglang_radix import checkpoint


class OverlapLag:
    """Needs SGLangScheduler's cfg, batch_is_full and chunked_req, and RadixDriving's _cache,
    _pool, _last and _decoded."""

    if TYPE_CHECKING:  # SGLangScheduler and RadixDriving provide these; declared for mypy only
        cfg: Any
        batch_is_full: bool
        chunked_req: Any
        _cache: Any
        _pool: Any
        _last: Any
        _decoded: int
        _remember: Any
        _release_finished_kv: Any

    def _init_overlap(self) -> None:
        self._sampling: list = []  # the last plan's requests that sample at its end (their token is in flight)
        self._out_at: list = []  # their outputs when it was planned (a verify emits 1 + accepted drafts)
        self._lagged: list = []  # the tokens each of them has in flight (taken off for schedule())
        self._full_reset_due = False  # requests finishing in flight were seen: batch_is_full resets next schedule
        self._stashed: Any = None  # the chunked request whose chunk was stashed this schedule

    @property
    def overlapped(self) -> bool:
        return not self.cfg.disable_overlap_schedule

    @property
    def holds_finished(self) -> bool:
        return self._cache is not None or self.overlapped

    def _lag_begin(self, s) -> list:
        """Scheduling batch n+1 with n's result unprocessed: the requests finishing in flight (still
        in SGLang's running batch), with every sampling request's outputs one short."""
        if self._full_reset_due:
            self.batch_is_full = False
        finishing = list(s.finished)
        self._full_reset_due = bool(finishing)
        if getattr(self, "spec", None) is not None:  # a verify's 1 + accepted drafts (0: a dropped verify)
            self._lagged = [r.num_output_tokens - o for r, o in zip(self._sampling, self._out_at)]
        else:  # one token each (fast-forward runs apply several steps: still one in flight)
            self._lagged = [1] * len(self._sampling)
        for r, k in zip(self._sampling, self._lagged):
            r.num_output_tokens -= k
        self._stashed = None
        if self._cache is not None:  # get_next_batch_to_run: stash_chunked_request
            self._pool, self._decoded = s.pool, 0
            for r, end in self._last:
                if end is not None and r is self.chunked_req:
                    checkpoint(s.pool, r, end)
                    self._stashed = r
        return finishing

    def _lag_end(self, s, plan):
        """Batch n+1 is formed: the outputs count again, but a retracted request's token in flight
        is dropped; then batch n's result is processed (pop_and_process)."""
        preempted = {id(r) for r in plan.preempted}
        for r, k in zip(self._sampling, self._lagged):
            if id(r) not in preempted:
                r.num_output_tokens += k
            elif not r.num_output_tokens:  # its first token never reached the client
                r.first_token_s = None
        plan.released = self._process_last(s, preempted)
        self._remember(plan)
        self._sampling = [r for r, n in plan.items if r.num_computed_tokens + n >= r.num_tokens]
        self._out_at = [r.num_output_tokens for r in self._sampling]
        return plan

    def _process_last(self, s, skip: set) -> int:
        """process_batch_result for batch n, in batch order: a finished request's KV is released
        (release_kv_cache), a completed prefill checkpointed unless retracted since."""
        fin = s.finished
        n = len(fin)
        if self._cache is None:
            s.release_finished()
            return n
        done = {id(r) for r in fin}
        for r, end in self._last:
            if end is None:
                continue
            if id(r) in done:
                self._release_finished_kv(s, r, end)
                done.discard(id(r))
            elif r.finish_s is None and r is not self._stashed and id(r) not in skip:
                checkpoint(s.pool, r, end)
        for r in fin:
            if id(r) in done:
                self._release_finished_kv(s, r, None)
        fin.clear()
        return n
