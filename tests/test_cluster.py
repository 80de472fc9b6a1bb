"""Many replicas behind a router: routing quality, exact fast-forward with interrupts, MoE, errors."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import InputError, load_model
from experiments.engines import build_cluster
from experiments.sglang_chunk_study import agentic_workload
from simcore.simulation import Simulation, fixed_workload
from workloads.workload import Workload

pytestmark = pytest.mark.usefixtures("sglang_non_overlap")  # the fast paths: SGLang's non-overlap loop

TRACES = Path(__file__).resolve().parents[2] / "shared/data/traces"


def cluster_run(model, hw, wl, router, replicas=4, policy="vllm", flags=None, tp=1, ff=True, check=False):
    engines, route, max_len = build_cluster(policy, model, hw, tp, flags or {}, replicas, router)
    sim = Simulation(engines, wl, router=route, fast_forward=ff, check=check, max_model_len=max_len)
    return sim, sim.run()


def skewed(n=1200, rate=6.0, seed=1):
    """Mostly short chats, every 8th request a 12k-token document: round-robin piles them up."""
    rng = np.random.default_rng(seed)
    prompts = np.where(np.arange(n) % 8 == 0, 12000, rng.integers(100, 600, n))
    outputs = np.where(np.arange(n) % 8 == 0, 400, rng.integers(50, 300, n))
    return fixed_workload(np.cumsum(rng.exponential(1 / rate, n)), prompts, outputs)


def test_least_outstanding_beats_round_robin_on_p99_ttft(llama8b, h100):
    wl = skewed()
    _, rr = cluster_run(llama8b, h100, wl, "round_robin", flags={"max_num_batched_tokens": 2048})
    _, lo = cluster_run(llama8b, h100, wl, "least_outstanding", flags={"max_num_batched_tokens": 2048})
    assert rr.summary["completed"] == lo.summary["completed"] == len(wl)
    assert lo.summary["p99_ttft_ms"] < rr.summary["p99_ttft_ms"]
    assert len(lo.summary["replicas"]) == 4
    assert sum(r["completed"] for r in lo.summary["replicas"]) == len(wl)


def shared_prefix_workload(n=600, groups=40, prefix_blocks=24, seed=2):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, n)
    hashes = [
        tuple([1000 * int(k) + j for j in range(prefix_blocks)] + [10**7 + 100 * i + j for j in range(4)])
        for i, k in enumerate(g)
    ]
    prompts = np.full(n, (prefix_blocks + 4) * 16 - 5)
    return Workload(np.cumsum(rng.exponential(0.05, n)), prompts, np.full(n, 30), hashes, 16)


def test_prefix_affinity_raises_hit_rate(llama8b, h100):
    wl = shared_prefix_workload()
    flags = {"num_gpu_blocks_override": 400}
    _, rr = cluster_run(llama8b, h100, wl, "round_robin", flags=flags)
    _, pa = cluster_run(llama8b, h100, wl, "prefix_affinity", flags=flags)
    assert pa.summary["prefix_cache_hit_rate"] > rr.summary["prefix_cache_hit_rate"] + 0.05


@pytest.mark.skipif(not (TRACES / "mooncake_conversation.jsonl").is_file(), reason="shared traces absent")
def test_prefix_affinity_on_mooncake(llama8b, h100):
    from workloads.traces import mooncake

    wl = mooncake(TRACES / "mooncake_conversation.jsonl", max_requests=1500, time_scale=4.0)
    _, rr = cluster_run(llama8b, h100, wl, "round_robin", replicas=8)
    _, pa = cluster_run(llama8b, h100, wl, "prefix_affinity", replicas=8)
    assert pa.summary["prefix_cache_hit_rate"] > rr.summary["prefix_cache_hit_rate"]


@pytest.mark.parametrize(
    "router,policy",
    [
        ("least_outstanding", "vllm"),
        ("least_kv", "sglang"),
        ("least_kv", "vllm"),
        ("round_robin", "nochunk"),
        ("round_robin", "vllm"),
        ("prefix_affinity", "vllm"),
    ],
)
def test_cluster_fast_forward_is_exact(llama8b, h100, router, policy):
    wl = skewed(n=300, rate=10.0, seed=5)
    _, a = cluster_run(llama8b, h100, wl, router, 3, policy, ff=True, check=True)
    _, b = cluster_run(llama8b, h100, wl, router, 3, policy, ff=False)
    for col in ("replica", "first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float)), col


@pytest.mark.parametrize("policy", ["vllm", "sglang"])
def test_closed_loop_cluster_fast_forward_is_exact(llama8b, h100, policy):
    """Closed loop over several replicas: a request is sent when another finishes, stamped with
    that planned finish. SimPy's clock, after a long fast-forward wait, can land an ulp away from
    it (now + (t − now) ≠ t), and a stamp taken from the clock differed from stepping's."""
    wl = agentic_workload(30, turns=3, concurrency=3, seed=68)
    flags = dict(
        max_model_len=131072,
        **({"num_gpu_blocks_override": 8000} if policy == "vllm" else {"max_total_tokens": 128000}),
    )
    _, a = cluster_run(llama8b, h100, wl, "least_outstanding", 3, policy, flags, ff=True, check=True)
    _, b = cluster_run(llama8b, h100, wl, "least_outstanding", 3, policy, flags, ff=False)
    assert a.summary["completed"] == 30
    for col in ("replica", "arrival_s", "first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float)), col


def assert_modes_agree(llama8b, h100, wl, policy, flags, replicas, router, check=True):
    _, a = cluster_run(llama8b, h100, wl, router, replicas, policy, flags, ff=True, check=check)
    _, b = cluster_run(llama8b, h100, wl, router, replicas, policy, flags, ff=False, check=check)
    for col in ("replica", "arrival_s", "first_token_s", "finish_s", "max_itl_s", "num_cached_tokens"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float), equal_nan=True), col


