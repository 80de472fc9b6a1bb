"""Prefill/decode disaggregation as vLLM 0.33.0's Scheduler runs it with a NIXL KV connector.

vLLM's side (vllm/v1/core/sched/scheduler.py; the connector: vllm/distributed/kv_transfer/
kv_connector/v1/nixl/pull_scheduler.py, ``NixlConnector`` being ``NixlPullConnector``):

* Decode side (a request with ``do_remote_prefill``): on its first admission, the connector's
  ``get_num_new_matched_tokens`` reports every prompt token as external, loaded asynchronously.
  ``allocate_slots`` takes blocks for them (no new tokens) under ``full_sequence_must_fit`` and
  ``reserved_blocks`` = Σ ``_request_remaining_blocks`` over ``_inflight_prefills`` (requests
  loading or admitted with prompt left); the request parks in ``WAITING_FOR_REMOTE_KVS`` in
  ``kv_holding_waiting`` (drained before ``waiting``), outside ``running``, and
  ``update_state_after_alloc`` clears ``do_remote_prefill`` (one transfer per request: a later
  preemption recomputes locally). Until the worker reports ``finished_recving``
  (``_update_from_kv_xfer_finished``) each schedule() skips it (``skip_request``: skipped
  requests keep their order at the queue's front). Then ``_update_waiting_for_remote_kv``:
  computed = the prompt, and when that is every token, one less (the last prompt token is
  recomputed so that the first output can be sampled).
* Prefill side (``do_remote_decode``, max_tokens 1 as the proxy sends it): a plain request; when it
  finishes, ``request_finished`` returns delay_free, so its blocks stay held until the worker
  reports ``finished_sending`` (the decode side has read them).

``kv_role`` (kv_producer / kv_consumer / kv_both) does not change the sync scheduler's steps:
what a request does is carried by its kv_transfer_params. With async scheduling (AsyncScheduler,
vLLM's default) two things change. The worker's finished_recving / finished_sending come with a
step's output, which is processed after the next schedule() (``lag``): a completion is seen one
schedule later, at once when no step is in flight. And a consumer role (kv_consumer, kv_both)
sets ``defer_block_free``: a preemption victim scheduled in the step still in flight
(``last_sched_seq > processed_step_seq``, ``in_flight`` here) cannot free its blocks, so the
running loop stops instead of preempting it. Async with kv_producer (``requires_kv_delivery``
without deferred frees: dropped in-flight outputs) and prefix caching with a connector are not
modelled: refused.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from costmodel.errors import json_object, require

MODELLED = ("NixlConnector", "NixlPullConnector")  # NixlConnector is NixlPullConnector's alias in 0.33
ROLES = ("kv_producer", "kv_consumer", "kv_both")
PASSIVE_KEYS = frozenset(
    {"kv_connector", "kv_role", "kv_buffer_device", "kv_connector_extra_config", "engine_id", "kv_ip", "kv_port"}
)


@dataclass(frozen=True)
class KVTransfer:
    """The modelled part of vLLM's ``--kv-transfer-config``."""

    connector: str
    role: str


def parse_kv_transfer_config(text: str) -> KVTransfer | None:
    """vLLM's ``--kv-transfer-config`` JSON as a KVTransfer (None when empty); InputError for a
    connector or field that is not modelled."""
    where = "--kv-transfer-config"
    d = json_object(where, text)
    if d is None:
        return None
    name = d.get("kv_connector")
    why = "vLLM 0.33 has no such connector" if name == "P2pNcclConnector" else "not modelled"
    require(name in MODELLED, f"{where} kv_connector", name, f"{why} (modelled: {', '.join(MODELLED)})")
    role = d.get("kv_role")
    require(role in ROLES, f"{where} kv_role", role, f"must be one of {', '.join(ROLES)}")
    unknown = sorted(set(d) - PASSIVE_KEYS)
    require(not unknown, where, unknown, "fields chunksim does not model (it refuses rather than drop them)")
    return KVTransfer(str(name), str(role))


