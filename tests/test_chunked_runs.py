"""Runs that fold chunked prefills (simcore/fastforward/chunked.py) against one-event-per-step stepping: every
policy under chunk-sized budgets, open and closed loop, prefix caching, tight KV pools and
several replicas behind every router; per-request metrics and ITL histograms equal to the bit.
The folds must actually happen: the tests count the runs that take a chunked prefill's chunks
in one event."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from simcore.fastforward import arrival_folds, chunked
from simcore.simulation import Simulation
from workloads.workload import Workload

pytestmark = pytest.mark.usefixtures("sglang_non_overlap")  # the fast paths: SGLang's non-overlap loop

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
ROUTERS = ["round_robin", "least_outstanding", "least_kv", "prefix_affinity"]
COLUMNS = ("replica", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "max_itl_s")


class LeadCounter:
    """Counts the chunked leads of more than one step that fast-forward runs take (at a run's
    start, or mid-run for an arrival folded in: simcore/fastforward/arrival_folds.py)."""

    def __init__(self, monkeypatch):
        self.folded = self.with_finishes = 0
        lead_ends, lead_leavers, fold = chunked._lead_ends, chunked._lead_leavers, arrival_folds._fold_arrival

        def counted(replica, *a):
            ends = lead_ends(replica, *a)
            self.folded += len(ends) > 1
            return ends

        def folded(replica, *a):
            got = fold(replica, *a)
            if got is not None:
                self.folded += len(got[0]) > 1
                self.with_finishes += bool(got[1])  # decodes that finished inside it
            return got

        monkeypatch.setattr(arrival_folds, "_fold_arrival", folded)

        def leavers(replica, *a):
            out = lead_leavers(replica, *a)
            self.with_finishes += bool(out[2])
            return out

        monkeypatch.setattr(chunked, "_lead_ends", counted)
        monkeypatch.setattr(chunked, "_lead_leavers", leavers)


def run(policy, flags, wl, ff, replicas=1, router="round_robin", until=None):
    engines, route, max_len = build_cluster(policy, MODEL, HW, 1, flags, replicas, router)
    sim = Simulation(
        engines, wl, router=route if replicas > 1 else None, fast_forward=ff, check=ff, max_model_len=max_len
    )
    return sim, sim.run(until=until)


def assert_modes_agree(policy, flags, wl, replicas=1, router="round_robin", until=None):
    sim, a = run(policy, flags, wl, True, replicas, router, until)
    _, b = run(policy, flags, wl, False, replicas, router, until)
    assert sim.accounted()
    for col in COLUMNS:
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float), equal_nan=True), col
    for col in ("num_output_tokens", "num_preemptions", "num_cached_tokens", "rejected"):
        assert a.requests[col].equals(b.requests[col]), col
    for ra, rb in zip(a.replicas, b.replicas):
        assert ra.itl.count == rb.itl.count and (ra.itl.counts == rb.itl.counts).all()
    return a


@settings(max_examples=80, deadline=None)
@given(
    m=st.integers(0, 60),
    qs=st.lists(st.integers(1, 2048), min_size=1, max_size=8),
    kv=st.integers(0, 30000),
    decode_kv=st.integers(0, 200),
    variant=st.sampled_from(
        [
            {},
            {"kernel_floor_s": 4e-5, "kernel_overhead_s": 3e-6},
            {"roofline_combine": "quadrature", "gemm_tile_rows": 64},
            {"beta_attn": 1e16},
        ]
    ),
    model=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b"]),
    stop_at=st.integers(0, 8),
    sealed=st.integers(0, 8),
)
def test_prefill_lead_ends_are_stepping_sums(m, qs, kv, decode_kv, variant, model, stop_at, sealed):
    """A lead's step j priced as stepping prices it, every decode an explicit sequence of one new
    token: the clock after each step, to the bit; steps past `sealed` only if they start before stop."""
    from costmodel import CostModel

    cm = CostModel(load_model(model), HW.replace(**variant))
    kvs = [decode_kv + 3 * i for i in range(m)]  # the decodes' KV at step 0 (Σ(kv + 1) grows by m a step)
    t, want, p = 7.5, [7.5], kv
    for j in range(1, len(qs)):
        t += cm.time(cm.shape([1] * m + [qs[j]], [x + j for x in kvs] + [p]))
        want.append(t)
        p += qs[j]
    base = sum(kvs) + m
    assert cm.prefill_lead_ends(m, base, qs, kv, 7.5) == want[1:]
    stop = want[min(stop_at, len(want) - 1)]
    got = cm.prefill_lead_ends(m, base, qs, kv, 7.5, stop, sealed)
    started = [j for j in range(1, len(qs)) if want[j - 1] < stop or j <= sealed]
    assert got == want[1 : 1 + len(got)] and len(got) == next(
        (j - 1 for j in range(1, len(qs)) if j not in started), len(qs) - 1
    )


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(0, 30),
    head=st.lists(st.tuples(st.integers(2, 1500), st.integers(0, 9000)), max_size=3),
    qs=st.lists(st.integers(1, 2048), min_size=1, max_size=6),
    kv=st.integers(0, 30000),
    decode_kv=st.integers(0, 200),
    variant=st.sampled_from(
        [
            {},
            {"kernel_floor_s": 4e-5, "kernel_overhead_s": 3e-6},
            {"roofline_combine": "quadrature", "gemm_tile_rows": 64},
            {"host_step_s": 3e-3, "host_per_prefill_seq_s": 2e-4},
        ]
    ),
    hardware=st.sampled_from(["h100", "h100-sxm"]),
)
def test_a_leads_first_step_prices_planned_last_chunks_as_stepping(m, head, qs, kv, decode_kv, variant, hardware):
    """Step 0 of a lead priced with its chunks: P's chunk beside m decodes and the `head`, last
    chunks of other prompts taking q > 1 in that step only, decodes after it; every step's clock
    as stepping gets it from the explicit batch, to the bit."""
    from costmodel import CostModel

    cm = CostModel(load_model("llama-3.1-8b"), load_hardware(hardware).replace(**variant))
    kvs = [decode_kv + 3 * i for i in range(m)]
    t, want, p = 2.25, [], kv
    for j in range(len(qs)):
        first = [(hq, hkv) for hq, hkv in head] if j == 0 else [(1, hkv + hq + j - 1) for hq, hkv in head]
        batch = [(1, x + j) for x in kvs] + first + [(qs[j], p)]
        t += cm.time(cm.shape([q for q, _ in batch], [x for _, x in batch]))
        want.append(t)
        p += qs[j]
    others = len(kvs) + len(head)
    base = sum(x + 1 for x in kvs) + sum(hq + hkv for hq, hkv in head)  # Σ(kv + q) of the others in step 0
    got = cm.prefill_lead_ends(others, base - others, [0] + qs, kv, 2.25, sealed=len(qs), head=tuple(head))
    assert got == want


@st.composite
def chunky(draw):
    """Prompts of several chunks at the budgets drawn below, some sharing a prefix."""
    n = draw(st.integers(2, 30))
    gaps = draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 150), min_size=n, max_size=n))
    groups = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    shared = draw(st.booleans())
    hashes = [(g,) * (p // 32) for g, p in zip(groups, prompts)]
    concurrency = draw(st.sampled_from([None, None, 1, 3]))
    return Workload(
        np.cumsum(gaps),
        prompts,
        outputs,
        block_hashes=hashes if shared else None,
        block_tokens=32,
        closed_loop_concurrency=concurrency,
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=chunky(),
    budget=st.integers(32, 1024),
    seqs=st.integers(1, 40),
    thr=st.sampled_from([0, 0, 0, 48, 300]),
    blocks=st.integers(150, 3000),
    block=st.sampled_from([1, 16, 32]),
    replicas=st.sampled_from([1, 1, 2, 3]),
    router=st.sampled_from(ROUTERS),
    caching=st.booleans(),
)
def test_vllm_chunked_runs_match_stepping(wl, budget, seqs, thr, blocks, block, replicas, router, caching):
    flags = dict(
        max_num_batched_tokens=budget,
        max_num_seqs=min(seqs, budget),
        long_prefill_token_threshold=thr,
        num_gpu_blocks_override=max(blocks // block, 1),
        block_size=block,
        max_model_len=8192,
        enable_prefix_caching=caching,
    )
    assert_modes_agree("vllm", flags, wl, replicas, router)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=chunky(),
    chunk=st.sampled_from([64, 256, 512]),
    mixed=st.booleans(),
    page=st.sampled_from([1, 16]),
    total=st.integers(3000, 40000),
    running=st.integers(1, 40),
    radix=st.booleans(),
    replicas=st.sampled_from([1, 2]),
    router=st.sampled_from(ROUTERS),
)
def test_sglang_chunked_runs_match_stepping(wl, chunk, mixed, page, total, running, radix, replicas, router):
    flags = dict(
        chunked_prefill_size=chunk,
        max_prefill_tokens=chunk,
        enable_mixed_chunk=mixed,
        page_size=page,
        max_total_tokens=total,
        max_running_requests=running,
        disable_radix_cache=not radix,
        max_model_len=8192,
    )
    assert_modes_agree("sglang", flags, wl, replicas, router)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=chunky(),
    cap=st.sampled_from([0, 600, 2000]),
    seqs=st.integers(1, 40),
    blocks=st.integers(300, 3000),
    caching=st.booleans(),
    replicas=st.sampled_from([1, 2]),
)
def test_nochunk_runs_match_stepping(wl, cap, seqs, blocks, caching, replicas):
    flags = dict(
        max_num_batched_tokens=cap,
        max_num_seqs=seqs,
        num_gpu_blocks_override=blocks // 16,
        block_size=16,
        max_model_len=8192,
        enable_prefix_caching=caching,
    )
    assert_modes_agree("nochunk", flags, wl, replicas, "least_outstanding")


def busy(n=160, rate=4.0, seed=3, concurrency=None, shared=False):
    rng = np.random.default_rng(seed)
    prompts = rng.integers(300, 3000, n)
    hashes = (
        [
            (int(g),) * min(p // 32, 12) + tuple(range(1000 * i, 1000 * i + p // 32 - 12))  # a 384-token shared prefix
            for i, (g, p) in enumerate(zip(rng.integers(0, 4, n), prompts))
        ]
        if shared
        else None
    )
    return Workload(
        np.cumsum(rng.exponential(1 / rate, n)),
        prompts,
        rng.integers(20, 300, n),
        block_hashes=hashes,
        block_tokens=32,
        closed_loop_concurrency=concurrency,
    )


CASES = {
    "open loop": (dict(), busy(), 1, "round_robin"),
    "closed loop": (dict(), busy(concurrency=6), 1, "round_robin"),
    "prefix caching": (dict(enable_prefix_caching=True), busy(shared=True), 1, "round_robin"),
    "tight pool": (dict(num_gpu_blocks_override=400), busy(rate=8.0), 1, "round_robin"),
    "threshold": (dict(long_prefill_token_threshold=200), busy(), 1, "round_robin"),
    "replicas, least_kv": (dict(), busy(rate=10.0), 3, "least_kv"),
    "replicas, closed loop, caching": (
        dict(enable_prefix_caching=True),
        busy(concurrency=8, shared=True),
        2,
        "least_outstanding",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllm_folds_chunked_prefills_exactly(case, monkeypatch):
    """Each kind of run takes chunked prefills in one event many times, and agrees with stepping."""
    extra, wl, replicas, router = CASES[case]
    leads = LeadCounter(monkeypatch)
    flags = dict(max_num_batched_tokens=512, max_num_seqs=64, max_model_len=8192, **extra)
    res = assert_modes_agree("vllm", flags, wl, replicas, router)
    assert res.summary["completed"] == len(wl)
    assert leads.folded > len(wl) // 4, leads.folded
    if replicas == 1 and not wl.closed_loop_concurrency:  # open loop: decodes finishing inside a lead fold too
        assert leads.with_finishes > 0


SGLANG_CASES = {
    "open loop": (dict(), busy(rate=2.0), 1, "round_robin"),
    "closed loop, radix cache": (dict(), busy(concurrency=4, shared=True), 1, "round_robin"),
    "tight pool": (dict(max_total_tokens=12000), busy(rate=3.0), 1, "round_robin"),
    "replicas, least_kv": (dict(), busy(rate=5.0), 3, "least_kv"),
}


@pytest.mark.parametrize("case", sorted(SGLANG_CASES))
def test_sglang_folds_prefill_batches_exactly(case, monkeypatch):
    """SGLang's chunked request alone, batch after batch while the decodes sit out: one event."""
    extra, wl, replicas, router = SGLANG_CASES[case]
    leads = LeadCounter(monkeypatch)
    flags = dict(chunked_prefill_size=256, max_prefill_tokens=256, max_model_len=8192, **extra)
    res = assert_modes_agree("sglang", flags, wl, replicas, router)
    assert res.summary["completed"] == len(wl)
    assert leads.folded > len(wl) // 4, leads.folded