def test_a_run_cut_at_an_arrival_that_ends_a_step(llama8b, h100):
    """Equal prompts give equal step times: a closed-loop send lands exactly on a step end of the
    other replica, whose run is cut there (fast-forward once crashed with a negative delay)."""
    wl = Workload(
        np.full(3, 0.040756876840413486),
        [100] * 3,
        [50, 200, 5],
        block_hashes=[(1,), (2,), (2,)],
        block_tokens=16,
        closed_loop_concurrency=2,
    )
    assert_modes_agree(llama8b, h100, wl, "vllm", {"max_model_len": 8192}, 2, "prefix_affinity")


def test_finishes_an_ulp_apart_free_slots_in_order(llama8b, h100):
    """Planned finishes an ulp apart: each closed-loop send is stamped with the finish that freed it."""
    outs = [50, 5, 50, 5, 5, 200, 200, 5, 5, 5, 20, 50, 200, 200, 50, 50, 200, 20, 50, 20, 200, 5, 50]
    grp = [1, 3, 2, 3, 2, 1, 1, 2, 2, 3, 1, 2, 1, 1, 2, 3, 2, 1, 1, 3, 3, 2, 2]
    wl = Workload(
        np.full(len(outs), 0.03838533738938911),
        [322] * len(outs),
        outs,
        block_hashes=[(g,) * 10 for g in grp],
        block_tokens=32,
        closed_loop_concurrency=2,
    )
    flags = dict(
        max_num_batched_tokens=585,
        max_num_seqs=7,
        long_prefill_token_threshold=100,
        num_gpu_blocks_override=79,
        block_size=32,
        max_model_len=8192,
        enable_prefix_caching=True,
    )
    assert_modes_agree(llama8b, h100, wl, "vllm", flags, 3, "round_robin", check=False)


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
def test_a_send_freed_at_a_step_end_joins_the_plan_made_then(llama8b, h100, policy):
    """A finish on one replica at t frees a slot; the send (one event later) must join the plan the
    other replica makes at t, in stepping as in fast-forward."""
    wl = Workload(
        np.full(3, 0.4),
        [100] * 3,
        [200, 50, 5],
        block_hashes=[(2,), (1,), (2,)],
        block_tokens=16,
        closed_loop_concurrency=2,
    )
    assert_modes_agree(llama8b, h100, wl, policy, {"max_model_len": 8192}, 2, "prefix_affinity")


