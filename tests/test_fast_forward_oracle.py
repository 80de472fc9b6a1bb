"""Fast-forward against the reference loop (simcore/stepping.py), request by request.

Every policy, open and closed loop, prefix caching on and off, pools tight enough to preempt,
one to three replicas behind every router, chunk-sized budgets; all fast paths on, and each of
the four switches (simcore/fastforward/switches.py) off alone. First scheduled, first token, finish, max
ITL, preemptions, outputs, cache hits and rejections must be equal to the bit, and so must each
replica's ITL histogram. The default run draws a few dozen examples; `pytest -m slow` many more.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from simcore.fastforward.switches import FastForward
from simcore.simulation import Simulation
from simcore.stepping import SteppingReplica
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
ROUTERS = ["round_robin", "least_outstanding", "least_kv", "prefix_affinity"]
SWITCHES = {
    "all": FastForward(),
    "no cohort": FastForward(cohort=False),
    "no chunked runs": FastForward(chunked_runs=False),
    "no arrival folds": FastForward(arrival_folds=False),
    "no deferred finish": FastForward(deferred_finish=False),
}
TIMES = ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s")
EXACT = ("replica", "num_output_tokens", "num_preemptions", "num_cached_tokens", "rejected")
BLOCK_TOKENS = 32


def flags_for(policy: str, budget: int, tight: int, cache: bool, async_scheduling: bool) -> dict:
    if policy == "sglang":
        flags = dict(
            chunked_prefill_size=budget,
            max_prefill_tokens=budget,
            page_size=16,
            disable_radix_cache=not cache,
            max_running_requests=16,
            disable_overlap_schedule=not async_scheduling,  # the overlap scheduler's lag: policies/sglang_overlap.py
        )
        if tight:
            flags["max_total_tokens"] = tight * 16
        return flags
    flags = dict(block_size=16, max_num_seqs=16, enable_prefix_caching=cache)
    if policy == "vllm":
        flags.update(max_num_batched_tokens=budget, async_scheduling=async_scheduling)
    if tight:
        flags["num_gpu_blocks_override"] = tight
    return flags


def workload(rng: np.random.Generator, n: int, cache: bool, closed: bool) -> Workload:
    gaps = rng.choice([0.0, 0.002, 0.02, 0.2, 1.0], n) * rng.random(n)
    prompts = rng.integers(1, 2500, n)
    outputs = rng.integers(1, 120, n)
    hashes = None
    if cache:  # a shared head of 0–3 blocks of one of two prefixes, then blocks of its own
        hashes = []
        for i, p in enumerate(prompts.tolist()):
            head = tuple(range(1000 * (i % 2), 1000 * (i % 2) + int(rng.integers(0, 4))))
            hashes.append((head + tuple(10_000 * (i + 1) + j for j in range(p)))[: p // BLOCK_TOKENS])
    return Workload(
        np.cumsum(gaps),
        prompts,
        outputs,
        block_hashes=hashes,
        block_tokens=BLOCK_TOKENS,
        closed_loop_concurrency=int(rng.integers(1, 6)) if closed else None,
    )


def simulate(policy, flags, wl, ff, replicas, router):
    engines, route, max_len = build_cluster(policy, MODEL, HW, 1, flags, replicas, router)
    sim = Simulation(
        engines, wl, router=route if replicas > 1 else None, fast_forward=ff, check=True, max_model_len=max_len
    )
    return sim, sim.run()


def assert_matches_oracle(policy, flags, wl, switches, replicas, router):
    oracle_sim, oracle = simulate(policy, flags, wl, False, replicas, router)
    assert all(isinstance(r, SteppingReplica) for r in oracle_sim.replicas)
    sim, fast = simulate(policy, flags, wl, switches, replicas, router)
    assert sim.accounted() and oracle_sim.accounted()
    for col in TIMES:
        a, b = fast.requests[col].to_numpy(float), oracle.requests[col].to_numpy(float)
        assert np.array_equal(a, b, equal_nan=True), (
            col,
            np.flatnonzero(~((a == b) | (np.isnan(a) & np.isnan(b))))[:5],
        )
    for col in EXACT:
        assert fast.requests[col].equals(oracle.requests[col]), col
    for ra, rb in zip(fast.replicas, oracle.replicas):
        assert ra.itl.count == rb.itl.count and (ra.itl.counts == rb.itl.counts).all()
        assert ra.num_iterations == rb.num_iterations
    return fast


CASE = dict(
    policy=st.sampled_from(["vllm", "sglang", "nochunk"]),
    switch=st.sampled_from(sorted(SWITCHES)),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    budget=st.sampled_from([64, 256, 512, 2048, 8192]),
    tight=st.sampled_from([0, 0, 0, 40, 120, 400]),
    cache=st.booleans(),
    closed=st.booleans(),
    async_scheduling=st.booleans(),
    replicas=st.integers(1, 3),
    router=st.sampled_from(ROUTERS),
)


def check_case(policy, switch, seed, n, budget, tight, cache, closed, async_scheduling, replicas, router):
    wl = workload(np.random.default_rng(seed), n, cache, closed)
    assert_matches_oracle(
        policy, flags_for(policy, budget, tight, cache, async_scheduling), wl, SWITCHES[switch], replicas, router
    )


@settings(
    max_examples=int(os.environ.get("ORACLE_EXAMPLES", 60)), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(**CASE)
def test_fast_forward_matches_the_reference_loop(**case):
    check_case(**case)


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("ORACLE_EXAMPLES_SLOW", 1500)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(**CASE)
def test_fast_forward_matches_the_reference_loop_many(**case):
    check_case(**case)


@pytest.mark.parametrize("switch", sorted(SWITCHES))
@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize("replicas,router", [(1, None), (3, "least_outstanding"), (2, "least_kv")])
def test_each_switch_off_alone_matches_on_a_busy_day(switch, policy, replicas, router):
    """A fixed busy workload (long prompts among many decodes, bursts, a tight pool) where every
    fast path has work to do: with each switch off alone the run still equals the reference."""
    rng = np.random.default_rng(11)
    n = 120
    wl = Workload(np.cumsum(rng.exponential(0.03, n)), rng.integers(16, 4000, n), rng.integers(1, 200, n))
    fast = assert_matches_oracle(
        policy, flags_for(policy, 512, 600, False, True), wl, SWITCHES[switch], replicas, router or "round_robin"
    )
    assert fast.summary["completed"] == n


def test_the_switches_change_how_the_run_is_taken():
    """Not vacuous: each switch off alone changes the number of plans (SimPy-visible runs) a busy
    sole replica takes, while the results stay equal (the test above)."""
    rng = np.random.default_rng(3)
    n = 200
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(16, 3000, n), rng.integers(1, 300, n))
    plans = {}
    for name, sw in SWITCHES.items():
        engines, _, max_len = build_cluster("vllm", MODEL, HW, 1, flags_for("vllm", 512, 0, False, True), 1)
        count = [0]
        schedule = engines[0][0].schedule

        def counted(state, schedule=schedule, count=count):
            count[0] += 1
            return schedule(state)

        engines[0][0].schedule = counted
        Simulation(engines, wl, fast_forward=sw, max_model_len=max_len).run()
        plans[name] = count[0]
    assert plans["no cohort"] != plans["all"] and plans["no chunked runs"] != plans["all"]
    assert plans["no arrival folds"] != plans["all"]