@pytest.mark.parametrize("until", [5.0, 13.37, 30.0])
def test_stopping_inside_a_chunked_lead(until):
    """run(until=t) cuts a lead in flight where stepping stands at t, chunks and first tokens alike."""
    flags = dict(max_num_batched_tokens=256, max_num_seqs=64, max_model_len=8192)
    for replicas in (1, 3):
        a = assert_modes_agree("vllm", flags, busy(rate=6.0), replicas, "least_kv", until=until)
        assert a.requests.num_output_tokens.sum() > 100


SHARED = Path(__file__).resolve().parents[2] / "shared/data/traces"


@pytest.mark.skipif(not (SHARED / "vidur_splitwise_conv_10k_qps2.csv").is_file(), reason="needs the shared traces")
def test_vidur_workload_example_is_the_benchmark_workload():
    """experiments/examples/vidur_workload.yaml builds the stream, model and engine the benchmark
    times: the same 10,000 requests with the trace's own lengths and arrival gaps (a replayed
    trace starts at 0; the benchmark keeps Vidur's stamps, 0.51 s later)."""
    from experiments.experiment_file import build_workload, effective, load_experiment

    cfg = effective(load_experiment(Path(__file__).parents[1] / "experiments/examples/vidur_workload.yaml"), {})
    wl = build_workload(cfg)
    t = pd.read_csv(SHARED / "vidur_splitwise_conv_10k_qps2.csv")
    stamps = t.arrived_at.to_numpy()
    assert len(wl) == 10_000 and np.allclose(wl.arrival_s, stamps - stamps[0], rtol=0, atol=1e-9)
    assert np.array_equal(wl.prompt_len, t.num_prefill_tokens) and np.array_equal(wl.output_len, t.num_decode_tokens)
    assert (cfg["hardware"], cfg["tp"], cfg["policy"]) == ("a100-80gb", 2, "vllm")
    assert cfg["engine"]["max_num_batched_tokens"] == 512 and cfg["engine"]["max_num_seqs"] == 128
    assert load_model(cfg["model"]).L == 48


