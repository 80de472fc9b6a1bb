"""A run: requests arrive (open loop, or closed loop with a concurrency cap), replicas serve them.

Requests whose prompt plus output exceeds max_model_len, or which could never fit in the KV
pool, are rejected at arrival with the reason recorded, never dropped silently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd
import simpy

from costmodel.errors import require
from policies.base import SchedulerState
from workloads.workload import Workload

from .histogram import LogHistogram
from .metrics import requests_frame, summarize
from .prefix_cache import PrefixCache
from .replica import Replica
from .request import Request


@dataclass
class Result:
    requests: pd.DataFrame
    summary: dict
    iterations: list | None = None
    replicas: list = field(default_factory=list)


class Simulation:
    def __init__(self, engines, workload, *, fast_forward: bool = True, check: bool = False,
                 max_model_len: int = 0, record_iterations: bool = False, router=None):
        """engines: list of (policy, BlockPool, CostModel), one per replica."""
        require(len(engines) > 0, "replicas", len(engines), "must be at least 1")
        self.env = simpy.Environment()
        self.workload, self.max_model_len, self.router = workload, max_model_len, router
        self.requests: list[Request] = []
        self._next = 0
        self._arrival_s = workload.arrival_s.tolist() + [math.inf]
        self.concurrency = getattr(workload, "closed_loop_concurrency", None)
        self.in_flight = 0
        self._slot = None
        hashes = getattr(workload, "block_hashes", None)
        for pol, pool, _ in engines:
            if hashes is not None and getattr(pol, "prefix_caching", False) and pool.cache is None:
                tokens = int(getattr(workload, "block_tokens", pool.block_size))
                require(tokens % pool.block_size == 0, "workload:block_tokens", tokens,
                        f"must be a multiple of the engine's KV block size ({pool.block_size}) for prefix caching")
                pool.cache = PrefixCache(tokens, pool.block_size)
        self.replicas = [Replica(self.env, i, pol, SchedulerState(pool), cm, self.next_arrival, self.finished,
                                 fast_forward, check, record_iterations) for i, (pol, pool, cm) in enumerate(engines)]
        for r in self.replicas:
            r.settle = bool(self.concurrency)
            r.sole = len(self.replicas) == 1 and not self.concurrency
            r.fold = not self.concurrency and not getattr(router, "reads_kv_usage", False)
        self.env.process(self.arrivals())

    def next_arrival(self) -> float:
        return math.inf if self.concurrency else self._arrival_s[self._next]

    def finished(self, req: Request) -> None:
        self.in_flight -= 1
        if self._slot is not None and not self._slot.triggered:
            self._slot.succeed()

    def arrivals(self):
        w, env = self.workload, self.env
        hashes = getattr(w, "block_hashes", None)
        arrival_s = self._arrival_s
        prompts, outputs = w.prompt_len.tolist(), w.output_len.tolist()
        for i in range(len(w)):
            self._next = i
            if arrival_s[i] > env.now:
                yield env.timeout(arrival_s[i] - env.now)
            while self.concurrency and self.in_flight >= self.concurrency:
                self._slot = env.event()
                yield self._slot
            req = Request(i, env.now, prompts[i], outputs[i],
                          tuple(hashes[i]) if hashes is not None and hashes[i] is not None else ())
            self.requests.append(req)
            replica = self.replicas[self.router(req, self.replicas) if self.router else 0]
            req.rejected = self._reject_reason(req, replica)
            if req.rejected is None:
                self.in_flight += 1
                replica.submit(req)
        self._next = len(w)

    def _reject_reason(self, req: Request, replica: Replica) -> str | None:
        total = req.prompt_len + req.output_len
        if self.max_model_len and total > self.max_model_len:
            return f"prompt_len+output_len={total} exceeds max_model_len={self.max_model_len}"
        pool = replica.state.pool
        if pool.blocks_for(total) > pool.total:
            return f"needs {pool.blocks_for(total)} KV blocks, the whole pool has {pool.total}"
        return None

    def run(self, until: float | None = None, goodput: dict | None = None) -> Result:
        self.env.run(until=until)
        for r in self.replicas:
            r.state.dissolve_cohort()
        if until is None:
            for r in self.requests:
                if r.finish_s is None and r.rejected is None:
                    r.rejected = "never admitted: the engine could not fit it before the run ended"
        df = requests_frame(self.requests)
        iters = sum(r.num_iterations for r in self.replicas)
        log = [row for r in self.replicas for row in (r.iteration_log or [])] or None
        itl = LogHistogram()
        for r in self.replicas:
            itl.merge(r.itl)
        summary = summarize(df, itl, iters, goodput)
        if len(self.replicas) > 1:
            summary["replicas"] = [summarize(df[df.replica == r.index], r.itl, r.num_iterations, goodput)
                                   for r in self.replicas]
        caches = [r.state.pool.cache for r in self.replicas if r.state.pool.cache is not None]
        if caches:
            lookups = sum(c.lookup_tokens for c in caches)
            summary["prefix_cache_hit_rate"] = sum(c.hit_tokens for c in caches) / lookups if lookups else 0.0
        return Result(df, summary, log, self.replicas)

    def accounted(self) -> bool:
        """Every arrived request is finished, running, waiting or rejected."""
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
