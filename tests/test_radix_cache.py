"""SGLang's radix cache (simcore/radix_cache.py): the rules of sglang/srt/mem_cache/radix_cache.py
one at a time, conservation under random operation sequences, and SGLang runs under KV pressure
whose fast-forward and cohort modes equal stepping to the bit while nodes are evicted."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.radix_cache import RadixCache
from simcore.replica import Replica
from simcore.request import Request
from simcore.simulation import Simulation
from workloads.workload import Workload

BT = 4


def req(rid, names, extra=1, outputs=1):
    """A request whose prompt is `names` full blocks plus `extra` tokens."""
    return Request(rid, 0.0, len(names) * BT + extra, outputs, block_hashes=tuple(names))


def computed(cache, r, tokens):
    """`r` admitted with its lookup, then computed up to `tokens` positions and checkpointed."""
    cache.match(r)
    r.num_computed_tokens = tokens
    return cache.checkpoint(r)


def finish(cache, r):
    r.num_output_tokens = r.output_len
    r.num_computed_tokens = r.num_tokens - 1
    return cache.release(r)


def test_eviction_frees_whole_nodes():
    """RadixCache.evict frees a leaf's whole run, however little was asked."""
    c = RadixCache(BT, BT)
    a = req(0, range(10))
    computed(c, a, a.prompt_len)
    finish(c, a)
    assert c.cached_blocks == 10 and c.evictable_blocks == 10
    assert c.evict(1) == 10 and c.cached_blocks == 0


def test_a_probe_that_is_not_admitted_splits_and_refreshes():
    """match_prefix splits the node where the match ends and stamps the path for LRU, whether or
    not the request is then admitted (unmatch undoes the pin only)."""
    c = RadixCache(BT, BT)
    a, b = req(0, range(10)), req(1, range(100, 106))
    for r in (a, b):
        computed(c, r, r.prompt_len)
        finish(c, r)
    probe = req(2, list(range(4)) + [999], extra=0)
    assert c.match(probe) == 4 * BT  # (prompt − 1) // BT = 4 blocks at most, and 4 are cached
    c.unmatch(probe)
    assert c.evict(1) == 6  # b is now the least recently used leaf: all of it
    assert c.evict(1) == 6  # then a's tail past the split, alone
    assert c.cached_blocks == 4
    assert c.match(req(3, range(10))) == 4 * BT


def test_a_finished_request_caches_its_outputs_as_their_own_leaf():
    """release_kv_cache checkpoints prompt and outputs (all but the last token), split at the
    prompt's end, so that eviction takes the outputs first."""
    c = RadixCache(BT, BT)
    a = req(0, range(3), extra=0, outputs=9)  # 12 prompt tokens, 8 computed outputs: 5 full blocks
    computed(c, a, a.prompt_len)
    assert finish(c, a) == 2
    assert c.cached_blocks == 5
    assert c.evict(1) == 2 and c.cached_blocks == 3
    again = Request(1, 0.0, 3 * BT + 1, 1, block_hashes=(0, 1, 2))
    assert c.match(again) == 3 * BT


def test_a_retracted_request_only_unpins():
    """release_kv_cache(checkpoint=False) (ScheduleBatch.release_req): nothing new goes in."""
    c = RadixCache(BT, BT)
    a, b = req(0, range(6)), req(1, range(6))
    computed(c, a, 3 * BT)  # a checkpointed 3 blocks
    c.match(b)
    b.num_computed_tokens = b.prompt_len
    assert c.release(b) == 0  # b retracted: its own 3 later blocks are not cached
    assert c.cached_blocks == 3 and c.evictable_blocks == 0  # a still pins its 3
    assert c.release(a) == 0 and c.evictable_blocks == 3