def stepped_finish(llama8b, h100, wl, policy, rid):
    return cluster_run(llama8b, h100, wl, "least_outstanding", 2, policy, {"max_model_len": 8192}, ff=False)[
        1
    ].requests.finish_s[rid]


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize("router", ["least_outstanding", "least_kv", "prefix_affinity"])
@pytest.mark.parametrize("folded", [True, False])
def test_an_arrival_at_a_finishing_step_end_sees_the_finish(llama8b, h100, policy, router, folded):
    """An arrival stamped exactly at a step end where a request finishes is routed after that step
    has ended, in both modes (stepping queues the step's end when the step starts, fast-forward when
    the run starts). `folded`: the finish falls inside a run that goes on past it."""
    if folded:
        base = Workload([0] * 5, [100] * 5, [5, 200, 50, 3, 10])
        t = stepped_finish(llama8b, h100, base, policy, 4)
        wl = Workload([0] * 5 + [t], [100] * 6, [5, 200, 50, 3, 10, 10])
    else:
        base = Workload([0, 0, 0, 0.01], [100] * 4, [10, 200, 200, 3])
        t = stepped_finish(llama8b, h100, base, policy, 0)
        wl = Workload([0, 0, 0, 0.01, t], [100] * 5, [10, 200, 200, 3, 10])
    assert_modes_agree(llama8b, h100, wl, policy, {"max_model_len": 8192}, 2, router)


@pytest.mark.parametrize("router", ["least_outstanding", "prefix_affinity", "round_robin"])
def test_one_replica_behind_a_router(llama8b, h100, router):
    """A sole replica collects its own arrivals, and reading its load does too: a router reading
    it while an arrival is being routed must not collect (and route) arrivals again."""
    rng = np.random.default_rng(5)
    n = 400
    wl = Workload(
        np.cumsum(rng.exponential(0.05, n)),
        rng.integers(50, 3000, n),
        rng.integers(20, 300, n),
        block_hashes=[tuple(range(i % 3 * 100, i % 3 * 100 + 8)) for i in range(n)],
        block_tokens=16,
    )
    engines, route, max_len = build_cluster("vllm", llama8b, h100, 1, {}, 1, router)
    res = Simulation(engines, wl, router=route, max_model_len=max_len).run()
    assert sorted(res.requests.rid) == list(range(n)) and res.summary["completed"] == n


@pytest.mark.parametrize("name,tp", [("qwen3-30b-a3b", 2), ("mixtral-8x7b", 4)])
def test_moe_cluster_end_to_end(h100, name, tp):
    m = load_model(name)
    wl = skewed(n=200, rate=4.0)
    sim, res = cluster_run(m, h100, wl, "least_outstanding", replicas=2, tp=tp, check=True)
    assert res.summary["completed"] == 200 and sim.accounted()


def test_bad_cluster_input(llama8b, h100):
    with pytest.raises(InputError, match="replicas"):
        build_cluster("vllm", llama8b, h100, 1, {}, 0)
    with pytest.raises(InputError, match="tp"):
        build_cluster("vllm", load_model("llama-3.1-70b"), h100, 16, {}, 1)
    with pytest.raises(InputError, match="router"):
        build_cluster("vllm", llama8b, h100, 1, {}, 2, "random_walk")


