"""SGLang HiCache (simcore/hiradix_cache.py, policies/sglang_hicache.py, costmodel/host_tier.py):
the write policies' rules one at a time, the host tier's capacity and block conservation under
random operations, whole runs under KV pressure with the invariants checked every step, the
load-back's price from the model's own numbers, and the flags' errors."""

import pytest
from hypothesis import given, settings, strategies as st

from costmodel import load_hardware, load_model
from costmodel.errors import InputError
from costmodel.host_tier import WithHostLoads
from experiments.engines import build_cluster, build_engine
from simcore.hiradix_cache import HiRadixCache
from simcore.request import Request
from simcore.simulation import Simulation

BT = 4


def req(rid, names, extra=1, outputs=1):
    return Request(rid, 0.0, len(names) * BT + extra, outputs, block_hashes=tuple(names))


def done(cache, r):
    """`r` looked up, its whole prompt computed and checkpointed, then finished."""
    cache.match(r)
    cache.load_back(r)
    r.num_computed_tokens = r.prompt_len
    cache.checkpoint(r)
    r.num_output_tokens = r.output_len
    r.num_computed_tokens = r.num_tokens - 1
    return cache.release(r)


def test_write_through_backs_up_every_inserted_block_once():
    c = HiRadixCache(BT, BT, host_blocks=100, write_policy="write_through")
    done(c, req(0, range(10)))
    done(c, req(1, list(range(6)) + [50, 51]))  # shares 6 blocks with the first
    assert c.written_blocks == 12 and c.host_used_blocks == 12 and not c.host_only


def test_write_back_writes_only_what_the_device_evicts():
    c = HiRadixCache(BT, BT, host_blocks=100, write_policy="write_back")
    done(c, req(0, range(10)))
    assert c.written_blocks == 0
    assert c.evict(1) == 10
    assert c.written_blocks == 10 and len(c.host_only) == 10


def test_selective_writes_what_two_requests_computed():
    """write_through_selective: a node is written at its second hit, an insert by a request that
    computed it too; a request that matched it on the device does not hit it again."""
    c = HiRadixCache(BT, BT, host_blocks=100, write_policy="write_through_selective")
    done(c, req(0, range(10)))
    done(c, req(1, range(10)))  # matched on the device: no hit
    assert c.written_blocks == 0
    a, b = req(2, range(20, 30)), req(3, range(20, 30))
    for r in (a, b):  # both looked up before either computed: each computes all ten
        c.match(r)
    for r in (a, b):
        r.num_computed_tokens = r.prompt_len
        c.checkpoint(r)
    assert c.written_blocks == 10


def test_an_evicted_prefix_is_a_host_hit_and_loads_back():
    """After the device evicts a backed-up prefix, a lookup finds it on the host: it counts as
    cached, and load-back makes it device blocks pinned by the request."""
    c = HiRadixCache(BT, BT, host_blocks=100, write_policy="write_through")
    done(c, req(0, range(10)))
    c.evict(100)
    assert c.cached_blocks == 0
    r = req(1, list(range(10)) + [77])
    assert c.match(r) == 10 * BT and c.host_hit_blocks(r) == 10
    assert c.hit_tokens == 10 * BT
    assert c.load_back(r) == 10
    assert c.cached_blocks == 10 and c.evictable_blocks == 0 and c.pending_loads == [10]
    assert r.cache_path.end == 10 and not c.host_only


def test_an_unadmitted_host_hit_is_not_counted():
    c = HiRadixCache(BT, BT, host_blocks=100, write_policy="write_through")
    done(c, req(0, range(10)))
    c.evict(100)
    before = (c.hit_tokens, c.lookup_tokens)
    r = req(1, range(10))
    c.match(r)
    c.unmatch(r)
    assert (c.hit_tokens, c.lookup_tokens) == before
    assert c.host_hit_tokens == 0 and len(c.host_only) == 10


def test_a_full_host_drops_the_least_recently_demoted_and_never_a_device_copy():
    c = HiRadixCache(BT, BT, host_blocks=12, write_policy="write_through")
    done(c, req(0, range(10)))
    c.evict(100)  # 10 host-only names
    done(c, req(1, range(100, 108)))  # 8 new: 6 host-only names go, oldest first
    assert c.host_used_blocks == 12 and list(c.host_only) == [6, 7, 8, 9]
    done(c, req(2, range(200, 210)))  # room for 4 more only by dropping host-only names
    assert len(c.backed) == 12 and not c.host_only and c.written_blocks == 8 + 10 + 4


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(1, 12)), min_size=1, max_size=50),
    policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    host=st.integers(1, 40),
)
def test_random_operations_keep_the_host_within_capacity(ops, policy, host):
    """The host never holds more than its capacity; a name is host-only or device-backed, never
    both; every device-backed name is in the tree; blocks in the tree match its nodes."""
    c = HiRadixCache(BT, BT, host_blocks=host, write_policy=policy)
    rid = 0
    for op, who, n in ops:
        if op <= 1:
            done(c, req(rid, list(range(100 * who, 100 * who + n)) + [10**6 + rid]))
            rid += 1
        elif op == 2:
            c.evict(n)
        else:
            r = req(rid, range(100 * who, 100 * who + n))
            rid += 1
            c.match(r)
            c.unmatch(r)
        assert c.host_used_blocks <= host
        assert not (set(c.host_only) & c.backed)
        names = set()
        stack = [c.root]
        while stack:
            x = stack.pop()
            names.update(x.names)
            stack.extend(x.children.values())
        assert c.backed <= names and not (set(c.host_only) & names)
        assert c.cached_blocks == len(names)


