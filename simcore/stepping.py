"""The reference engine: plain stepping, one SimPy event per step, on one screen.

Follow a request: ``arrivals`` creates it at its send time (closed loop: when a slot frees),
the router picks a replica, ``admission.reject_reason`` may refuse it, else ``submit`` puts it in
the replica's inbox. The replica's loop (``SteppingReplica.run``) moves the inbox to the waiting
queue, asks the policy for the next batch (``plan = policy.schedule(state)``), prices the
batch's shape with the cost model's plain ``step_time``, waits for the step's end, and applies
the plan request by request (``apply``): a request whose computed tokens reach its known tokens
samples a token at the step's end; one that reaches its output length finishes.

ORDERING (decided once): an arrival stamped t joins the batch planned at t. Arrivals run at
priority LATE, after every step that ends at t (simcore/clock.py); before each plan the replica
waits at t behind them (``env.at(now, LATE)``), so every request stamped t is in its inbox.
Held finished requests (vLLM async scheduling, ``SchedulerState.retire``) leave at the next
schedule(), or when the replica goes idle: in open loop only after the arrivals stamped that
instant (they find them held, as vLLM's next schedule() does); in closed loop at once (the client
sends the next request after the finish is processed). With vLLM async scheduling and drafts
(``plan.sampling``), a step's output is processed after the next schedule() (``settle``), as
vLLM's batch queue does: the acceptance of step n is unknown when step n+1 is planned.

This is the oracle the fast paths are tested against: no decode cohort, no runs of several
steps, no folding, no deferred finish, and no SimPy internals. It imports no fast-forward module
(tests/test_import_contract.py).
"""

from __future__ import annotations

from typing import Any

from .admission import new_request, reject_reason
from .clock import LATE
from .histogram import LogHistogram
from .invariants import check_replica