@pytest.mark.parametrize(
    "router,policy,replicas,ff",
    [
        ("least_outstanding", "vllm", 3, True),
        ("round_robin", "sglang", 2, True),
        ("least_kv", "vllm", 4, False),
        ("least_outstanding", "nochunk", 5, True),
    ],
)
def test_plain_arrival_path_matches_the_general_one(llama8b, h100, router, policy, replicas, ff):
    """Several replicas and a plain stream take Simulation._plain_arrivals (one event object, the
    size checks read once per replica, idle replicas woken without an event); ignore_eos given
    (all True, the default) sends the same stream down the general path (_arrival_due, _arrive).
    Same requests, same rejections (too long for max_model_len, too big for the pool), same
    bits, to the end and to a stop; arrivals at t = 0 and ties too."""
    rng = np.random.default_rng(replicas)
    n = 400
    prompts, outputs = rng.integers(50, 3000, n), rng.integers(1, 300, n)
    prompts[::37] = 9000  # over max_model_len (8192)
    arrivals = np.cumsum(rng.exponential(1 / 12.0, n))
    arrivals[:3] = 0.0
    arrivals[50:53] = arrivals[50]
    flags = {
        "max_model_len": 8192,
        **({"num_gpu_blocks_override": 300} if policy != "sglang" else {"max_total_tokens": 5000}),
    }
    for until in (None, float(arrivals[n // 2])):  # a stop: idle replicas woken by events again
        runs = []
        for eos in (None, np.ones(n, dtype=bool)):
            wl = Workload(arrivals, prompts, outputs, ignore_eos=eos)
            engines, route, max_len = build_cluster(policy, llama8b, h100, 1, flags, replicas, router)
            sim = Simulation(engines, wl, router=route, fast_forward=ff, max_model_len=max_len)
            runs.append(sim.run(until=until))
            assert sim.accounted()
        a, b = runs
        assert a.requests.rejected.notna().sum() > n // 80
        pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
        assert a.summary == b.summary


def test_least_outstanding_is_the_first_least_loaded(llama8b, h100):
    """The router's early exit (the first idle replica) picks what an argmin over every replica's
    ``outstanding`` picks, at every arrival of a busy and of a quiet cluster."""
    from simcore.router import least_outstanding

    picks = []

    def checked(req, replicas):
        loads = [r.outstanding for r in replicas]
        i = least_outstanding(req, replicas)
        assert i == loads.index(min(loads))
        picks.append(loads[i])
        return i

    for rate in (3.0, 60.0):
        wl = skewed(n=500, rate=rate, seed=4)
        engines, _, max_len = build_cluster(
            "vllm", llama8b, h100, 1, {"max_num_batched_tokens": 2048}, 4, "least_outstanding"
        )
        Simulation(engines, wl, router=checked, max_model_len=max_len).run()
    assert 0 in picks and max(picks) > 1


@pytest.mark.parametrize(
    "policy,flags", [("vllm", {}), ("vllm", {"num_gpu_blocks_override": 40}), ("sglang", {}), ("nochunk", {})]
)
def test_lone_request_paths_match_stepping(llama8b, h100, policy, flags, monkeypatch):
    """A lightly loaded cluster: most plans are one request on an idle replica (applies._apply_lone,
    runs._lone_ends), cut by arrivals or not, some a single output token or prompt token,
    tight pools cutting runs at the blocks; fast-forward gives stepping's bits, ITL histogram too."""
    from simcore.fastforward import applies, runs

    taken = {"ends": 0, "apply": 0}
    for module, name, key in ((runs, "_lone_ends", "ends"), (applies, "_apply_lone", "apply")):
        orig = getattr(module, name)

        def counted(self, *a, _orig=orig, _key=key):
            taken[_key] += 1
            return _orig(self, *a)

        monkeypatch.setattr(module, name, counted)
    rng = np.random.default_rng(11)
    n = 400
    prompts = np.where(rng.random(n) < 0.1, 1, rng.integers(2, 900, n))
    outputs = np.where(rng.random(n) < 0.15, 1, rng.integers(2, 400, n))
    wl = fixed_workload(np.cumsum(rng.exponential(0.6, n)), prompts, outputs)
    _, a = cluster_run(llama8b, h100, wl, "least_outstanding", 6, policy, flags, ff=True, check=True)
    _, b = cluster_run(llama8b, h100, wl, "least_outstanding", 6, policy, flags, ff=False)
    assert taken["ends"] > n // 2 and taken["apply"] > n // 2
    for col in ("replica", "first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float), equal_nan=True), col
    for key in ("median_itl_ms", "p99_itl_ms", "mean_itl_ms", "max_itl_ms", "completed"):
        assert a.summary[key] == b.summary[key], key


@pytest.mark.parametrize(
    "policy,outputs",
    [("vllm", 250), ("sglang", 250), ("nochunk", 250), ("vllm", 8), ("sglang", 8), ("sglang", 0), ("vllm", 0)],
)
def test_deferred_finishes_are_stepping_bits(llama8b, h100, policy, outputs, monkeypatch):
    """A run that ends with all its requests finished (lone, beside a cohort folded to empty, a
    batch finishing together) takes no event at its end (Replica: DEFERRED FINISH): applied when
    the next request comes, at the run's end when it comes during the run (cut or not) or at the
    arrival after it, the rest by the results. Same bits as stepping, every kind met here.
    outputs 0: bursts of one-token requests among long decodes (SGLang's prefill batches run while
    the decodes sit out: not deferred, they are still there at its end)."""
    from simcore.replica import Replica

    seen = {"during": 0, "after": 0, "beside": 0}
    apply = Replica.apply_deferred

    def counted(self):
        end = self._running_ends[-1]
        seen["during" if self.env._now <= end else "after"] += 1
        seen["beside"] += self._running_plan.cohort
        apply(self)

    monkeypatch.setattr(Replica, "apply_deferred", counted)
    rng = np.random.default_rng(11)
    n = 300
    if outputs:  # short outputs: a member and a prompt often finish in one step
        wl = fixed_workload(
            np.cumsum(rng.exponential(0.35 if outputs > 50 else 0.03, n)),
            rng.integers(20, 2500, n),
            rng.integers(1, outputs, n),
        )
    else:
        arrivals = np.repeat(np.cumsum(rng.exponential(0.4, n // 6)), 6)
        wl = fixed_workload(arrivals, rng.integers(20, 600, n), np.where(np.arange(n) % 6 == 0, 120, 1))
    _, a = cluster_run(llama8b, h100, wl, "least_outstanding", 3, policy, ff=True, check=True)
    _, b = cluster_run(llama8b, h100, wl, "least_outstanding", 3, policy, ff=False)
    assert seen["during"] > 10 and seen["after"] > 10 and seen["beside"] > 10
    for col in ("replica", "first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float)), col
    for ra, rb in zip(a.replicas, b.replicas):
        assert np.array_equal(ra.itl.counts, rb.itl.counts) and ra.itl.max == rb.itl.max
    assert a.summary["num_iterations"] == b.summary["num_iterations"]


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_deferred_finish_leaves_the_replica_idle_as_stepping_does(llama8b, h100, async_scheduling):
    """A replica idle after a deferred run holds no finished request when the next ones come
    (async scheduling holds one only into the schedule right after its finish): two requests
    arriving together at an idle replica with max_num_seqs 2 are both admitted, as stepping has it."""
    wl = fixed_workload(
        np.array([0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0]), np.full(8, 40), np.array([3, 1, 2, 1, 4, 1, 1, 2])
    )
    flags = {"max_num_seqs": 2, "async_scheduling": async_scheduling}
    runs = [cluster_run(llama8b, h100, wl, "round_robin", 2, "vllm", flags, ff=ff)[1].requests for ff in (True, False)]
    assert np.array_equal(runs[0].first_scheduled_s, runs[1].first_scheduled_s)
    assert (runs[1].first_scheduled_s.to_numpy() == wl.arrival_s).all()
