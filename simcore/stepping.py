"""The reference engine: plain stepping, one SimPy event per step, on one screen.

Follow a request: ``arrivals`` creates it at its send time (closed loop: when a slot frees), the router picks a
replica, ``admission.reject_reason`` may refuse it, else ``submit`` puts it in the replica's inbox. The replica's
loop (``SteppingReplica.run``) moves the inbox to the waiting queue, asks the policy for the next batch
(``plan = policy.schedule(state)``), prices the batch's shape with the cost model's plain ``step_time``, waits for
the step's end and applies the plan request by request (``apply``): a request whose computed tokens reach its known
tokens samples a token at the step's end; one that reaches its output length finishes.

ORDERING (decided once): an arrival stamped t joins the batch planned at t. Arrivals run at priority LATE, after
every step that ends at t (simcore/clock.py); before each plan the replica waits at t behind them
(``env.at(now, LATE)``). Held finished requests (vLLM async scheduling, ``SchedulerState.retire``) leave at the
next schedule(), or when the replica goes idle: in open loop after the arrivals stamped that instant (they find
them held, as vLLM's next schedule() does), in closed loop at once (the client sends its next request after it).

Speculative steps live in simcore/spec_steps.py, a PD connector's completions (and SGLang's PD decode server's
landings and late finishes) in simcore/connector_events.py. This is the oracle the fast paths are tested against: no
cohort, no multi-step runs, no folding, no fast path's deferred finish, no SimPy internals, no fast-forward import.
"""

from __future__ import annotations

from typing import Any

from . import spec_steps
from .admission import new_request, reject_reason
from .clock import LATE
from .connector_events import ConnectorEvents
from .histogram import LogHistogram
from .invariants import check_replica


class SteppingReplica:
    """One engine instance: its scheduler state, policy and cost model; one event per step."""

    def __init__(self, env, index: int, policy, state, cm, on_finish, check=False, log_iterations=False, driven=False):
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
        self.idle = False  # waiting for work since the last schedule(): no step in flight
        state.hold_finished = getattr(policy, "holds_finished", False)
        state.connector = policy.new_connector() if hasattr(policy, "new_connector") else None
        self.kv: Any = ConnectorEvents(self) if state.connector is not None else None  # PD completions
        self.transfers: Any = None  # PD: starts KV loads, hears of prefill-side finishes (simcore/disagg.py)
        self.group = None
        if not driven:
            self.process = env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Requests here not finished by now: in the inbox, waiting or running."""
        return self._outstanding

    def kv_usage(self) -> float:
        """Blocks in use over the pool, unreferenced cached blocks counted free, as the engines report
        it to KV-aware routers (vLLM's BlockPool.get_usage; SGLang's available + evictable size)."""
        pool = self.state.pool
        return (pool.total - pool.available) / pool.total

    def submit(self, req) -> None:
        req.replica = self.index
        self.inbox.append(req)
        self._outstanding += 1
        if self.group is not None:
            self.group.wake()
        else:
            self.notify()

    def notify(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def run(self):
        env, s = self.env, self.state
        while True:
            if not self._outstanding and not spec_steps.rides(self.policy, s):  # idle: finished leave; wait
                if s.finished and self.open_loop:  # an arrival stamped now still finds them held
                    yield env.at(env.now, LATE)
                if not self._outstanding:
                    s.release_finished()
                    yield from self._wait_for_work()
            yield env.at(env.now, LATE)  # behind every arrival stamped now (ORDERING)
            s.waiting.extend(self.inbox)
            self.inbox.clear()
            self.idle = False
            plan = self.policy.schedule(s)
            if plan.loads:  # PD: loads started by this schedule() (policies/vllm_pd.py)
                self.transfers.loads_started(self, plan.loads, env.now)
            settled = self.kv is not None and self.kv.after_schedule(plan)
            if s.looked_up:
                s.settle_lookups()
            if self.checking:
                check_replica(self, plan)
            if self.lagged is not None:  # step n's output, after schedule(n+1) (vLLM's batch queue)
                spec_steps.settle(self, plan)
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
        if self.kv is not None:
            self.kv.on_idle()
        self.idle = True
        self._wake = self.env.event()
        yield self._wake

    def apply(self, plan, start: float, end: float) -> None:
        """[0, computed) cached | [computed, computed + n) this step: a request caught up with its
        known tokens samples one at `end` (a verify step: 1 + its accepted drafts, which share the
        step's end as one streamed chunk, so one inter-token gap); its gap since the last one is an
        inter-token latency."""
        self.num_iterations += 1
        if self.iteration_log is not None:
            self.iteration_log.append((self.index, start, end, 1, plan))
        if plan.sampling is not None:  # async + drafts: the output is processed after the next schedule()
            return spec_steps.hold(self, plan, start, end)
        gaps, finished, spec = [], [], plan.spec
        for req, n in plan.items:
            if req.finish_s is not None:  # SGLang PD decode, overlap: a finished request's redundant decode
                continue
            if req.first_scheduled_s is None:
                req.first_scheduled_s = start
            req.num_computed_tokens += n
            if req.num_computed_tokens < req.num_tokens:  # a prefill chunk that is not the prompt's last
                continue
            emitted = 1 if spec is None else spec_steps.emitted(self.policy, req, spec.get(req, 0))
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
                req.spec_tokens = self.drafts  # the drafter proposes for the next step
        if gaps:
            self.itl.add_many(gaps)
        finished = self.kv.finishing_now(finished) if self.kv is not None else finished  # SGLang PD: may defer
        for req in finished:  # in the step's batch order
            req.finish_s = end
            if req.remote_decode:  # PD prefill side: its blocks stay until finished_sending
                self.kv.prefill_finished(req, end)
            else:
                self.state.retire(req)
            self.state.running.remove(req)
            self.finished(req)

    def finished(self, req) -> None:
        self._outstanding -= 1
        self.policy.on_finish()
        self.on_finish(req)

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
