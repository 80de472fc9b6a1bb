"""A run: requests arrive (open loop, or closed loop with a concurrency cap), replicas serve them.

Requests whose prompt plus output exceeds max_model_len, or which could never fit in the KV
pool, are rejected at arrival with the reason recorded, never dropped silently.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from costmodel.errors import require
from policies.base import SchedulerState
from workloads.workload import Workload

from .admission import new_request, reject_reason
from .clock import LATE, ExactEnvironment
from .data_parallel import LockstepGroup
from .fastforward.switches import FastForward, switches
from .histogram import LogHistogram
from .metrics import requests_frame, summarize
from .prefix_cache import PrefixCache
from .replica import Replica
from .request import Request
from .router import least_outstanding
from .stepping import SteppingReplica, arrivals


@dataclass
class Result:
    requests: pd.DataFrame
    summary: dict
    iterations: list | None = None
    replicas: list = field(default_factory=list)


class Simulation:
    def __init__(
        self,
        engines,
        workload,
        *,
        fast_forward: bool | FastForward = True,
        check: bool = False,
        max_model_len: int = 0,
        record_iterations: bool = False,
        router=None,
        lockstep=None,
    ):
        """engines: list of (policy, BlockPool, CostModel), one per replica. fast_forward: True (every
        fast path), False (the reference loop, simcore/stepping.py), or a FastForward of switches.
        lockstep: a group step's price (costmodel/data_parallel.py): the replicas are then vLLM's
        data-parallel ranks of one MoE engine, stepped together (simcore/data_parallel.py)."""
        require(len(engines) > 0, "replicas", len(engines), "must be at least 1")
        if lockstep is None:
            lockstep = getattr(router, "lockstep", None)  # vLLM's DP front end over MoE ranks (build_cluster)
        self.env = ExactEnvironment()
        self.workload, self.max_model_len, self.router = workload, max_model_len, router
        self.requests: list[Request] = []
        self.group: LockstepGroup | None = None
        self._next = 0
        self._arrival_s = workload.arrival_s.tolist() + [math.inf]
        self.concurrency = getattr(workload, "closed_loop_concurrency", None)
        self.in_flight = 0
        self._ran = False
        self._arriving = False
        self._slot = None
        self._wakes: list | None = None
        hashes = getattr(workload, "block_hashes", None)
        for pol, pool, _ in engines:
            require(
                not getattr(pol, "needs_prefill_pool", False),
                "--disaggregation-transfer-backend",
                getattr(getattr(pol, "pd", None), "disaggregation_transfer_backend", None),
                "an SGLang decode server needs its prefill servers: run the pair (--prefill-cmd / --decode-cmd, "
                "simcore/disagg_sglang.py), or the fake backend alone (policies/sglang_pd.py)",
            )
            require(
                not getattr(pol, "needs_decode_pool", False),
                "--disaggregation-mode",
                "prefill",
                "an SGLang prefill server needs its decode servers: run the pair (--prefill-cmd / --decode-cmd, "
                "or --policy sglang --prefill-replicas X --decode-replicas Y)",
            )
            if hashes is not None and getattr(pol, "prefix_caching", False) and pool.cache is None:
                tokens = int(getattr(workload, "block_tokens", pool.block_size))
                require(
                    tokens % pool.block_size == 0,
                    "workload:block_tokens",
                    tokens,
                    f"must be a multiple of the engine's KV block size ({pool.block_size}) for prefix caching",
                )
                pool.cache = getattr(pol, "new_prefix_cache", PrefixCache)(tokens, pool.block_size)
        ff = switches(fast_forward)
        self.forced_reference = False
        if (
            any(getattr(pol, "needs_stepping", False) or getattr(cm, "needs_stepping", False) for pol, _, cm in engines)
            or getattr(router, "needs_stepping", False)
            or lockstep is not None
        ):
            self.forced_reference = bool(ff)  # asked for fast paths, given the reference: callers say so
            ff = None  # what the fast paths do not know (speculative decoding, DP ranks, a decode skew): the reference loop
        if ff is None:  # the reference: simcore/stepping.py alone
            # SteppingReplica (the reference) or Replica (the fast paths): the two share no base class
            self.replicas: list[Any] = [
                SteppingReplica(
                    self.env,
                    i,
                    pol,
                    SchedulerState(pool),
                    cm,
                    self.finished,
                    check,
                    record_iterations,
                    lockstep is not None,
                )
                for i, (pol, pool, cm) in enumerate(engines)
            ]
            for r in self.replicas:
                r.open_loop = not self.concurrency
            self.group = LockstepGroup(self.env, self.replicas, lockstep) if lockstep is not None else None
            self.env.process(arrivals(self))
            return
        self.replicas = [
            Replica(
                self.env,
                i,
                pol,
                SchedulerState(pool),
                cm,
                self.next_arrival,
                self.finished,
                ff,
                check,
                record_iterations,
            )
            for i, (pol, pool, cm) in enumerate(engines)
        ]
        if router is least_outstanding and len(self.replicas) > 1:  # the same pick, the count read inline
            self.router = router = Replica.least_outstanding
        self._prompts, self._outputs = workload.prompt_len.tolist(), workload.output_len.tolist()
        self._hashes, self._n = hashes, len(workload)
        eos = getattr(workload, "ignore_eos", None)
        self._ignore_eos = eos
        reads_kv = getattr(router, "reads_kv_usage", False)
        for r in self.replicas:
            r.settle = bool(self.concurrency)
            r.fold = not self.concurrency and not reads_kv
            if reads_kv and len(self.replicas) > 1:
                r.policy.kv_observed = True
        if self.concurrency:
            self.env.process(self.arrivals())
        elif len(self.replicas) == 1:
            self.replicas[0].pull = self.arrive_until
        elif router is not None and hashes is None and eos is None:
            self._plain_arrivals()
        else:
            self._arrival_due(None)

    def next_arrival(self) -> float:
        return math.inf if self.concurrency else self._arrival_s[self._next]

    def finished(self, req: Request) -> None:
        self.in_flight -= 1
        if self._slot is not None and not self._slot.triggered:
            self._slot.succeed()

    def arrivals(self):
        """The arrival process: each request is created and routed at its send time, or when a
        finish frees its slot (the clock is then exactly that finish's planned time)."""
        env, arrival_s = self.env, self._arrival_s
        for i in range(len(self.workload)):
            self._next = i
            if arrival_s[i] > env.now:
                yield env.at(float(arrival_s[i]), LATE)
            while self.concurrency and self.in_flight >= self.concurrency:
                self._slot = env.event()
                yield self._slot
            self._arrive(i, env.now)
        self._next = len(self.workload)

    def _arrival_due(self, timeout) -> None:
        """Open loop in front of several replicas: the request this timeout was set for arrives, then
        every other one stamped by now, and a timeout set for the next calls this again (a callback,
        not a process: no generator to resume per arrival; the same order as ``arrivals``)."""
        env = self.env
        if timeout is not None:
            self._arrive(self._next, float(self._arrival_s[self._next]))
            self._next += 1
        if self._arrival_s[self._next] <= env.now:  # arrive_until's own test, before calling it
            self.arrive_until(env.now)
        if self._next < self._n:
            env.at(float(self._arrival_s[self._next]), LATE).callbacks.append(self._arrival_due)

    def _plain_arrivals(self) -> None:
        """``_arrival_due`` for the plain stream in front of several replicas (no block hashes, no
        ignore_eos), the same arrivals in the same order: one event object carries every arrival in
        turn (pushed again once its callback has run, with the next event id, as a new timeout
        would be), and ``_arrive`` is inlined with the size checks of ``_reject_reason`` read once
        per replica (a request no longer than ``fits`` passes them; a longer one is asked).
        Unless the run stops at a time (``run``), an idle replica that a request is routed to is
        woken at the end of the callback, in routing order, without an event: its wake-up event
        would be the next popped (at now, before every LATE event and after every NORMAL one
        already due), so that is when SimPy would have run it."""
        env, arrival_s, n = self.env, self._arrival_s, self._n
        if arrival_s[0] <= env.now:
            self.arrive_until(env.now)
        if self._next >= n:
            return
        replicas, router, requests, prompts, outputs = (
            self.replicas,
            self.router,
            self.requests,
            self._prompts,
            self._outputs,
        )
        reject, wakes, requeue = self._reject_reason, [], env.requeue  # type: ignore[var-annotated]
        fits = [
            -1 if r.rejects else min(self.max_model_len or math.inf, r.state.pool.total * r.state.pool.block_size)
            for r in replicas
        ]
        event = env.at(float(arrival_s[self._next]), LATE)

        def due(_event) -> None:
            i = self._next
            req = Request(i, float(arrival_s[i]), prompts[i], outputs[i])
            requests.append(req)
            k = router(req, replicas)
            if prompts[i] + outputs[i] > fits[k]:
                req.rejected = reject(req, replicas[k])
            if req.rejected is None:
                self.in_flight += 1
                replicas[k].submit(req)
            self._next = i = i + 1
            if arrival_s[i] <= env.now:
                self.arrive_until(env.now)
            if self._next < n:
                event.callbacks = [due]
                requeue(event, float(arrival_s[self._next]), LATE)
            if wakes:
                woken = wakes[:]
                wakes.clear()
                for idle in woken:
                    callbacks, idle.callbacks = idle.callbacks, None
                    for callback in callbacks:
                        callback(idle)

        event.callbacks.append(due)
        self._wakes = wakes

    def arrive_until(self, t: float) -> None:
        """Open loop: every request stamped ≤ t arrives now. One replica calls this before each
        plan, so an arrival costs no event of its own (a request stamped t joins the batch planned
        at t); in front of several, the arrival events do. Every request is stamped with its own
        send time. Not re-entered: a router reading a sole replica's load while one of
        these arrivals is being routed would otherwise collect, and route, arrivals again."""
        if self._arriving or self._arrival_s[self._next] > t:
            return
        self._arriving = True
        arrival_s, i, n, arrive = self._arrival_s, self._next, self._n, self._arrive
        if (
            self.router is None and self._hashes is None and self._ignore_eos is None
        ):  # _arrive, inlined for the plain stream
            rep, requests, prompts, outputs, reject = (
                self.replicas[0],
                self.requests,
                self._prompts,
                self._outputs,
                self._reject_reason,
            )
            pool = rep.state.pool  # below: the longest request that can never be refused, as `fits` above
            fit = -1 if rep.rejects else min(self.max_model_len or math.inf, pool.total * pool.block_size)
            while i < n and arrival_s[i] <= t:
                req = Request(i, float(arrival_s[i]), prompts[i], outputs[i])
                requests.append(req)
                if prompts[i] + outputs[i] > fit and reject(req, rep) is not None:
                    req.rejected = reject(req, rep)
                else:
                    self.in_flight += 1
                    rep.submit(req)
                i = self._next = i + 1
        while i < n and arrival_s[i] <= t:
            arrive(i, float(arrival_s[i]))
            i = self._next = i + 1
        self._arriving = False

    def _arrive(self, i: int, now: float) -> None:
        req = new_request(self.workload, i, now)
        self.requests.append(req)
        replica = self.replicas[self.router(req, self.replicas) if self.router else 0]
        rejected = req.rejected = self._reject_reason(req, replica)
        if rejected is None:
            self.in_flight += 1
            replica.submit(req)

    def _reject_reason(self, req: Request, replica: Replica) -> str | None:
        return reject_reason(req, replica, self.max_model_len)

    def run(self, until: float | None = None, goodput: dict | None = None) -> Result:
        """Simulate (to `until`, or until every request is done) and collect the results; once.
        Python's cyclic garbage collector is paused while the events run and the results are
        collected (and restored as it was): nothing a run allocates forms a
        reference cycle, so reference counting frees it all, and the collector's passes would
        only walk the ever larger set of live requests again (tests/test_sim_invariants.py checks
        that a run leaves no cyclic garbage)."""
        require(not self._ran, "Simulation.run", until, "a Simulation runs once; build a new one to run again")
        self._ran = True
        if until is None and self._wakes is not None:
            for r in self.replicas:
                r.wakes = self._wakes
        collecting = gc.isenabled()
        gc.disable()  # a run makes no reference cycles (tests check): the collector would only re-walk the live requests
        try:
            self.env.run(until=until)
            return self._results(until, goodput)
        finally:
            if collecting:
                gc.enable()

    def _results(self, until: float | None, goodput: dict | None) -> Result:
        for r in self.replicas:
            r.finish_run(until)
        if getattr(self.replicas[0], "pull", None) is not None:  # stopped at t: arrivals stamped t, like steps ending
            self.arrive_until(
                math.nextafter(until, -math.inf) if until is not None else math.inf
            )  # at t, come too late
        requests, wl = self.requests, self.workload
        n = len(requests)
        known = {"rid": np.arange(n), "prompt_len": wl.prompt_len[:n], "output_len": wl.output_len[:n]}  # as arrived
        if not self.concurrency:
            known["arrival_s"] = wl.arrival_s[:n]  # open loop: stamped with its send time
        df = requests_frame(requests, known)
        if until is None:  # rows in list order: rid i is requests[i]
            missing = (df.finish_s.isna() & df.rejected.isna()).to_numpy()
            if missing.any():
                why = "never admitted: the engine could not fit it before the run ended"
                for i in np.flatnonzero(missing).tolist():
                    requests[i].rejected = why
                df.loc[missing, "rejected"] = why
        iters = sum(r.num_iterations for r in self.replicas)
        log = [row for r in self.replicas for row in (r.iteration_log or [])] or None
        itl = LogHistogram()
        for r in self.replicas:
            itl.merge(r.itl)
        summary = summarize(df, itl, iters, goodput)
        if len(self.replicas) > 1:
            summary["replicas"] = [
                summarize(df[df.replica == r.index], r.itl, r.num_iterations, goodput) for r in self.replicas
            ]
            routed = df[df.rejected.isna()]
            span = float(routed.finish_s.max() - routed.arrival_s.min()) if len(routed) else 0.0
            for r, rs in zip(self.replicas, summary["replicas"]):  # Little's law: time in system per second
                mine = routed[routed.replica == r.index]
                rs["routed"] = len(mine)
                rs["mean_load"] = (
                    float((mine.finish_s.fillna(routed.finish_s.max()) - mine.arrival_s).sum() / span)
                    if span > 0
                    else 0.0
                )
        caches = [r.state.pool.cache for r in self.replicas if r.state.pool.cache is not None]
        if caches:
            lookups = sum(c.lookup_tokens for c in caches)
            summary["prefix_cache_hit_rate"] = sum(c.hit_tokens for c in caches) / lookups if lookups else 0.0
        return Result(df, summary, log, self.replicas)

    def accounted(self) -> bool:
        """Every arrived request is finished, running, waiting or rejected."""
        if getattr(self.replicas[0], "pull", None) is not None:
            self.arrive_until(self.env.now)
        where = {}
        for rep in self.replicas:
            for r in rep.state.all_running():
                where[id(r)] = "running"
            for r in list(rep.state.waiting) + rep.inbox:
                where[id(r)] = "waiting"
        return all((r.finish_s is not None) + (r.rejected is not None) + (id(r) in where) == 1 for r in self.requests)


def fixed_workload(arrival_s, prompt_len, output_len, concurrency: int | None = None) -> Workload:
    """The minimal workload: three equal-length arrays (the workloads package builds richer ones)."""
    return Workload(arrival_s, prompt_len, output_len, closed_loop_concurrency=concurrency)