PRICINGS = {
    "fitted attention, wave model": lambda: load_hardware("h100-sxm"),
    "host time per step": lambda: HW.replace(host_step_s=4e-3, host_per_seq_s=2e-5, host_per_prefill_seq_s=3e-4),
    "quadrature, floors": lambda: HW.replace(
        roofline_combine="quadrature", kernel_floor_s=4e-5, kernel_overhead_s=3e-6
    ),
    "unit decode model": lambda: load_hardware("l40s"),
    "unit decode model, host time": lambda: load_hardware("b200").replace(host_step_s=2e-3, host_per_seq_s=1e-5),
}
POLICY_FLAGS = {
    "vllm": dict(max_num_batched_tokens=384, max_num_seqs=48, max_model_len=8192),
    "sglang": dict(chunked_prefill_size=256, max_prefill_tokens=256, max_model_len=8192),
    "nochunk": dict(max_num_seqs=48, max_model_len=8192),
}


@pytest.mark.parametrize("pricing", sorted(PRICINGS))
@pytest.mark.parametrize("policy", sorted(POLICY_FLAGS))
def test_chunked_runs_match_stepping_under_every_pricing(policy, pricing, monkeypatch):
    """A lead's first step is priced with its chunks (the decodes beside it as one sum, as the
    cohort is): equal to stepping's explicit batch under fitted attention, host time and floors
    too, in open loop (one replica, and three behind a router) and closed loop."""
    monkeypatch.setitem(globals(), "HW", PRICINGS[pricing]())
    leads = LeadCounter(monkeypatch)
    for wl, replicas in ((busy(n=90, rate=5.0), 1), (busy(n=90, concurrency=5), 1), (busy(n=90, rate=12.0), 3)):
        res = assert_modes_agree(policy, POLICY_FLAGS[policy], wl, replicas, "least_outstanding")
        assert res.summary["completed"] == len(wl)
    if policy != "nochunk":
        assert leads.folded > 60, leads.folded