@dataclass
class ConnectorState:
    """What the scheduler keeps for its connector: ``holding`` is kv_holding_waiting (loading or
    loaded, holding blocks), ``recv_done`` finished_recving_kv_req_ids, ``sending`` finished
    prefill-side requests whose blocks wait for finished_sending, ``inflight`` _inflight_prefills
    (a dict: ordered), ``loads`` the requests whose load the last schedule() started."""

    holding: deque = field(default_factory=deque)
    recv_done: set = field(default_factory=set)
    sending: list = field(default_factory=list)
    inflight: dict = field(default_factory=dict)
    loads: list = field(default_factory=list)
    lag: bool = False  # async scheduling: completions are seen one schedule() later (see the module doc)
    in_flight: set = field(default_factory=set)  # async, consumer role: requests of the step in flight
    pending: list = field(default_factory=list)  # async: completions reported, not processed yet

    def held_blocks(self) -> int:
        return sum(r.num_blocks for r in self.holding) + sum(r.num_blocks for r in self.sending)


def reserved_blocks(c: ConnectorState, bs: int) -> int:
    """_inflight_prefill_reserved_blocks: blocks in-flight prefills still need for their whole
    sequence (_request_remaining_blocks, full attention, no drafts)."""
    return sum(max(-(-r.num_tokens // bs) - r.num_blocks, 0) for r in c.inflight)


def schedule_waiting(pol, s, scheduled: dict, token_budget: int) -> int:
    """The WAITING half of Scheduler.schedule with a connector (no preemption this step);
    returns the budget left. `scheduled`: request -> tokens, appended in batch order."""
    cfg, c, pool = pol.cfg, s.connector, s.pool
    bs, thr = pool.block_size, pol._thr
    skip_hold: list = []
    skip_wait: list = []  # stays empty: a request without blocks is never skipped here
    c.loads = []
    num_running = s.num_running + len(s.finished)  # async: finished requests held this schedule() count
    while token_budget > 0:
        queue = c.holding if c.holding else s.waiting
        if not queue or num_running >= cfg.max_num_seqs:
            break
        req = queue[0]
        if req.kv_loading:  # _handle_blocked_waiting_request
            if req not in c.recv_done:
                skip_hold.append(queue.popleft())
                continue
            c.recv_done.discard(req)  # _update_waiting_for_remote_kv
            req.kv_loading = False
            if req.num_computed_tokens == req.num_tokens:
                req.num_computed_tokens -= 1
        load = False
        if req.num_computed_tokens == 0:
            computed = req.prompt_len if req.remote_prefill else 0  # get_num_new_matched_tokens
            load = computed > 0
        else:
            computed = req.num_computed_tokens
        if load:
            new = 0
        else:
            new = req.num_tokens - computed
            if 0 < thr < new:
                new = thr
            if not cfg.enable_chunked_prefill and new > token_budget:
                break
            new = min(new, token_budget)
        # allocate_slots: full_sequence_must_fit, then the slots past `reserved` (loads only)
        free = pool.total - pool.used
        if cfg.scheduler_reserve_full_isl and -(-req.num_tokens // bs) - req.num_blocks > free:
            break
        need = -(-(computed + new) // bs) - req.num_blocks
        if need > free - (reserved_blocks(c, bs) if load else 0):
            break
        pool.used += max(need, 0)
        req.num_blocks += max(need, 0)
        req.remote_prefill = False  # update_state_after_alloc: only one transfer per request
        req.num_computed_tokens = computed
        if load:  # WAITING_FOR_REMOTE_KVS
            req.kv_loading = True
            c.inflight[req] = True
            c.loads.append(req)
            skip_hold.append(queue.popleft())
            continue
        queue.popleft()
        s.admit(req)
        num_running += 1
        scheduled[req] = new
        token_budget -= new
        if computed + new < req.num_tokens:
            c.inflight[req] = True
    c.holding.extendleft(reversed(skip_hold))
    s.waiting.extendleft(reversed(skip_wait))
    return token_budget


def after_schedule(c: ConnectorState, items, preempted) -> None:
    """_update_after_schedule and _preempt_request: requests that are no longer prefill chunks,
    or were preempted, leave _inflight_prefills."""
    for r, n in items:
        if r.num_computed_tokens + n >= r.num_tokens:
            c.inflight.pop(r, None)
    for r in preempted:
        c.inflight.pop(r, None)
