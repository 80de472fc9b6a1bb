"""chunksim's SGLang policy on a conformance scenario, step for step against SGLang's own scheduler.

chunksim runs the scenario through its real Simulation and Replica with every step costing exactly
one second, so a step's start time is its index and an arrival stamped t joins the batch planned
at t, as the engine driver (sglang_engine.run_engine) adds it before the step at t. Stepping mode
(`--no-fast-forward`) logs every step's plan; the fast-forward and decode-cohort mode must then
finish every request at the same step (its timestamps are the same additions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.sglang import SGLangConfig, SGLangScheduler
from simcore.kv import BlockPool
from simcore.simulation import Simulation
from workloads.workload import Workload

from .sglang_engine import Step
from .unit_cost import UnitCost


def page_hashes(tokens, page: int) -> tuple:
    """One id per full page: the page's tokens (chunksim's cache is a trie over them, as SGLang's radix tree)."""
    return tuple(tuple(tokens[i : i + page]) for i in range(0, len(tokens) // page * page, page))


def policy_for(knobs, **extra) -> SGLangScheduler:
    return SGLangScheduler(
        SGLangConfig(
            chunked_prefill_size=knobs.chunked_prefill_size or 0,
            max_prefill_tokens=knobs.max_prefill_tokens,
            page_size=knobs.page_size,
            max_running_requests=knobs.max_running_requests,
            enable_mixed_chunk=knobs.enable_mixed_chunk,
            disable_radix_cache=knobs.disable_radix_cache,
            disable_overlap_schedule=knobs.disable_overlap_schedule,
            schedule_conservativeness=knobs.schedule_conservativeness,
            **extra,
        )
    )


def scenario_workload(k, reqs) -> Workload:
    """A scenario's requests (sorted by arrival) as chunksim's workload, pages hashed for the radix cache."""
    return Workload(
        np.array([r.arrival for r in reqs], float),
        np.array([len(r.tokens) for r in reqs]),
        np.array([r.max_new_tokens for r in reqs]),
        block_hashes=None if k.disable_radix_cache else [page_hashes(r.tokens, k.page_size) for r in reqs],
        block_tokens=k.page_size,
        ignore_eos=np.array([r.ignore_eos for r in reqs]),
    )


def simulate(scenario, fast_forward: bool = False):
    k = scenario.knobs
    reqs = sorted(scenario.requests, key=lambda r: (r.arrival, r.rid))
    wl = scenario_workload(k, reqs)
    pool = BlockPool(k.pool_tokens // k.page_size, k.page_size)
    sim = Simulation(
        [(policy_for(k), pool, UnitCost())],
        wl,
        fast_forward=fast_forward,
        record_iterations=not fast_forward,
        max_model_len=1 << 30,
        check=True,
    )
    res = sim.run()
    return sim, res, [r.rid for r in reqs]


def chunksim_steps(scenario) -> list:
    sim, res, names = simulate(scenario)
    steps = []
    for _, start, end, n, plan in res.iterations or ():
        assert n == 1
        rec = Step(int(start))
        for req, q in plan.items:
            rec.tokens[names[req.rid]] = q
            if req.finish_s is not None and req.finish_s == end:
                rec.finished.append(names[req.rid])
        rec.retracted = [names[r.rid] for r in plan.preempted]
        steps.append(rec)
    return steps


def finish_steps(scenario, fast_forward: bool) -> dict:
    """rid → (first token time, finish time) from the requests table."""
    sim, res, names = simulate(scenario, fast_forward)
    return {names[r.rid]: (r.first_token_s, r.finish_s, r.num_preemptions) for r in sim.requests}


@dataclass
class Verdict:
    name: str
    match: bool
    steps: int
    retractions: int
    divergence: str = ""


def compare(scenario, engine_steps: list) -> Verdict:
    """Step by step: tokens per request, retractions, finishes; then stepping against fast-forward."""
    mine = chunksim_steps(scenario)
    retr = sum(len(s.retracted) for s in engine_steps)
    for i, (a, b) in enumerate(zip(engine_steps, mine)):
        if a.key() != b.key():
            return Verdict(
                scenario.name,
                False,
                len(engine_steps),
                retr,
                f"step {i} (t={a.time}): sglang {a.tokens} retract={a.retracted} fin={a.finished} | "
                f"chunksim t={b.time} {b.tokens} retract={b.retracted} fin={b.finished}",
            )
    if len(engine_steps) != len(mine):
        return Verdict(
            scenario.name, False, len(engine_steps), retr, f"sglang ran {len(engine_steps)} steps, chunksim {len(mine)}"
        )
    stepped, fast = finish_steps(scenario, False), finish_steps(scenario, True)
    if stepped != fast:
        bad = next(r for r in stepped if stepped[r] != fast.get(r))
        return Verdict(
            scenario.name,
            False,
            len(engine_steps),
            retr,
            f"fast-forward differs from stepping for {bad}: {fast.get(bad)} vs {stepped[bad]}",
        )
    return Verdict(scenario.name, True, len(engine_steps), retr)