CUT_CASES = {
    "open loop": (dict(), busy(rate=12.0), 3, "least_outstanding"),
    "closed loop": (dict(), busy(concurrency=9), 3, "least_outstanding"),
    "prefix caching": (dict(caching=True), busy(rate=10.0, shared=True), 2, "prefix_affinity"),
    "tight pool": (dict(tight=True), busy(rate=16.0), 3, "round_robin"),
}
TIGHT = {
    "vllm": dict(num_gpu_blocks_override=700),
    "sglang": dict(max_total_tokens=11000),
    "nochunk": dict(num_gpu_blocks_override=700),
}


@pytest.mark.parametrize("case", sorted(CUT_CASES))
@pytest.mark.parametrize("policy", sorted(POLICY_FLAGS))
def test_runs_cut_by_routed_arrivals_match_stepping(policy, case, monkeypatch):
    """Behind a router a request routed to a replica mid-run cuts the run after the step under
    way (Replica._cut moves the wait, no interrupt), and a plan of one request has its first step
    priced as a one-chunk lead; both happen many times and agree with stepping to the bit."""
    from costmodel import CostModel
    from simcore.replica import Replica

    extra, wl, replicas, router = CUT_CASES[case]
    counts = {"cuts": 0, "single": 0}
    cut, lead_ends = Replica._cut, CostModel.prefill_lead_ends

    def counted_cut(replica):
        counts["cuts"] += 1
        cut(replica)

    def counted_lead(cm, m, d, qs, *a, **k):
        counts["single"] += type(qs) is tuple
        return lead_ends(cm, m, d, qs, *a, **k)

    monkeypatch.setattr(Replica, "_cut", counted_cut)
    monkeypatch.setattr(CostModel, "prefill_lead_ends", counted_lead)
    flags = dict(POLICY_FLAGS[policy], **(TIGHT[policy] if extra.get("tight") else {}))
    if extra.get("caching") and policy != "sglang":
        flags["enable_prefix_caching"] = True
    res = assert_modes_agree(policy, flags, wl, replicas, router)
    assert res.summary["completed"] == len(wl)
    assert counts["cuts"] > 10 and counts["single"] > 0, counts


