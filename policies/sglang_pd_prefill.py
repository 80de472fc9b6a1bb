"""SGLang 0.5.23's prefill side under PD disaggregation (``--disaggregation-mode prefill``).

One iteration of ``Scheduler.event_loop_normal_disagg_prefill`` / ``event_loop_overlap_disagg_prefill``
(sglang/srt/disaggregation/prefill.py), with SGLang's defaults (``optimistic_prefill_attempts`` 0,
``disaggregation_decode_allocation_policy`` early):

* ``PrefillBootstrapQueue.pop_bootstrapped``: an arrival waits in the bootstrap queue until its decode
  server has preallocated its KV (the sender polls ``WaitingForInput``); then, in queue order and while
  one of the ``2 × max_running_requests`` metadata buffers is free, it joins the waiting queue.
* ``get_next_disagg_prefill_batch_to_run``: SGLang's own prefill batch (PrefillAdder, the radix cache,
  chunking) over an always-empty running batch, the request asking for one token
  (``_process_req``: max_new_tokens = 1); a req_to_token row is held by every request whose prefill
  is done until its transfer is (``get_num_allocatable_reqs``).
* KV is pushed as it is computed: a non-last chunk's whole pages when the next batch is formed
  (``process_prefill_chunk`` → ``send_kv_chunk``), the rest when the prefill completes
  (``process_batch_result_disagg_prefill``: the prompt is checkpointed into the tree, the request
  joins ``disagg_prefill_inflight_queue``). These sends are the plan's ``loads``, (request, first
  token, end) ranges, which the simulation puts on the link (simcore/disagg_sglang.py).
* ``process_disagg_prefill_inflight_queue``: when the decode side has it all (``KVPoll.Success``) the
  request's KV goes into the tree (release_kv_cache), its row and metadata buffer free. Under the
  overlap loop that poll comes after the next batch is launched (``connector.lag``).
The prefill token is not streamed to the client: the decode server's first output is that token.
Only the reference loop runs it (``needs_stepping``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.errors import require

from .base import Plan, SchedulerState
from .sglang import SGLangScheduler
from .sglang_config import SGLangConfig, SGLangDisagg
from .sglang_radix import checkpoint


@dataclass
class PrefillQueues:
    """The prefill server's connector state: ``bootstrap`` PrefillBootstrapQueue.queue, ``ready`` the
    requests whose decode side has preallocated, ``sending`` disagg_prefill_inflight_queue (KV held),
    ``sent_to`` the prompt position each request's sends have reached."""

    bootstrap: list = field(default_factory=list)
    ready: set = field(default_factory=set)
    sending: list = field(default_factory=list)
    sent_to: dict = field(default_factory=dict)
    popped: set = field(default_factory=set)  # ids of the requests holding a metadata buffer
    lag: bool = False  # overlap loop: transfer completions are processed after the next batch is launched
    pending: list = field(default_factory=list)
    in_flight: set = field(default_factory=set)
    recv_done: set = field(default_factory=set)  # decode side only
    finishing: list = field(default_factory=list)
    defers_finish: bool = False

    @property
    def holding(self) -> list:
        """Outstanding requests outside the scheduler's queues: the bootstrap queue."""
        return self.bootstrap

    def held_blocks(self) -> int:
        return sum(r.num_blocks for r in self.sending)


class SGLangPDPrefill(SGLangScheduler):
    """SGLang's prefill server: the bootstrap queue, then SGLang's prefill batches, then the inflight queue."""

    def __init__(self, cfg: SGLangConfig, pd: SGLangDisagg):
        require(not cfg.enable_hierarchical_cache, "enable_hierarchical_cache", True, "not modelled under PD prefill")
        super().__init__(cfg)
        self.pd = pd
        self.meta = 2 * cfg.max_running_requests  # ReqToMetadataIdxAllocator(max_running_requests * 2)
        self._checkpointed: set = set()  # rids in ``sending`` whose prompt is in the tree (settle_idle)

    @property
    def needs_stepping(self) -> bool:
        return True

    @property
    def needs_decode_pool(self) -> bool:
        """Its requests wait in the bootstrap queue until a decode server preallocates them."""
        return True

    def new_connector(self) -> PrefillQueues:
        return PrefillQueues(lag=self.overlapped)

    def schedule(self, s: SchedulerState) -> Plan:
        q = s.connector
        self._pop_bootstrapped(s, q)
        sends = self._chunk_sends(q)
        plan = super().schedule(s)
        if sends:
            plan.loads = sends
        return plan

    def _pop_bootstrapped(self, s, q: PrefillQueues) -> None:
        """New arrivals (the replica put them at the end of s.waiting) go to the bootstrap queue; the
        bootstrapped ones leave it in order while a metadata buffer is free (ensure_metadata_buffer:
        held by a popped request until its transfer is through)."""
        new = []
        while s.waiting and id(s.waiting[-1]) not in q.popped:
            new.append(s.waiting.pop())
        q.bootstrap.extend(reversed(new))
        if not q.ready:
            return
        held = len(q.popped)
        keep = []
        for r in q.bootstrap:
            if r in q.ready and held < self.meta:
                q.ready.discard(r)
                q.popped.add(id(r))
                s.waiting.append(r)
                held += 1
            else:
                keep.append(r)
        q.bootstrap = keep

    def _chunk_sends(self, q: PrefillQueues) -> list:
        """process_prefill_chunk: the chunked request's computed whole pages not yet sent."""
        r = self.chunked_req
        if r is None or r.num_computed_tokens >= r.prompt_len:
            return []
        end = r.num_computed_tokens - r.num_computed_tokens % self.cfg.page_size
        start = q.sent_to.get(r, 0)
        if end <= start:
            return []
        q.sent_to[r] = end
        return [(r, start, end)]

    def final_send(self, q: PrefillQueues, r) -> tuple:
        """send_kv_chunk(last_chunk=True): the rest of the prompt."""
        start = q.sent_to.pop(r, 0)
        return (r, start, r.prompt_len)

    def _schedule(self, s: SchedulerState, finishing: list) -> Plan:
        """The running batch stays empty: requests finishing in flight are not in it."""
        return super()._schedule(s, [])

    def _rows_held(self, s: SchedulerState) -> int:
        """req_to_token rows of requests whose prefill is done and whose KV is still being sent."""
        return len(s.connector.sending) + len(s.finished)

    def _release_finished_kv(self, s, r, end: int | None) -> None:
        """checkpoint_disagg_prefill: the prompt into the tree, locked until the transfer is through."""
        if end is not None:
            checkpoint(s.pool, r, end)
        self._checkpointed.add(r.rid)
        s.connector.sending.append(r)

    def settle_idle(self, s: SchedulerState) -> None:
        """The replica went idle right after a step whose completed prefills it held
        (SchedulerState.release_finished put them in ``sending`` without a schedule()): their prompts
        go into the tree now, in batch order, as process_batch_result_disagg_prefill checkpoints them
        at that step's end (simcore/connector_events.py, ``on_idle``)."""
        q = s.connector
        if s.pool.cache is not None:
            for r in q.sending:
                if r.rid not in self._checkpointed:
                    checkpoint(s.pool, r, r.prompt_len)
        self._checkpointed = {r.rid for r in q.sending}

    def check(self, plan, s) -> None:
        assert all(r.output_len == 1 for r, _ in plan.items), "a prefill server's requests ask for one token"
        super().check(plan, s)
