"""SGLang 0.5.23's decode side under PD disaggregation (``--disaggregation-mode decode``).

One iteration of ``Scheduler.event_loop_normal_disagg_decode`` (sglang/srt/disaggregation/decode.py),
in the reference loop's terms (``schedule`` is one iteration; the replica runs its decode):

* ``process_decode_queue``: ``DecodePreallocQueue.resume_retracted_reqs`` first (while any
  retracted request is left, nothing new is preallocated or polled); then ``pop_preallocated``
  takes arrivals first in, first out while the KV budget ``_allocatable_token_budgets`` allows
  (free tokens less max(``num_reserved_decode_tokens`` per active request, the largest running
  request's whole sequence less every running request's tokens), less what the retracted queue
  needs), with a req_to_token row (``DecodeReqToTokenPool``: max_running_requests +
  ``disaggregation_decode_extra_slots``) and a metadata slot (2 per row of the pool's size)
  free; it reserves the prompt's KV and starts the transfer. ``DecodeTransferQueue.pop_transferred``
  hands over, in queue order, the requests whose KV has arrived (``fake`` backend: at once).
* ``get_new_prebuilt_batch``: the arrived requests, up to max_running_requests less the running
  batch (whose requests finished in the last step still count), join it with the prefill's token
  as their first output (``process_batch_result_prebuilt``; one that wanted one token finishes).
* ``update_running_batch``: every running request decodes a token when their new pages are free
  (``check_decode_mem``), else ``retract_decode`` (fewest outputs, then longest prompt, first)
  backs their KV up to the host and puts them in the retracted queue; they resume with their KV
  restored, no recompute.

Under the overlap loop (``event_loop_overlap_disagg_decode``, SGLang's default) iteration k forms
batch n + 1 before batch n's result is processed, and that loop does not set
``enable_skip_finishing_decode``: n's outputs are not counted yet (lagged here for the length of
schedule()), a request finishing in n is decoded once more in n + 1 (its result dropped) and
finishes when n is processed, after n + 1 is formed (the replica defers the finish to this
schedule(): ``DecodeQueues.finishing``); a request retracted while its token is in flight loses
it and decodes it again after resuming. The decode radix cache and host receive are not modelled.
Only the reference loop runs it (``needs_stepping``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.errors import require

from .base import Plan, PolicyHooks, SchedulerState
from .sglang_config import CLIP_MAX_NEW_TOKEN, SGLangConfig, SGLangDisagg
from .sglang_decode import retraction_order, victims


@dataclass
class DecodeQueues:
    """The queues between arrival and the running batch, as the replica's connector state:
    ``transfer`` DecodeTransferQueue.queue, ``landed`` Scheduler.waiting_queue, ``retracted``
    DecodePreallocQueue.retracted_queue (KV on the host), ``recv_done`` transfers completed."""

    transfer: list = field(default_factory=list)
    landed: list = field(default_factory=list)
    retracted: list = field(default_factory=list)
    recv_done: set = field(default_factory=set)
    finishing: list = field(default_factory=list)  # overlap: finished by the step just run, not yet processed
    defers_finish: bool = False  # overlap: the replica leaves a finish to the next schedule() (``finishing``)
    lag: bool = False  # simcore/connector_events.py: completions are applied at once
    sending: list = field(default_factory=list)  # prefill side: none here
    pending: list = field(default_factory=list)
    in_flight: set = field(default_factory=set)

    @property
    def holding(self) -> list:
        return self.transfer + self.landed + self.retracted

    def held_blocks(self) -> int:
        return sum(r.num_blocks for r in self.transfer) + sum(r.num_blocks for r in self.landed)


class SGLangPDDecode(PolicyHooks):
    """SGLang's decode server: the prealloc, transfer and waiting queues, then the decode batch."""

    holds_finished = False
    prefix_caching = False

    def __init__(self, cfg: SGLangConfig, pd: SGLangDisagg):
        require(not cfg.enable_hierarchical_cache, "enable_hierarchical_cache", True, "not modelled under PD decode")
        self.cfg, self.pd = cfg, pd
        self.reserve = pd.num_reserved_decode_tokens
        self.rows = cfg.max_running_requests + pd.disaggregation_decode_extra_slots  # req_to_token rows
        self.meta = 2 * cfg.max_running_requests  # ReqToMetadataIdxAllocator: req_to_token_pool.size * 2
        self.batch: list = []  # running_batch.reqs: finished ones stay until the next filter_batch
        self.instant = pd.disaggregation_transfer_backend == "fake"
        self.overlaps_host = not cfg.disable_overlap_schedule  # event_loop_overlap_disagg_decode
        self._sampling: list = []  # overlap: the last batch's requests whose token is in flight

    @property
    def needs_stepping(self) -> bool:
        return True

    @property
    def needs_prefill_pool(self) -> bool:
        """mooncake / nixl: the KV comes from prefill servers (simcore/disagg_sglang.py runs the pair)."""
        return not self.instant

    def new_connector(self) -> DecodeQueues:
        return DecodeQueues(defers_finish=self.overlaps_host)

    def schedule(self, s: SchedulerState) -> Plan:
        """One iteration: process_decode_queue, get_new_prebuilt_batch, update_running_batch; under
        the overlap, with the last batch's outputs not counted, then that batch's result processed."""
        if not self.overlaps_host:
            return self._iterate(s)
        for r in self._sampling:
            r.num_output_tokens -= 1
        plan = self._iterate(s)
        self._process_last(s, plan)
        return plan

    def _process_last(self, s, plan: Plan) -> None:
        """process_batch_result_decode for batch n, after n + 1 was formed: its outputs count; a
        request retracted since drops its token (its KV ends one position earlier); the finished
        ones give their KV back and finish now (``landed`` streams nothing new for them)."""
        q = s.connector
        dropped = {id(r) for r in plan.preempted}
        for r in self._sampling:
            if id(r) in dropped:
                r.num_computed_tokens -= 1
            else:
                r.num_output_tokens += 1
        done = [r for r in q.finishing if id(r) not in dropped]
        q.finishing.clear()
        for r in done:
            s.pool.release(r)
            s.running.remove(r)
        if done:
            plan.landed = (plan.landed or []) + done
            plan.released += len(done)
        self._sampling = [r for r, _ in plan.items if r.num_output_tokens < r.output_len]

    def _iterate(self, s: SchedulerState) -> Plan:
        q, plan = s.connector, Plan()
        self._resume_retracted(s, q)
        if not q.retracted:
            new = self._pop_preallocated(s, q)
            q.transfer.extend(new)
            if self.instant:  # FakeKVReceiver: Success as soon as the metadata went
                q.recv_done.update(new)
            elif new:
                plan.loads = new
            self._pop_transferred(q)
        self._prebuilt(s, q, plan)
        self._decode(s, q, plan)
        return plan

    # --- DecodePreallocQueue ----------------------------------------------------------------------
    def _align(self, tokens: int) -> int:
        page = self.cfg.page_size
        return -(-tokens // page) * page

    def _budget(self, s, q, retractable: int | None, count_retracted: bool, extra: int) -> int:
        """_allocatable_token_budgets: free tokens less max(the active requests' reserve, the room
        one running request needs to finish), less the retracted queue's needs."""
        single = 0
        if retractable is not None and self.batch:
            single = max(min(r.output_len, CLIP_MAX_NEW_TOKEN) + r.prompt_len - retractable for r in self.batch)
        active = len(self.batch) + len(q.transfer) + len(q.landed) + extra
        budget = s.pool.free * s.pool.block_size - max(self.reserve * active, single)
        if count_retracted:
            budget -= sum(self._align(r.num_computed_tokens) + self.reserve for r in q.retracted)
        return budget

    def _rows_used(self, q) -> int:
        return len(q.transfer) + len(q.landed) + sum(1 for r in self.batch if r.num_output_tokens < r.output_len)

    def _resume_retracted(self, s, q) -> None:
        """resume_retracted_reqs: in order, while a row is free and the budget (no running
        request's room, the retracted queue not counted) holds its KV plus the reserve; its KV is
        restored from the host into fresh pages (fill: prompt + outputs - 1 = its computed tokens)."""
        if not q.retracted:
            return
        budget = self._budget(s, q, None, False, 0)
        resumed: list = []
        for r in list(q.retracted):
            if self._rows_used(q) + len(resumed) >= self.rows:
                break
            if self._align(r.num_computed_tokens) + self.reserve > budget:
                break
            ok = s.pool.grow(r, r.num_computed_tokens)
            assert ok, "a resumed request's KV was counted free"
            q.retracted.remove(r)
            resumed.append(r)
            budget = self._budget(s, q, None, False, len(resumed))
        q.landed.extend(resumed)

    def _pop_preallocated(self, s, q) -> list:
        """pop_preallocated: first in, first out, stopping at the first request without a metadata
        slot, a row, or KV budget for max(its prompt's pages + the reserve, prompt + max_new less
        every running request's tokens)."""
        retractable = sum(r.prompt_len + r.num_output_tokens for r in self.batch)
        budget = self._budget(s, q, retractable, True, 0)
        new: list = []
        while s.waiting:
            req = s.waiting[0]
            if len(q.transfer) + len(new) >= self.meta or self._rows_used(q) + len(new) >= self.rows:
                break
            alloc = self._align(req.prompt_len)
            need = max(alloc + self.reserve, req.prompt_len + min(req.output_len, CLIP_MAX_NEW_TOKEN) - retractable)
            if need > budget:
                break
            ok = s.pool.grow(req, req.prompt_len)
            assert ok, "preallocation let through more KV than is free"
            s.waiting.popleft()
            req.kv_loading = True
            new.append(req)
            budget = self._budget(s, q, retractable, True, len(new))
        return new

    def _pop_transferred(self, q) -> None:
        """DecodeTransferQueue.pop_transferred: arrived KV, in queue order, to the waiting queue with
        the prefill's token as the first output (_commit_transfer_to_req)."""
        done = [r for r in q.transfer if r in q.recv_done]
        for r in done:
            q.transfer.remove(r)
            q.recv_done.discard(r)
            r.kv_loading = False
            r.num_computed_tokens = r.prompt_len
            r.num_output_tokens = max(r.num_output_tokens, 1)
        q.landed.extend(done)

    # --- Scheduler ---------------------------------------------------------------------------------
    def _prebuilt(self, s, q, plan: Plan) -> None:
        """_get_new_prebuilt_batch and process_batch_result_prebuilt: the head of the waiting queue,
        up to max_running_requests less the running batch, joins it; one that wanted a single
        token finishes with the prefill's (its KV goes now)."""
        room = self.cfg.max_running_requests - len(self.batch)  # min(req_to_token_pool.size, max_running)
        if not q.landed or room <= 0:
            return
        take, q.landed = q.landed[:room], q.landed[room:]
        plan.landed = take
        keep = [r for r in self.batch if r.num_output_tokens < r.output_len]
        for r in take:
            if r.num_output_tokens >= r.output_len:
                s.pool.release(r)
                plan.released += 1
            else:
                s.admit(r)
                keep.append(r)
        self.batch = keep

    def _decode(self, s, q, plan: Plan) -> None:
        """update_running_batch: filter the finished out; retract when the next decode's new pages
        are not free (check_decode_mem), else every request decodes one token."""
        batch = [r for r in self.batch if r.num_output_tokens < r.output_len]
        plan.released += len(self.batch) - len(batch)  # the loop's next iteration budgets without them
        if not batch:
            self.batch = batch
            return
        if not self._fits(s, batch):
            batch = self._retract(s, q, batch, plan)
        self.batch = batch
        for r in batch:
            ok = s.pool.grow(r, r.num_computed_tokens + 1)
            assert ok, "a decode's page was counted free"
            plan.items.append((r, 1))

    def _fits(self, s, batch) -> bool:
        """check_decode_mem: a page for each request whose committed tokens fill whole pages."""
        page = self.cfg.page_size
        need = sum(1 for r in batch if r.num_computed_tokens % page == 0) * page
        return s.pool.free * s.pool.block_size >= need

    def _retract(self, s, q, batch, plan: Plan) -> list:
        """ScheduleBatch.retract_decode: most outputs, then shortest prompt, kept first; pop from the
        end until the rest fit, keeping one; the rest run in that order (filter_batch(keep_indices)).
        Each victim's KV is backed up (release_req, offload_kv) and it joins the retracted queue."""
        order = retraction_order(batch)
        for victim in victims(order, lambda rest: self._fits(s, rest)):
            s.pool.release(victim)
            s.running.remove(victim)
            victim.num_preemptions += 1
            q.retracted.append(victim)
            plan.preempted.append(victim)
        assert self._fits(s, order), "even one request cannot decode (SGLang aborts it: not modelled)"
        s.running[:] = order
        return order

    def reject_reason(self, req, pool) -> str | None:
        """_check_if_req_exceed_kv_capacity aborts a prompt longer than the pool. One whose admission
        need exceeds the whole pool is never preallocated: SGLang's queue would wait behind it
        forever; chunksim refuses it instead."""
        tokens = pool.total * pool.block_size
        if req.prompt_len > tokens:
            return f"prompt_len={req.prompt_len} exceeds the decode pool ({tokens} tokens)"
        need = max(self._align(req.prompt_len) + self.reserve, req.prompt_len + min(req.output_len, CLIP_MAX_NEW_TOKEN))
        if need > tokens:
            return f"needs {need} KV tokens to be preallocated (num_reserved_decode_tokens included), the pool has {tokens}"
        return None

    def check(self, plan, s) -> None:
        assert all(n == 1 for _, n in plan.items), "a decode server runs decodes only"
        assert not s.connector.finishing, "a finish was left unprocessed"
        assert len(plan.items) <= self.cfg.max_running_requests