class SteppingReplica:
    """One engine instance: its scheduler state, policy and cost model; one event per step."""

    def __init__(
        self,
        env,
        index: int,
        policy,
        state,
        cm,
        on_finish,
        check: bool = False,
        log_iterations: bool = False,
        driven: bool = False,
    ):
        """driven: a data-parallel group (simcore/data_parallel.py) steps this replica; it runs no
        process of its own and a submit wakes the group."""
        self.env, self.index, self.policy, self.state = env, index, policy, state
        self.cm = cm.with_host_overlap(getattr(policy, "overlaps_host", False))  # host/GPU overlap: costmodel/host.py
        if hasattr(policy, "step_cost"):
            self.cm = policy.step_cost(self.cm)  # speculative decoding: + the drafter (costmodel/speculative.py)
        self.drafts = getattr(policy, "num_spec_tokens", 0)  # drafts proposed after each sampling step
        self.lagged: tuple | None = None  # async + drafts: (plan, end) whose output awaits the next schedule()
        self.on_finish, self.checking = on_finish, check
        self.open_loop = True  # closed loop: a finish frees its slot first, so the next request finds it gone
        self.itl = LogHistogram()
        self.inbox: list = []
        self.num_iterations = 0
        self.iteration_log: list | None = [] if log_iterations else None
        self._outstanding = 0  # submitted and not yet finished
        self._wake = None
        self._idle = False  # waiting for work since the last schedule(): no step in flight
        state.hold_finished = getattr(policy, "holds_finished", False)
        state.connector = policy.new_connector() if hasattr(policy, "new_connector") else None
        self.transfers: Any = None  # PD: starts KV loads, hears of prefill-side finishes (simcore/disagg.py)
        self.group = None
        if not driven:
            self.process = env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Requests here not finished by now: in the inbox, waiting or running."""
        return self._outstanding

    def kv_usage(self) -> float:
        """Blocks in use over the pool, cached blocks nobody references counted as free, as the
        engines report it to KV-aware routers: vLLM's BlockPool.get_usage (1 − free/total, its
        free queue holding them), SGLang's token usage (its allocator's available size plus the
        radix tree's evictable size)."""
        pool = self.state.pool
        return (pool.total - pool.available) / pool.total

    def waiting_count(self) -> int:
        """Requests not yet scheduled (the scheduler's waiting queue, arrivals not yet moved in)."""
        return len(self.state.waiting) + len(self.inbox)

    def running_count(self) -> int:
        return len(self.state.running)

    def submit(self, req) -> None:
        req.replica = self.index
        self.inbox.append(req)
        self._outstanding += 1
        if self.group is not None:
            self.group.wake()
        elif self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def kv_received(self, req) -> None:
        """PD decode side: the worker reported finished_recving for `req`; its next schedule() sees it
        (async: the one after, unless no step is in flight: policies/vllm_pd.py, ``lag``)."""
        self._kv_event(self.state.connector.recv_done.add, req)

    def kv_sent(self, req) -> None:
        """PD prefill side: finished_sending, the decode side has read `req`'s blocks: they go."""
        self._kv_event(self._release_sent, req)

    def _release_sent(self, req) -> None:
        self.state.connector.sending.remove(req)
        self.state.pool.release(req)

    def _kv_event(self, apply, req) -> None:
        c = self.state.connector
        if c.lag and not self._idle:  # a step in flight: its output comes after the next schedule()
            c.pending.append((apply, req))
            return
        apply(req)
        self._notify()

    def _kv_settle(self, plan) -> bool:
        """Async PD, after a schedule(): the completions reported meanwhile are processed (they come
        with the output of the step in flight); the plan's requests are now in flight. True when
        some were processed, or when a step was in flight and this plan runs none (that step's
        output is processed next: its requests may be preempted then)."""
        c = self.state.connector
        if c is None or not c.lag:
            return False
        was = bool(c.in_flight)
        c.in_flight = {r for r, _ in plan.items}
        done, c.pending = c.pending, []
        for apply, req in done:
            apply(req)
        return bool(done) or (was and not plan.items)

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def run(self):
        env, s = self.env, self.state
        while True:
            if not self._outstanding:  # idle: held finished requests leave; wait for a request
                if s.finished and self.open_loop:  # an arrival stamped now still finds them held
                    yield env.at(env.now, LATE)
                if not self._outstanding:
                    s.release_finished()
                    yield from self._wait_for_work()
            yield env.at(env.now, LATE)  # behind every arrival stamped now (ORDERING)
            s.waiting.extend(self.inbox)
            self.inbox.clear()
            self._idle = False
            plan = self.policy.schedule(s)
            if plan.loads:  # PD: loads started by this schedule() (policies/vllm_pd.py)
                self.transfers.loads_started(self, plan.loads, env.now)
            settled = s.connector is not None and self._kv_settle(plan)
            if s.looked_up:
                s.settle_lookups()
            if self.checking:
                check_replica(self, plan)
            if self.lagged is not None:  # step n's output, after schedule(n+1) (vLLM's batch queue)
                self.settle(plan)
                if not plan.items:
                    continue
            if not plan.items:
                if not plan.preempted and not plan.released and not settled:  # nothing can run until a request arrives
                    yield from self._wait_for_work()
                continue
            start = env.now
            end = start + self.cm.step_time([q for _, q in plan.items], [r.num_computed_tokens for r, _ in plan.items])
            yield env.at(end)
            self.apply(plan, start, end)

    def _wait_for_work(self):
        c = self.state.connector
        if c is not None and c.lag:  # no step in flight now: what was reported is processed
            c.in_flight = set()
            done, c.pending = c.pending, []
            for apply, req in done:
                apply(req)
        self._idle = True
        self._wake = self.env.event()
        yield self._wake

    def apply(self, plan, start: float, end: float) -> None:
        """[0, computed) cached | [computed, computed + n) this step: a request caught up with its
        known tokens samples one at `end`; its gap since the last one is an inter-token latency.

        Speculative decoding (``plan.spec``: request -> drafts verified): the request samples 1 + a
        tokens, a = ``policy.accept`` of its drafts; num_computed_tokens rolls back by the rejected
        drafts and, at output_len, by the tokens past it (vLLM's update_from_output). The 1 + a
        tokens share the step's end as their time: a client streaming the output receives them in
        one chunk, so the step adds one inter-token gap (vllm bench serve's ITL is per chunk),
        while TPOT ((e2e − TTFT) / (outputs − 1)) counts every token. A request that sampled and
        goes on gets the drafter's ``num_spec_tokens`` drafts for its next step."""
        self.num_iterations += 1
        if self.iteration_log is not None:
            self.iteration_log.append((self.index, start, end, 1, plan))
        gaps, finished, spec = [], [], plan.spec
        if plan.sampling is not None:  # async + drafts: the output is processed after the next schedule()
            for req, n in plan.items:
                if req.finish_s is not None:  # finished by the previous step's output, after this one was planned
                    continue
                if req.first_scheduled_s is None:
                    req.first_scheduled_s = start
                req.num_computed_tokens += n
            self.lagged = (plan, end)
            return
        for req, n in plan.items:
            if req.first_scheduled_s is None:
                req.first_scheduled_s = start
            req.num_computed_tokens += n
            if req.num_computed_tokens < req.num_tokens:  # a prefill chunk that is not the prompt's last
                continue
            emitted = 1
            if spec is not None:
                drafts = spec.get(req, 0)
                if drafts:
                    accepted = self.policy.accept(req, drafts)
                    req.num_computed_tokens -= abs(drafts) - accepted
                    emitted += accepted
                left = req.output_len - req.num_output_tokens
                if emitted > left:  # stopped at max_tokens: the tokens past it are trimmed
                    req.num_computed_tokens -= emitted - left
                    emitted = left
            if req.first_token_s is None:
                req.first_token_s = end
            else:
                gap = end - req.last_token_s
                gaps.append(gap)
                req.max_itl_s = max(req.max_itl_s, gap)
            req.num_output_tokens += emitted
            req.last_token_s = end
            if req.num_output_tokens >= req.output_len:
                finished.append(req)
            elif spec is not None:
                req.spec_tokens = self.drafts
        if gaps:
            self.itl.add_many(gaps)
        for req in finished:  # in the step's batch order
            req.finish_s = end
            if req.remote_decode:  # PD prefill side: request_finished delays the free until finished_sending
                self.transfers.prefill_finished(self, req, end)
                if self.state.hold_finished:  # async: held through the next schedule(), then sending
                    self.state.retire(req)
                else:
                    self.state.connector.sending.append(req)
            else:
                self.state.retire(req)
            self.state.running.remove(req)
            self._outstanding -= 1
            self.policy.on_finish()
            self.on_finish(req)

    def settle(self, now_plan) -> None:
        """Async scheduling + drafts: update_from_output of the lagged step, after schedule(n+1).
        Rejected drafts roll back num_computed_tokens and the placeholders; every returned token
        resolves a placeholder. A request preempted by schedule(n+1) takes its tokens stale (no
        counter moves); a finished one frees its blocks now; one already finished is skipped."""
        assert self.lagged is not None
        plan, end = self.lagged
        self.lagged = None
        stale, gaps, s = set(now_plan.preempted), [], self.state
        for req in plan.sampling:
            if req.finish_s is not None:
                continue
            drafts = plan.spec.get(req, 0)
            accepted = self.policy.accept(req, drafts) if drafts else 0
            emitted, fresh = 1 + accepted, req not in stale
            if fresh:
                req.num_computed_tokens -= abs(drafts) - accepted
                req.spec_placeholders -= abs(drafts) - accepted + emitted
            left = req.output_len - req.num_output_tokens
            if emitted > left:  # stopped at max_tokens: the tokens past it are trimmed
                req.num_computed_tokens -= (emitted - left) if fresh else 0
                emitted = left
            if req.first_token_s is None:
                req.first_token_s = end
            else:
                gaps.append(end - req.last_token_s)
                req.max_itl_s = max(req.max_itl_s, gaps[-1])
            req.num_output_tokens += emitted
            req.last_token_s = end
            if req.num_output_tokens < req.output_len:
                continue
            req.finish_s = end
            if fresh:
                s.running.remove(req)
                s.retire(req, last_step=False)
            else:
                s.waiting.remove(req)
            self._outstanding -= 1
            self.policy.on_finish()
            self.on_finish(req)
        if gaps:
            self.itl.add_many(gaps)

    def finish_run(self, until: float | None) -> None:
        """Nothing to settle: every step that ended before the stop was applied when it ended."""


def arrivals(sim):
    """Each request is created and routed at its send time (open loop), or when a finish frees a
    slot (closed loop, then stamped with that time); `sim` is the Simulation (its workload,
    router, replicas and in-flight count)."""
    env, wl = sim.env, sim.workload
    arrival_s = wl.arrival_s.tolist()
    for i in range(len(wl)):
        sim._next = i
        if arrival_s[i] > env.now:
            yield env.at(arrival_s[i], LATE)
        while sim.concurrency and sim.in_flight >= sim.concurrency:
            sim._slot = env.event()
            yield sim._slot
        req = new_request(wl, i, env.now if sim.concurrency else arrival_s[i])
        sim.requests.append(req)
        replica = sim.replicas[sim.router(req, sim.replicas) if sim.router else 0]
        req.rejected = reject_reason(req, replica, sim.max_model_len)
        if req.rejected is None:
            sim.in_flight += 1
            replica.submit(req)
    sim._next = len(wl)