def test_checkpoint_frees_copies_of_what_the_tree_holds():
    c = RadixCache(BT, BT // 2)  # a cache block is two pool blocks
    a, b = req(0, range(5)), req(1, range(5))
    c.match(a)
    c.match(b)
    a.num_computed_tokens = b.num_computed_tokens = a.prompt_len
    assert c.checkpoint(a) == (10, 0)
    assert c.checkpoint(b) == (0, 10)
    assert c.shared_blocks(a) == c.shared_blocks(b) == 10


def test_lookups_refresh_lru_order():
    c = RadixCache(BT, BT)
    rs = [req(i, [10 * i + j for j in range(3)]) for i in range(3)]
    for r in rs:
        computed(c, r, r.prompt_len)
        finish(c, r)
    c.touch_prefix(req(9, [0, 1, 2]))  # the waiting-queue refresh (touch_waiting_prefix)
    assert c.evict(1) == 3
    assert c.match(req(10, [0, 1, 2])) == 3 * BT and c.match(req(11, [20, 21, 22])) == 3 * BT
    assert c.match(req(12, [10, 11, 12])) == 0


def _walk(node):
    yield node
    for ch in node.children.values():
        yield from _walk(ch)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 11), st.integers(0, 12), st.integers(1, 30)),
        min_size=1,
        max_size=60,
    ),
    engine=st.sampled_from([1, 2]),
)
def test_random_operations_conserve_blocks_and_pins(ops, engine):
    """Blocks in the tree = taken over − evicted; unpinned blocks and every node's pin count
    recomputed from the requests holding it; a held request's path stays cached; nodes stay
    O(operations), not O(blocks)."""
    c = RadixCache(BT, BT // engine)
    heads = [tuple(range(100 * h, 100 * h + 12)) for h in range(3)]
    live, reqs, taken, evicted, made = {}, 0, 0, 0, 0
    for op, who, length, want in ops:
        if op <= 1 and len(live) < 6:  # a new request looked up and admitted
            head = heads[who % 3][:length]
            r = req(
                reqs, head + tuple(range(10**6 + 100 * reqs, 10**6 + 100 * reqs + who)), extra=who % 3, outputs=want
            )
            reqs += 1
            c.match(r)
            r.num_computed_tokens = c.shared_blocks(r) // engine * BT
            live[r.rid] = r
            made += 1
        elif op == 2 and live:  # a chunk computed and checkpointed
            r = live[sorted(live)[who % len(live)]]
            r.num_computed_tokens = min(r.prompt_len, r.num_computed_tokens + want)
            a, d = c.checkpoint(r)
            taken += a
            made += 2
        elif op == 3 and live:  # finished or retracted
            r = live.pop(sorted(live)[who % len(live)])
            if want % 2:
                r.num_output_tokens = r.output_len
                r.num_computed_tokens = r.prompt_len + r.output_len - 1
                made += 3
            taken += c.release(r)
        elif op == 4:
            before = c.evictable_blocks
            got = c.evict(want)
            evicted += got
            assert got >= min(want, before) and c.evictable_blocks == before - got
        elif op == 5 and live:
            c.touch_prefix(live[sorted(live)[who % len(live)]])
            made += 1
        nodes = list(_walk(c.root))[1:]
        assert c.cached_blocks == taken - evicted == engine * sum(len(n.names) for n in nodes)
        assert c.evictable_blocks == engine * sum(len(n.names) for n in nodes if n.refs == 0)
        pins = {id(n): 0 for n in nodes}
        for r in live.values():
            x = r.cache_path
            while x is not c.root:
                pins[id(x)] += 1
                x = x.parent
        assert all(n.refs == pins[id(n)] for n in nodes)
        for r in live.values():
            x = r.cache_path
            while x is not c.root:
                assert x.parent.children[x.names[0]] is x
                x = x.parent
        assert len(nodes) <= made  # a walk splits at most one node, an insert adds at most a leaf more


MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def _run(flags, wl, ff):
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=ff, max_model_len=max_len)
    return sim, sim.run()


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("page", [1, 16])
def test_radix_under_kv_pressure_fast_forward_equals_stepping(mixed, page, monkeypatch):
    """SGLang with the radix cache on a pool that retracts and evicts: fast-forward and the decode
    cohort finish every request at the same time as stepping, to the bit."""
    freed, events = [], []
    evict, apply = RadixCache.evict, Replica._apply
    monkeypatch.setattr(RadixCache, "evict", lambda self, n: freed.append(evict(self, n)) or freed[-1])
    monkeypatch.setattr(Replica, "_apply", lambda self, *a: events.append(1) or apply(self, *a))
    rng = np.random.default_rng(6)
    n = 80
    prompts = rng.integers(50, 600, n)
    groups = rng.integers(0, 6, n)
    hashes = [
        tuple(1000 * int(g) + j for j in range(min(p // 32, 8)))
        + tuple(10**6 + 1000 * i + j for j in range(p // 32 - 8))
        for i, (g, p) in enumerate(zip(groups, prompts))
    ]  # 8 blocks shared in groups, the rest unique
    wl = Workload(
        np.cumsum(rng.exponential(0.01, n)),
        prompts,
        rng.integers(100, 600, n),
        block_hashes=hashes,
        block_tokens=32,
        ignore_eos=rng.random(n) < 0.2,
    )  # the others reserve new_token_ratio × their outputs
    flags = dict(
        chunked_prefill_size=256,
        max_prefill_tokens=1024,
        enable_mixed_chunk=mixed,
        page_size=page,
        max_total_tokens=4000,
        max_running_requests=48,
        disable_radix_cache=False,
        max_model_len=8192,
        disable_overlap_schedule=True,  # the overlap scheduler steps (policies/sglang_overlap.py)
    )
    sim, a = _run(flags, wl, True)
    fast = len(events)
    _, b = _run(flags, wl, False)
    assert sim.accounted()
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float), equal_nan=True), col
    for col in ("num_output_tokens", "num_preemptions", "num_cached_tokens"):
        assert a.requests[col].equals(b.requests[col]), col
    assert a.requests.num_preemptions.sum() > 0 and a.requests.num_cached_tokens.sum() > 0
    assert sum(f > 0 for f in freed) > 100
    assert fast < sim.replicas[0].num_iterations - 100  # runs of several steps were taken
