"""SGLang's radix cache for hybrid models (simcore/mamba_radix_cache.py) and the state pool
(policies/sglang_mamba.py): a prefix is reused only up to a held state; where extends leave
states (extra_buffer's branching point shadows the extend's end, no_buffer keeps every end);
evicted states go with their nodes; the memory split; a hybrid run's fast-forward equals stepping.
The tracking rule itself is checked against SGLang's own code in
tests/conformance/test_sglang_mamba.py."""

import pytest
from hypothesis import given, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from policies.sglang_config import SGLangConfig
from policies.sglang_mamba import mamba_pool, resolve_strategy, slots_per_request, state_bytes
from simcore.mamba_radix_cache import MambaRadixCache, checkpoint_grid, tracked_end
from simcore.radix_cache import RadixCache
from simcore.request import Request
from simcore.simulation import Simulation

BT = 64  # one block a grid: block ends are the grid's points


def req(rid, names, extra=1, outputs=1):
    return Request(rid, 0.0, len(names) * BT + extra, outputs, block_hashes=tuple(names))


def prefill(cache, r, ends):
    """`r` looked up, then extended chunk by chunk to each of `ends` (tokens), checkpointed after
    each (a chunk's stash, then the completed prefill's checkpoint)."""
    hit = cache.match(r)
    for e in ends:
        r.num_computed_tokens = e
        cache.checkpoint(r, e)
    return hit


def finish(cache, r):
    r.num_output_tokens = r.output_len
    r.num_computed_tokens = r.num_tokens - 1
    return cache.release(r)


def test_a_prefix_is_reused_up_to_the_deepest_state_only():
    """A's chunks leave states at 4 and 8 blocks (and its prompt's end): B, sharing 6 blocks,
    reuses 4; its KV hit ends at 6, the branching point. A plain radix cache gives B all 6."""
    a_names, b_names = list(range(10)), [*range(6), 100, 101, 102]
    for cache, want in ((MambaRadixCache(BT, BT, "extra_buffer", 64), 4), (RadixCache(BT, BT), 6)):
        a = req(1, a_names)
        prefill(cache, a, [4 * BT, 8 * BT, a.prompt_len])
        finish(cache, a)
        b = req(2, b_names)
        assert cache.match(b) == want * BT
    assert cache.cached_blocks > 0
    m = MambaRadixCache(BT, BT, "extra_buffer", 64)
    a = req(1, a_names)
    prefill(m, a, [4 * BT, 8 * BT, a.prompt_len])
    finish(m, a)
    b = req(2, b_names)
    m.match(b)
    assert m._branch[2] == 6 * BT


@pytest.mark.parametrize("strategy, reuse", [("extra_buffer", 6), ("no_buffer", 9)])
def test_extra_buffer_tracks_the_branching_point_instead_of_the_prompts_end(strategy, reuse):
    """B's one-extend prefill contains its branching point (6): extra_buffer snapshots the state
    there, not at B's prompt end, and inserts B's KV only that far; after B finishes, C (B's
    prompt and more) reuses 6 blocks and recomputes B's tail. no_buffer keeps B's end state."""
    cache = MambaRadixCache(BT, BT, strategy, 64)
    a = req(1, list(range(10)))
    prefill(cache, a, [4 * BT, a.prompt_len])
    finish(cache, a)
    b = req(2, [*range(6), 100, 101, 102])
    prefill(cache, b, [b.prompt_len])
    assert b.cache_path.end == (6 if strategy == "extra_buffer" else 9)
    finish(cache, b)
    c = req(3, [*range(6), 100, 101, 102, 200])
    assert cache.match(c) == reuse * BT
    if strategy == "no_buffer":
        assert cache.match(req(4, [*range(6), 300])) == 4 * BT  # A's chunk end, not the split at 6


def test_a_chunk_after_the_branching_point_keeps_its_own_end():
    """The branching point is consumed by the chunk that holds it: the next chunk's state is at its
    own end, so a later turn reuses the whole prompt."""
    cache = MambaRadixCache(BT, BT, "extra_buffer", 64)
    a = req(1, list(range(4)))
    prefill(cache, a, [a.prompt_len])
    finish(cache, a)
    b = req(2, [*range(3), *range(50, 60)])  # KV hit 3 blocks, state at 0... A's end is at 4
    assert cache.match(b) == 0 and cache._branch[2] == 3 * BT
    cache.unmatch(b)
    prefill(cache, b, [8 * BT, b.prompt_len])  # chunk 1 tracks 3 (branching), chunk 2 its end
    finish(cache, b)
    c = req(3, [*range(3), *range(50, 60), 400])
    assert cache.match(c) == 13 * BT


