"""Many replicas behind a router: routing quality, exact fast-forward with interrupts, MoE, errors."""
from pathlib import Path

import numpy as np
import pytest

from costmodel import InputError, load_model
from experiments.engines import build_cluster
from experiments.sglang_chunk_study import agentic_workload
from simcore.simulation import Simulation, fixed_workload
from workloads.workload import Workload

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
    hashes = [tuple([1000 * int(k) + j for j in range(prefix_blocks)] + [10**7 + 100 * i + j for j in range(4)])
              for i, k in enumerate(g)]
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


@pytest.mark.parametrize("router,policy", [("least_outstanding", "vllm"), ("least_kv", "sglang"), ("least_kv", "vllm"),
                                           ("round_robin", "nochunk"), ("round_robin", "vllm"), ("prefix_affinity", "vllm")])
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
    flags = dict(max_model_len=131072, **({"num_gpu_blocks_override": 8000} if policy == "vllm" else {"max_total_tokens": 128000}))
    _, a = cluster_run(llama8b, h100, wl, "least_outstanding", 3, policy, flags, ff=True, check=True)
    _, b = cluster_run(llama8b, h100, wl, "least_outstanding", 3, policy, flags, ff=False)
    assert a.summary["completed"] == 30
    for col in ("replica", "arrival_s", "first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float)), col


@pytest.mark.parametrize("router", ["least_outstanding", "prefix_affinity", "round_robin"])
def test_one_replica_behind_a_router(llama8b, h100, router):
    """A sole replica collects its own arrivals, and reading its load does too: a router reading
    it while an arrival is being routed must not collect (and route) arrivals again."""
    rng = np.random.default_rng(5)
    n = 400
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(50, 3000, n), rng.integers(20, 300, n),
                  block_hashes=[tuple(range(i % 3 * 100, i % 3 * 100 + 8)) for i in range(n)], block_tokens=16)
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