def _finishers_tie(variant):
    """Hypothesis' falsifying examples: closed loop, requests 14-16 finish in one mixed step, 14 a
    decode riding the cohort, 15-16 on their extend; 19 later shares 14's (2, 2) prefix."""
    prompts = [1, 1, 1, 1, 1, 640, 608, 1, 1, 163, 31, 1, 1, 1, 96, 1, 864, 1, 2047] + ([96, 597], [95, 640])[variant]
    outputs = ([47, 48, 3, 34, 12], [33, 34, 2, 21, 12])[variant] + [1] * 9 + [2] + [1] * 6
    hashes = [()] * 5 + [(0,) * 20, (0,) * 19, (), (), (0,) * 5, (), (), (), (), (2,) * 3, (), (0,) * 27, (), (1,) * 63]
    hashes += [((2,) * 3, (0,) * 18), ((2,) * 2, (0,) * 20)][variant]
    return Workload(np.zeros(21), prompts, outputs, block_hashes=hashes, block_tokens=32, closed_loop_concurrency=3)


@pytest.mark.parametrize("variant", [0, 1])
def test_sglang_same_step_finishers_leave_in_batch_order(variant):
    """Finishers of one step go into the radix tree in SGLang's batch order (the step's extends, then
    its decodes, the cohort's among them by queue order), which decides what the next eviction takes:
    fast-forward agrees with stepping, and request 19 finds 14's prefix still cached."""
    flags = dict(
        chunked_prefill_size=256,
        max_prefill_tokens=256,
        enable_mixed_chunk=True,
        page_size=1,
        max_total_tokens=3000,
        max_running_requests=3,
        disable_radix_cache=False,
        max_model_len=8192,
    )
    res = assert_modes_agree("sglang", flags, _finishers_tie(variant))
    assert res.requests["num_cached_tokens"].iloc[19] == 64