MODEL, HW = load_model("qwen3.5-122b-a10b"), load_hardware("h100")


def test_load_back_price_from_the_model_config():
    """Qwen3.5-122B-A10B at tp 8: 12 full-attention layers × 2 KV heads (one per GPU) × 256 × 2 B × 2
    = 12,288 B a token per GPU; 36 GDN layers' fp32 state 64 heads × 128 × 128 and conv state
    (2·16·128 + 64·128) × 3 at bf16, over 8 GPUs; at 64 GB/s. The step waits max(compute, copy +
    compute / 48)."""
    _, _, cm, _ = build_engine("sglang", MODEL, HW, 8, {})
    loads = [[1000]]
    w = WithHostLoads(cm, lambda: loads.pop() if loads else [], 1)
    kv = 12 * 2 * 1 * 256 * 2
    state = 36 * (64 * 128 * 128 * 4 + (2 * 16 * 128 + 64 * 128) * 3 * 2) / 8
    copy = (1000 * kv + state) / 64e9
    base = cm.step_time([512], [0])
    assert w.step_time([512], [0]) == pytest.approx(max(base, copy + base / 48), rel=1e-12)
    assert w.step_time([512], [0]) == base  # nothing loaded for the next step


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_runs_under_kv_pressure_conserve_and_only_add_hits(policy):
    """A small device pool on a multi-turn workload: every request completes with the invariants
    checked each step, and the host tier adds prefix hits (write_through_selective none: no
    block here is computed twice)."""
    from experiments.sglang_chunk_study import agentic_workload

    w = agentic_workload(120, turns=6, concurrency=8, context=(4096, 8192), output_median=200.0)
    rates = []
    for hc in (False, True):
        flags = {"max_total_tokens": 150_000, "chunked_prefill_size": 8192}
        if hc:
            flags |= {"enable_hierarchical_cache": True, "hicache_write_policy": policy}
        engines, _, max_len = build_cluster("sglang", MODEL, HW, 8, flags)
        res = Simulation(engines, w, max_model_len=max_len, check=True).run()
        assert res.summary["completed"] == 120
        rates.append(res.summary["prefix_cache_hit_rate"])
        cache = engines[0][1].cache
    if policy == "write_through_selective":
        # a block is written at its second computation: here only what the hybrid model's cache has
        # a request recompute past its deepest state (simcore/mamba_radix_cache.py)
        assert cache.written_blocks <= cache.recomputed_blocks and rates[1] >= rates[0]
    else:
        assert cache.host_hit_tokens > 0 and cache.loaded_blocks > 0 and rates[1] > rates[0]


@pytest.mark.parametrize(
    "flags, field",
    [
        ({"enable_hierarchical_cache": True, "hicache_write_policy": "write_around"}, "hicache_write_policy"),
        ({"enable_hierarchical_cache": True, "hicache_io_backend": "direct"}, "hicache_io_backend"),
        ({"enable_hierarchical_cache": True, "hicache_ratio": 0.0}, "hicache_ratio"),
        ({"enable_hierarchical_cache": True, "disable_radix_cache": True}, "enable_hierarchical_cache"),
    ],
)
def test_bad_hicache_flags_name_the_field(flags, field):
    with pytest.raises(InputError) as e:
        build_engine("sglang", MODEL, HW, 8, flags)
    assert e.value.field == field


def test_hicache_under_dp_attention_is_refused():
    with pytest.raises(InputError) as e:
        build_cluster("sglang", MODEL, HW, 1, {"enable_dp_attention": True, "enable_hierarchical_cache": True}, 8)
    assert e.value.field == "enable_hierarchical_cache"


def test_a_load_back_keeps_its_host_blocks_while_the_device_evicts_for_it():
    """write_back with a full host: the eviction that makes room for a load-back demotes device
    blocks, which need host room; the blocks being loaded are not what gives way (SGLang pins the
    host match, _lock_node with lock_host)."""
    c = HiRadixCache(BT, BT, host_blocks=10, write_policy="write_back")
    done(c, req(0, range(10)))
    c.evict(100)  # the host is full of the first prompt
    done(c, req(1, range(50, 55)))
    r = req(2, list(range(10)) + [99])
    c.match(r)
    c.pin_host_hit(r)
    assert c.evict(5) == 5  # the second prompt finds no host room: lost, not written
    assert c.load_back(r) == 10 and c.written_blocks == 10 and c.cached_blocks == 10


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--policy", "sglang", "--hicache-write-policy", "write_around"], "--hicache-write-policy"),
        (["--policy", "sglang", "--hicache-io-backend", "direct"], "--hicache-io-backend"),
        (
            ["--engine-cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct --kv-offloading-size 64"],
            "--kv-offloading-size",
        ),
        (
            ["--engine-cmd", "python -m sglang.launch_server --model-path x --hicache-storage-backend file"],
            "--hicache-storage-backend",
        ),
    ],
)
def test_cli_refuses_in_one_line(argv, field):
    from tests.cli_helpers import assert_one_line_error

    assert_one_line_error(["simulate", *argv, "--num-prompts", "4"], field)
