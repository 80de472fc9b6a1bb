"""Prefix caching: hit rates against an independent block-reuse count, eviction, invariants."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel import InputError, load_hardware, load_model
from experiments.engines import build_engine
from simcore.prefix_cache import PrefixCache
from simcore.request import Request
from simcore.simulation import Simulation
from workloads.workload import Workload


def chain_workload(prompts, hashes, gap=50.0, block_tokens=16, output=4):
    n = len(prompts)
    return Workload(np.arange(n) * gap, np.array(prompts), np.full(n, output), hashes, block_tokens)


def expected_hit_tokens(prompts, hashes, bt):
    """Sequential requests, nothing evicted: request i hits the longest chain of its full prompt
    blocks that some earlier request computed, capped so that one prompt token is recomputed."""
    seen, hits = set(), []
    for p, h in zip(prompts, hashes):
        full = min(len(h), p // bt)
        m = 0
        while m < min(full, (p - 1) // bt) and tuple(h[: m + 1]) in seen:
            m += 1
        hits.append(m * bt)
        seen.update(tuple(h[: i + 1]) for i in range(full))
    return hits


@pytest.fixture
def hand_trace():
    rng = np.random.default_rng(4)
    prompts, hashes = [], []
    for i in range(40):
        root = int(rng.integers(0, 4))
        shared = int(rng.integers(0, 6))
        p = int(rng.integers(1, 12)) * 16 + int(rng.integers(0, 16))
        blocks = -(-p // 16)
        chain = [1000 * root + j for j in range(min(shared, blocks))] + [10**6 + 100 * i + j for j in range(blocks)]
        prompts.append(p)
        hashes.append(tuple(chain[:blocks]))
    return prompts, hashes


@pytest.mark.parametrize(
    "policy,flags",
    [("vllm", {}), ("sglang", {"chunked_prefill_size": 64}), ("nochunk", {"enable_prefix_caching": True})],
)
def test_hit_rate_equals_block_reuse_count(llama8b, h100, hand_trace, policy, flags):
    prompts, hashes = hand_trace
    sched, pool, cm, L = build_engine(policy, llama8b, h100, 1, flags)
    sim = Simulation([(sched, pool, cm)], chain_workload(prompts, hashes), check=True, max_model_len=L)
    res = sim.run()
    hits = expected_hit_tokens(prompts, hashes, 16)
    assert res.requests.num_cached_tokens.tolist() == hits
    assert res.summary["prefix_cache_hit_rate"] == pytest.approx(sum(hits) / sum(prompts))
    assert sum(hits) > 0


def test_cache_hit_shortens_prefill(llama8b, h100):
    bt = 16
    h = tuple(range(64))
    wl = chain_workload([1024, 1024], [h, h], block_tokens=bt)
    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {})
    df = Simulation([(sched, pool, cm)], wl, max_model_len=L).run().requests
    assert df.num_cached_tokens.tolist() == [0, 1008]
    assert df.ttft_s[1] < df.ttft_s[0] / 5


def test_disabled_cache_hits_nothing(llama8b, h100, hand_trace):
    prompts, hashes = hand_trace
    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {"enable_prefix_caching": False})
    res = Simulation([(sched, pool, cm)], chain_workload(prompts, hashes), max_model_len=L).run()
    assert res.requests.num_cached_tokens.sum() == 0 and "prefix_cache_hit_rate" not in res.summary


@pytest.mark.parametrize(
    "policy,flags",
    [("vllm", {"num_gpu_blocks_override": 60}), ("sglang", {"max_total_tokens": 1000, "chunked_prefill_size": 64})],
)
def test_eviction_under_pressure_keeps_invariants(llama8b, h100, hand_trace, policy, flags):
    prompts, hashes = hand_trace
    wl = chain_workload(prompts, hashes, gap=0.01)
    sched, pool, cm, L = build_engine(policy, llama8b, h100, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=L)
    res = sim.run()
    assert res.summary["completed"] == len(prompts) and sim.accounted()
    big_sched, big_pool, _, _ = build_engine(policy, llama8b, h100, 1, {})
    big = Simulation([(big_sched, big_pool, cm)], wl, max_model_len=L).run()
    assert res.summary["prefix_cache_hit_rate"] <= big.summary["prefix_cache_hit_rate"]
    assert pool.used == pool.cache.cached_blocks


def test_closed_loop_never_exceeds_concurrency(llama8b, h100):
    n, cap = 200, 7
    wl = Workload(np.zeros(n), np.full(n, 300), np.full(n, 40), closed_loop_concurrency=cap)
    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {})
    sim = Simulation([(sched, pool, cm)], wl, max_model_len=L)
    peak = []

    def monitor(env):
        while True:
            peak.append(sim.replicas[0].outstanding)
            yield env.timeout(0.005)

    sim.env.process(monitor(sim.env))
    res = sim.run(until=60)
    assert res.summary["completed"] == n
    assert max(peak) == cap
    df = res.requests.sort_values("arrival_s")
    times = np.r_[df.arrival_s.to_numpy(), df.finish_s.to_numpy()]
    delta = np.r_[np.ones(n), -np.ones(n)]
    order = np.lexsort((delta, times))
    assert np.cumsum(delta[order]).max() <= cap


def test_waiting_request_does_not_pin_its_prefix():
    """A request that is looked up but not admitted must leave its cached prefix evictable: here a
    preempted request needs 93 of 300 blocks while 208 are cached for a waiting prompt."""
    n = 37
    arrivals = np.zeros(n)
    arrivals[-3:] = [0.125, 0.3125, 0.5]
    prompts, outputs = np.ones(n, int), np.ones(n, int)
    prompts[-1], outputs[33] = 216, 93
    wl = Workload(arrivals, prompts, outputs, block_hashes=[()] * (n - 1) + [tuple(range(13))])
    flags = dict(max_num_batched_tokens=16, max_num_seqs=3, num_gpu_blocks_override=300, block_size=1)
    for ff in (True, False):
        sched, pool, cm, max_len = build_engine("vllm", load_model("llama-3.1-8b"), load_hardware("h100"), 1, flags)
        sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
        res = sim.run()
        assert res.summary["completed"] == n and sim.accounted()


def test_block_tokens_must_be_whole_engine_blocks():
    sched, pool, cm, max_len = build_engine(
        "vllm", load_model("llama-3.1-8b"), load_hardware("h100"), 1, {"block_size": 32}
    )
    wl = Workload([0.0], [100], [5], block_hashes=[(1, 2, 3)], block_tokens=16)
    with pytest.raises(InputError, match="block_tokens"):
        Simulation([(sched, pool, cm)], wl)


def test_fast_forward_exact_with_a_blocked_cached_head():
    """Hypothesis found this: whether the queue head can be admitted depends on its cache hit, which
    the fast-forward check must see as schedule() would, and lookups that are undone must leave the
    LRU clock alone (else stepping and fast-forward evict differently)."""
    arrivals = (
        [0.0] * 4
        + [0.16118258, 0.19540563, 0.22355779, 0.35479471, 0.35479471, 0.46153672, 0.49045849]
        + [0.50856691] * 12
        + [
            0.70364086,
            0.86995797,
            1.0094311,
            1.13298342,
            1.20332294,
            1.27332294,
            1.36636845,
            1.43302708,
            1.54441865,
            1.54441865,
            1.54441865,
            1.57393562,
            1.58833967,
            1.59960015,
        ]
    )
    prompts = [1, 1, 1, 571, 1623, 1, 443, 1, 303, 339, 640, 1, 1, 1, 1, 574, 955, 1392, 1, 1, 591, 681] + [1] * 15
    outputs = [
        1,
        1,
        1,
        1,
        143,
        184,
        70,
        152,
        95,
        1,
        62,
        71,
        1,
        1,
        89,
        23,
        156,
        167,
        170,
        1,
        143,
        1,
        106,
        1,
        1,
        1,
        1,
        1,
        1,
        1,
        1,
        15,
        68,
        54,
        32,
        24,
        19,
    ]
    wl = Workload(arrivals, prompts, outputs, [tuple(range(p // 32)) for p in prompts], 32)
    flags = dict(max_num_batched_tokens=53, max_num_seqs=11, num_gpu_blocks_override=1914, block_size=1)
    out = []
    for ff in (True, False):
        sched, pool, cm, max_len = build_engine("vllm", load_model("llama-3.1-8b"), load_hardware("h100"), 1, flags)
        out.append(Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=max_len).run())
    a, b = (r.requests for r in out)
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a[col].to_numpy(float), b[col].to_numpy(float), equal_nan=True), col
    assert out[0].summary["prefix_cache_hit_rate"] == out[1].summary["prefix_cache_hit_rate"] > 0


@settings(max_examples=200, deadline=None)
@given(
    reqs=st.lists(st.tuples(st.integers(1, 200), st.lists(st.integers(0, 2), max_size=14)), min_size=1, max_size=25),
    bt=st.sampled_from([8, 16]),
)
def test_match_is_the_longest_cached_whole_prefix(reqs, bt):
    """Ids drawn from {0, 1, 2}, so equal ids at one index often follow different prefixes: a hit
    needs the whole chain of blocks before it to match, as the full-tuple oracle says."""
    prompts = [p for p, _ in reqs]
    hashes = [tuple(h[: -(-p // bt)]) for p, h in reqs]
    cache = PrefixCache(bt, 1)
    for i, (p, h) in enumerate(zip(prompts, hashes)):
        req = Request(i, 0.0, p, 1, h)
        hit = cache.match(req)
        assert hit == expected_hit_tokens(prompts[: i + 1], hashes[: i + 1], bt)[-1]
        req.num_computed_tokens = p
        cache.release(req)
    assert cache.evictable_blocks == cache.cached_blocks


def test_a_failed_grow_evicts_nothing():
    """A blocked queue head must not evict the cache: stepping retries it every step, fast-forward
    skips those plans, and evictions that free too little would make the caches (and hits) differ."""
    arr = [
        0.14776,
        0.14776,
        0.400853,
        0.62055,
        0.905648,
        0.905648,
        1.059133,
        1.059133,
        1.059133,
        1.306037,
        1.306037,
        1.531506,
        1.531506,
        1.531506,
        1.628192,
        1.628192,
        1.628192,
        1.628192,
        1.7248,
    ]
    prompts = [1212, 23, 1396, 2639, 2661, 904, 1520, 1405, 2304, 926, 2079, 2130, 923, 2698, 2462, 217, 537, 2025, 257]
    outputs = [279, 90, 151, 260, 260, 43, 179, 297, 73, 18, 42, 39, 242, 187, 96, 37, 74, 65, 281]
    spec = [
        (0, 16, 37),
        (0, 0, 0),
        (1, 15, 43),
        (0, 19, 82),
        (0, 54, 83),
        (0, 8, 28),
        (0, 45, 47),
        (1, 27, 43),
        (0, 26, 72),
        (1, 12, 28),
        (0, 59, 64),
        (1, 3, 66),
        (0, 27, 28),
        (0, 2, 84),
        (1, 40, 76),
        (1, 3, 6),
        (0, 16, 16),
        (0, 26, 63),
        (1, 8, 8),
    ]
    hashes = [
        tuple([1000 * g + j for j in range(k)] + [10**6 + 1000 * i + j for j in range(nb - k)])
        for i, (g, k, nb) in enumerate(spec)
    ]
    wl = Workload(np.array(arr), prompts, outputs, block_hashes=hashes, block_tokens=32, closed_loop_concurrency=2)
    flags = dict(
        max_num_batched_tokens=500,
        max_num_seqs=19,
        num_gpu_blocks_override=138,
        block_size=16,
        max_model_len=8192,
        enable_prefix_caching=True,
    )
    out = []
    for ff in (True, False):
        sched, pool, cm, max_len = build_engine("nochunk", load_model("llama-3.1-8b"), load_hardware("h100"), 1, flags)
        out.append(
            Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len).run().requests
        )
    for col in ("first_token_s", "finish_s", "num_cached_tokens"):
        assert np.array_equal(out[0][col].to_numpy(float), out[1][col].to_numpy(float), equal_nan=True), col