def _radix_releases(flags, wl, ff, monkeypatch):
    from simcore.radix_cache import RadixCache

    got, release = [], RadixCache.release

    def logged(cache, req):
        got.append(req.seq)
        return release(cache, req)

    with pytest.MonkeyPatch.context() as mp:  # undone alone (not the module's sglang_non_overlap)
        mp.setattr(RadixCache, "release", logged)
        run("sglang", flags, wl, ff)
    return got


RELEASE_CASES = {  # (arrivals, outputs, max_running_requests); every prompt one token
    "a decode beside the cohort": ([0] * 5 + [0.01] + [0.02] * 8, [1] * 5 + [3] + [1] * 6 + [2, 1], 2),
    "finishes through a run": ([0, 0.01, 0.01] + [0.11] * 11, [18, 3, 2] + [1] * 11, 3),
}


@pytest.mark.parametrize("case", sorted(RELEASE_CASES))
def test_sglang_radix_releases_in_stepping_order(case, monkeypatch):
    """Finished requests go into the radix tree in the order stepping puts them there (each step's in
    batch order; the tree's LRU order follows it): a decode outside the cohort finishing beside
    cohort members, and requests finishing at different steps of one run (Hypothesis examples)."""
    arrivals, outputs, running = RELEASE_CASES[case]
    wl = Workload(np.array(arrivals), [1] * len(outputs), outputs, block_hashes=[()] * len(outputs), block_tokens=32)
    flags = dict(
        chunked_prefill_size=64,
        max_prefill_tokens=64,
        enable_mixed_chunk=False,
        page_size=1,
        max_total_tokens=2000,
        max_running_requests=running,
        disable_radix_cache=False,
        max_model_len=8192,
    )
    want = _radix_releases(flags, wl, False, monkeypatch)
    assert len(want) == len(wl) and _radix_releases(flags, wl, True, monkeypatch) == want


@pytest.mark.parametrize("page,chunk", [(1, 64), (1, 256), (16, 64)])
def test_sglang_checkpoint_inside_a_run_is_seen_by_a_kv_router(page, chunk):
    """A prompt whose prefix the radix tree already holds completes in a run's first step; its
    checkpoint at the next schedule frees its copy. A router that reads KV usage mid-run (least_kv)
    then routes as it would beside stepping: such a plan is not fast-forwarded past its first step."""
    hashes = [(), (), (0, 0), (), (), (0,), (), (), (0,)] + [()] * 7
    wl = Workload(
        np.array([0.0] * 3 + [0.25] * 6 + [0.265625] * 7),
        np.array([1, 1, 64, 1, 1, 32, 1, 1, 32] + [1] * 7),
        np.array([1, 1, 1, 1, 1, 1, 2, 2, 2] + [1] * 7),
        block_hashes=hashes,
        block_tokens=32,
        closed_loop_concurrency=None,
    )
    flags = dict(
        chunked_prefill_size=chunk,
        max_prefill_tokens=chunk,
        enable_mixed_chunk=False,
        page_size=page,
        max_total_tokens=3000,
        max_running_requests=3,
        disable_radix_cache=False,
        max_model_len=8192,
    )
    assert_modes_agree("sglang", flags, wl, 2, "least_kv")
