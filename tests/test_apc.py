"""vLLM's automatic prefix caching (simcore/apc.py): the rules of vllm/v1/core/block_pool.py that
decide who hits what, and fast-forward and the decode cohort exact against stepping when
requests compute the same prefix at once."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.apc import BlockHashCache
from simcore.request import Request
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def computed(rid, hashes, bt=4, out=1):
    """A request whose prompt (len(hashes) full blocks and one token more) has just been prefilled."""
    r = Request(rid, 0.0, len(hashes) * bt + 1, out, block_hashes=tuple(hashes))
    return r


def admit(cache, req, run=True):
    """Looked up and admitted as schedule() admits; with `run`, its prefill scheduled too."""
    hit = cache.match(req)
    cache.touch(req)
    if run:
        prefill(cache, req)
    return hit


def prefill(cache, req):
    hit = req.num_cached_tokens
    req.num_computed_tokens = req.prompt_len
    req.num_blocks = -(-req.prompt_len // cache.engine_block_size) - hit // cache.engine_block_size
    req.num_blocks -= cache.publish_scheduled(req, req.num_computed_tokens)


@pytest.mark.parametrize("bt", [1, 4, 16])
def test_a_prefix_computed_twice_is_cached_twice_and_the_first_copy_hits(bt):
    """BlockHashToBlockMap NOTE #1: no dedup. Two requests that prefill one prompt at once both
    cache their blocks; a later request hits the first copy; it still hits once that is evicted."""
    cache = BlockHashCache(bt, bt)
    a, b = computed(0, [7, 8, 9], bt), computed(1, [7, 8, 9], bt)
    assert admit(cache, a, run=False) == 0 and admit(cache, b, run=False) == 0  # both before either is cached
    prefill(cache, a), prefill(cache, b)
    assert cache.cached_blocks == 6 and cache.evictable_blocks == 0
    first, second = list(a.cache_path), list(b.cache_path)
    c = computed(2, [7, 8, 9, 10], bt)
    assert admit(cache, c) == 3 * bt and c.cache_path[:3] == first
    for r in (c, a, b):
        cache.release(r)
    assert cache.evictable_blocks == cache.cached_blocks == 7
    assert cache.evict(4) == 4  # c's own block, then a's copies (freed when a left, after c)
    d = computed(3, [7, 8, 9, 11], bt)
    assert admit(cache, d) == 3 * bt and d.cache_path[:3] == second


def test_eviction_follows_the_free_order_tail_first():
    """free_blocks appends a request's cached blocks in reverse order: the last block of the first
    request freed goes first, and a block goes back to the queue's end each time it is freed."""
    cache = BlockHashCache(1, 1)
    a, b = computed(0, [1, 2, 3], 1), computed(1, [5, 6], 1)
    admit(cache, a), admit(cache, b)
    cache.release(a), cache.release(b)
    c = computed(2, [1, 9], 1)  # hits a's first block and frees it again, last
    assert admit(cache, c) == 1
    cache.release(c)
    evicted = []
    while cache.cached_blocks:
        before = set(cache._map)
        assert cache.evict(1) == 1
        evicted += list(before - set(cache._map))
    ka, kb, kc = chain(cache, a), chain(cache, b), chain(cache, c)
    assert evicted == [ka[2], ka[1], kb[1], kb[0], kc[1], ka[0]]


def chain(cache, req):
    keys, k = [], 0
    for i in range(len(req.block_hashes)):
        k = cache._key(req, i, k)
        keys.append(k)
    return keys


def test_a_lookup_that_is_not_admitted_moves_nothing():
    """vLLM's get_computed_blocks touches nothing: a request looked up and not admitted leaves every
    block where the frees put it, even a block freed by its last holder meanwhile."""
    cache = BlockHashCache(1, 1)
    old = computed(0, [40, 41], 1)
    admit(cache, old)
    cache.release(old)  # queued first
    a = computed(1, [1, 2], 1)
    admit(cache, a)
    w = computed(2, [1, 2, 3], 1)
    assert cache.match(w) == 2  # looked up while a still holds the blocks
    assert cache.evictable_blocks == 2  # old's: w's hits may not be handed out under it
    cache.release(a)  # a's blocks go to the queue's end now
    cache.unmatch(w)
    assert cache.evictable_blocks == 4
    assert cache.evict(2) == 2 and cache._key(a, 0, 0) in cache._map and cache._key(old, 0, 0) not in cache._map


@st.composite
def bursts(draw):
    """Requests in bursts of one instant, prompts drawn from a few shared prefixes (whole prompts
    equal too), so that several compute the same blocks in one step."""
    n = draw(st.integers(2, 24))
    groups = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 700), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    burst = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    gaps = [0.0 if b else 0.05 for b in burst]
    hashes = [tuple(1000 * g + j for j in range(p // 16)) for g, p in zip(groups, prompts)]
    return Workload(np.cumsum(gaps), prompts, outputs, block_hashes=hashes, block_tokens=16)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=bursts(),
    budget=st.sampled_from([16, 64, 256, 2048]),
    seqs=st.integers(1, 16),
    thr=st.sampled_from([0, 0, 16]),
    blocks=st.integers(50, 400),
    async_=st.booleans(),
)
def test_fast_forward_and_cohort_match_stepping_on_concurrent_prefixes(wl, budget, seqs, thr, blocks, async_):
    flags = dict(
        max_num_batched_tokens=budget,
        max_num_seqs=min(seqs, budget),
        long_prefill_token_threshold=thr,
        num_gpu_blocks_override=blocks,
        block_size=16,
        max_model_len=8192,
        async_scheduling=async_,
    )
    runs = []
    for ff, log in ((False, True), (True, True), (True, False)):  # stepping, fast-forward, cohort
        sched, pool, cm, max_len = build_engine("vllm", MODEL, HW, 1, flags)
        sim = Simulation(
            [(sched, pool, cm)], wl, fast_forward=ff, check=ff, max_model_len=max_len, record_iterations=log
        )
        runs.append((sim, sim.run()))
    (_, ref), *others = runs
    for sim, res in others:
        assert sim.accounted()
        for col in ("first_token_s", "finish_s", "max_itl_s"):
            x, y = res.requests[col].to_numpy(float), ref.requests[col].to_numpy(float)
            assert np.array_equal(x, y, equal_nan=True), col
        for col in ("num_output_tokens", "num_preemptions", "num_cached_tokens", "rejected"):
            assert res.requests[col].equals(ref.requests[col]), col
        assert res.summary["prefix_cache_hit_rate"] == ref.summary["prefix_cache_hit_rate"]