def test_evicted_states_go_with_their_nodes():
    cache = MambaRadixCache(BT, BT, "extra_buffer", 64)
    a = req(1, list(range(6)))
    prefill(cache, a, [a.prompt_len])
    finish(cache, a)
    assert cache.states
    cache.evict(10**6)
    assert cache.cached_blocks == 0 and not cache.states
    b = req(2, list(range(6)) + [7])
    assert cache.match(b) == 0


@given(
    st.integers(0, 10_000),
    st.integers(1, 50_000),
    st.one_of(st.none(), st.integers(0, 70_000)),
    st.sampled_from([64, 128, 256]),
)
def test_tracked_end_is_a_grid_point_inside_the_extend(prefix, extend, branching, grid):
    at = tracked_end(prefix, prefix + extend, branching, grid, "extra_buffer")
    if extend < grid:
        assert at is None
    else:
        assert prefix < at <= prefix + extend and (at - prefix) % grid == 0
    assert tracked_end(prefix, prefix + extend, branching, grid, "no_buffer") == prefix + extend


def test_strategy_resolution_and_refusals():
    assert resolve_strategy(SGLangConfig()) == "extra_buffer"  # overlap on by default
    assert resolve_strategy(SGLangConfig(disable_overlap_schedule=True)) == "no_buffer"
    assert resolve_strategy(SGLangConfig(disable_overlap_schedule=True, page_size=16)) == "extra_buffer"
    with pytest.raises(ValueError, match="mamba_radix_cache_strategy"):
        resolve_strategy(SGLangConfig(mamba_radix_cache_strategy="no_buffer"))  # needs no overlap
    with pytest.raises(ValueError, match="mamba_radix_cache_strategy"):
        resolve_strategy(SGLangConfig(mamba_radix_cache_strategy="ring"))
    assert checkpoint_grid(1) == 64 and checkpoint_grid(256) == 256 and checkpoint_grid(16) == 64


MODEL, HW = load_model("qwen3.5-122b-a10b"), load_hardware("h100")


def test_states_take_their_share_of_memory_first():
    """ratio / (1 + ratio) of what the weights leave goes to whole states (one of padding), the KV
    pool gets the rest; running requests are capped at slots // (3 + 2 ping-pong slots)."""
    per = state_bytes(MODEL, 8)
    assert per / 2**20 == pytest.approx(18.3, abs=0.05)  # 36 GDN layers: 8 heads of 128x128 fp32 + conv
    rest = 40e9
    p = mamba_pool(rest, per, slots_per_request(SGLangConfig(), "extra_buffer"))
    assert p.slots * per <= rest * 0.9 / 1.9 - per < (p.slots + 1) * per
    assert p.kv_bytes + (p.slots + 1) * per == pytest.approx(rest)
    assert p.max_running_requests == p.slots // 5
    sched, pool, cm, _ = build_engine("sglang", MODEL, HW, 8, {"chunked_prefill_size": 8192})
    dense, dpool, _, _ = build_engine("sglang", load_model("llama-3.1-8b"), HW, 1, {})
    assert sched.mamba == ("extra_buffer", 64) and dense.mamba is None
    assert sched.cfg.max_running_requests < 4096 == dense.cfg.max_running_requests
    with pytest.raises(ValueError, match="mamba state pool"):
        mamba_pool(1e6, per, 5)


def test_hybrid_run_fast_forward_equals_stepping():
    """The study's agentic sessions on the hybrid model: fast-forward finishes every request when
    stepping does, to the bit, with the state rule capping some lookups."""
    from experiments.sglang_chunk_study import agentic_workload

    w = agentic_workload(96, turns=6, concurrency=8, context=(4096, 12288), output_median=200.0)
    out = []
    for ff in (False, True):
        sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 8, {"chunked_prefill_size": 16384})
        res = Simulation([(sched, pool, cm)], w, fast_forward=ff, check=ff, max_model_len=max_len).run()
        df = res.requests
        out.append(list(zip(df.finish_s.tolist(), df.first_token_s.tolist())))
        assert res.summary["completed"] == 96
    assert out[0] == out[1]
    assert pool.cache.recomputed_blocks > 0  # some lookups were capped
