"""Arrivals folded into a run (simcore/fastforward/arrival_folds.py) against one-event-per-step stepping:
a sole replica in open loop admits each arrival inside the run under way, its chunks a lead in
the middle of the run. Per-request metrics and ITL histograms equal to the bit; the folds must
actually happen (counted), and where the hook cannot tell (SGLang, no chunking, a prefix cache,
a threshold, closed loop, several replicas) the runs end at the arrival as before."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from test_chunked_runs import assert_modes_agree, busy, chunky

from costmodel import load_hardware
from simcore.fastforward import arrival_folds, chunked
from workloads.workload import Workload


class FoldCounter:
    def __init__(self, monkeypatch):
        self.folded = self.whole = 0
        fold = arrival_folds._fold_arrival

        def counted(replica, *a):
            got = fold(replica, *a)
            if got is not None:
                self.folded += 1
                self.whole += got[-1] is not None
            return got

        monkeypatch.setattr(arrival_folds, "_fold_arrival", counted)
        self.handed, hand_over = 0, chunked._hand_over

        def handed(replica, plan, start, ends, gone):
            got = hand_over(replica, plan, start, ends, gone)
            self.handed += len(got) > len(ends)
            return got

        monkeypatch.setattr(chunked, "_hand_over", handed)


def short_outputs(n=200, rate=12.0, seed=5):
    """Prompts of one to four chunks, outputs as short as one token: joiners that finish inside
    the run, in its lead or right after it."""
    rng = np.random.default_rng(seed)
    return Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(1, 1800, n), rng.integers(1, 40, n))


def bursts(n=240, seed=6):
    """Arrivals in bursts of up to six at one instant: a queue forms, and each prompt's last chunk
    goes beside the next one's first (simcore/fastforward/chunked.py, _hand_over)."""
    rng = np.random.default_rng(seed)
    at = np.repeat(np.cumsum(rng.exponential(1.5, n)), rng.integers(1, 7, n))[:n]
    return Workload(at, rng.integers(100, 2500, n), rng.integers(1, 200, n))


VLLM = dict(max_num_batched_tokens=512, max_num_seqs=64, max_model_len=8192)
CASES = {
    "open loop": (dict(), busy(n=200, rate=2.0), None),
    "short outputs": (dict(), short_outputs(), None),
    "tight pool": (dict(num_gpu_blocks_override=500), busy(n=200, rate=3.0), None),
    "few seats": (dict(max_num_seqs=6), busy(n=200, rate=3.0), None),
    "synchronous scheduler": (dict(async_scheduling=False), short_outputs(seed=8), None),
    "no chunked prefill": (
        dict(enable_chunked_prefill=False, max_num_batched_tokens=8192),
        short_outputs(rate=20.0),
        None,
    ),
    "bursts": (dict(), bursts(), None),
    "bursts, tight pool": (dict(num_gpu_blocks_override=450), bursts(seed=7), None),
    "bursts, few seats": (dict(max_num_seqs=5), bursts(seed=9), None),
    "stopped at 21.5 s": (dict(), busy(n=200, rate=3.0), 21.5),
    "stopped at 9 s": (dict(), short_outputs(rate=15.0), 9.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vllm_folds_arrivals_exactly(case, monkeypatch):
    extra, wl, until = CASES[case]
    folds = FoldCounter(monkeypatch)
    res = assert_modes_agree("vllm", dict(VLLM, **extra), wl, until=until)
    if until is None:
        assert res.summary["completed"] == len(wl)
    assert folds.whole > len(wl) // 10, (folds.folded, folds.whole)
    if case.startswith("bursts"):  # plans with a queue hand P's last chunk over to the queue's head
        assert folds.handed > 5, folds.handed


FALLBACKS = {
    "vllm, threshold": ("vllm", dict(VLLM, long_prefill_token_threshold=200), busy(n=120, rate=2.0), 1),
    "vllm, prefix caching": ("vllm", dict(VLLM, enable_prefix_caching=True), busy(n=120, rate=2.0, shared=True), 1),
    "vllm, closed loop": ("vllm", VLLM, busy(n=120, concurrency=5), 1),
    "vllm, replicas": ("vllm", VLLM, busy(n=120, rate=5.0), 3),
    "sglang, open loop": (
        "sglang",
        dict(chunked_prefill_size=512, max_prefill_tokens=512, max_model_len=8192),
        busy(n=120, rate=2.0),
        1,
    ),
    "sglang, closed loop": (
        "sglang",
        dict(chunked_prefill_size=256, max_prefill_tokens=256, max_model_len=8192),
        busy(n=120, concurrency=4),
        1,
    ),
    "sglang, replicas": (
        "sglang",
        dict(chunked_prefill_size=256, max_prefill_tokens=256, max_model_len=8192),
        busy(n=120, rate=4.0),
        2,
    ),
    "nochunk, open loop": ("nochunk", dict(max_num_seqs=48, max_model_len=8192), short_outputs(n=120), 1),
    "nochunk, closed loop": ("nochunk", dict(max_num_seqs=48, max_model_len=8192), busy(n=120, concurrency=6), 1),
    "nochunk, replicas": ("nochunk", dict(max_num_seqs=48, max_model_len=8192), busy(n=120, rate=5.0), 3),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_no_fold_where_the_hook_cannot_tell(case, monkeypatch):
    policy, flags, wl, replicas = FALLBACKS[case]
    folds = FoldCounter(monkeypatch)
    res = assert_modes_agree(policy, flags, wl, replicas, "least_outstanding")
    assert res.summary["completed"] == len(wl)
    assert folds.folded == 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=chunky(),
    budget=st.integers(32, 1024),
    seqs=st.integers(1, 40),
    blocks=st.integers(150, 3000),
    block=st.sampled_from([1, 16, 32]),
    async_=st.booleans(),
    full_isl=st.booleans(),
    chunked=st.booleans(),
    until=st.sampled_from([None, None, 0.7, 2.5]),
)
def test_vllm_arrival_folds_match_stepping(wl, budget, seqs, blocks, block, async_, full_isl, chunked, until):
    flags = dict(
        max_num_batched_tokens=budget if chunked else 8192,
        max_num_seqs=min(seqs, budget),
        num_gpu_blocks_override=max(blocks // block, 1),
        block_size=block,
        max_model_len=8192,
        enable_prefix_caching=False,
        async_scheduling=async_,
        scheduler_reserve_full_isl=full_isl,
        enable_chunked_prefill=chunked,
    )
    assert_modes_agree("vllm", flags, wl, until=until)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(1e-5, 10.0), min_size=1, max_size=60), data=st.data())
def test_weighted_gaps_count_as_their_weight_in_single_adds(values, data):
    """A joiner's gaps go to the histogram as one weighted array (arrival_folds._admit_joins): the same
    bins, count and max as adding each value once per weight."""
    from simcore.histogram import LogHistogram

    weights = data.draw(st.lists(st.integers(1, 5), min_size=len(values), max_size=len(values)))
    a, b = LogHistogram(), LogHistogram()
    a.add_many([0.5, 0.25], 3)
    b.add_many([0.5, 0.25], 3)
    a.add_weighted(np.array(values), np.array(weights))
    for v, w in zip(values, weights):
        for _ in range(w):
            b.add(v)
    assert a.count == b.count and (a.counts == b.counts).all() and a.max == b.max
    assert a.total == pytest.approx(b.total, rel=1e-12)


def scene(seed: int, trial: int):
    """The `trial`-th of a seeded stream of random scenes: bursts of arrivals, any lengths, budgets
    from 64 to 2048, tight pools, few seats, both schedulers, full-ISL reservation on or off."""
    rng = np.random.default_rng(seed)
    for _ in range(trial + 1):
        n = int(rng.integers(50, 300))
        burst = rng.integers(1, int(rng.integers(1, 8)) + 1, n)
        at = np.repeat(np.cumsum(rng.exponential(rng.uniform(0.05, 1.5), n)), burst)[:n]
        wl = Workload(at, rng.integers(1, 3000, n), rng.integers(1, int(rng.integers(2, 400)), n))
        budget = int(rng.choice([64, 256, 512, 1024, 2048]))
        flags = dict(
            max_num_batched_tokens=budget,
            max_num_seqs=int(min(budget, rng.integers(2, 80))),
            max_model_len=8192,
            num_gpu_blocks_override=int(rng.integers(250, 3000)),
            block_size=int(rng.choice([1, 16, 32])),
            enable_prefix_caching=False,
            async_scheduling=bool(rng.integers(0, 2)),
            scheduler_reserve_full_isl=bool(rng.integers(0, 2)),
        )
        flags["num_gpu_blocks_override"] = max(flags["num_gpu_blocks_override"] * 16 // flags["block_size"], 200)
        until = None if rng.integers(0, 3) else float(at[n // 2])
    return wl, flags, until


@pytest.mark.parametrize("seed, trial", [(12, 33), (1, 7), (2, 21), (11, 3)])
def test_vllm_arrival_folds_in_random_scenes(seed, trial):
    """(12, 33): a request preempted before its first token is folded in from the queue later; its
    first scheduling stays the first (a stepping run found it)."""
    wl, flags, until = scene(seed, trial)
    assert_modes_agree("vllm", flags, wl, until=until)


FITTED = {
    "launch split (a100-sxm)": lambda: load_hardware("a100-sxm"),
    "launch split, host time (l40s)": lambda: load_hardware("l40s").replace(
        host_step_s=2e-3, host_per_seq_s=1e-5, host_per_prefill_seq_s=2e-4
    ),
    "gen split (b200)": lambda: load_hardware("b200"),
    "fitted attention, wave model (h100-sxm)": lambda: load_hardware("h100-sxm"),
}


@pytest.mark.parametrize("pricing", sorted(FITTED))
@pytest.mark.parametrize("case", ["open loop", "bursts, tight pool"])
def test_vllm_folds_arrivals_exactly_under_fitted_pricing(pricing, case, monkeypatch):
    """The folds' leads and hand-overs priced by the calibrated profiles' own kernels (unit decode
    splits, where a decode run may go from MMHA to XQA; fitted prefill attention; the GEMM tile
    model and residual field), still to the bit against stepping, and the folds happen."""
    import test_chunked_runs

    monkeypatch.setattr(test_chunked_runs, "HW", FITTED[pricing]())
    extra, wl, _ = CASES[case]
    folds = FoldCounter(monkeypatch)
    res = test_chunked_runs.assert_modes_agree("vllm", dict(VLLM, **extra), wl)
    assert res.summary["completed"] == len(wl)
    assert folds.whole >= 10, (folds.folded, folds.whole)  # slower GPUs on the tight pool: fewer pass the KV bound


@settings(max_examples=80, deadline=None)
@given(gaps=st.lists(st.floats(1e-5, 10.0), min_size=1, max_size=80), data=st.data())
def test_run_gap_weights_and_joiner_max_itl_match_one_by_one(gaps, data):
    """``weighted_gaps`` (marks: weight changes per gap) and ``_joiner_max_itl`` (one reduceat over
    interleaved ranges, a suffix maximum for ranges that reach the run's end) against adding each
    gap once per request that samples at both its ends and taking each range's max in Python."""
    from simcore.fastforward.arrival_folds import _joiner_max_itl, weighted_gaps
    from simcore.histogram import LogHistogram
    from simcore.request import Request

    n = len(gaps)
    spans = st.tuples(st.integers(0, n - 1), st.integers(1, n)).map(lambda p: (p[0], max(p[0] + 1, p[1])))
    segments = data.draw(st.lists(st.tuples(spans, st.integers(1, 6)), max_size=6))
    joiners = data.draw(st.lists(spans, max_size=12))
    marks, want = [], [0] * n
    for (a, b), w in segments:
        marks += (a, w, b, -w)
        for x in range(a, b):
            want[x] += w
    for a, b in joiners:
        marks += (a, 1, b, -1)
        for x in range(a, b):
            want[x] += 1
    got, ref = LogHistogram(), LogHistogram()
    if marks:
        weighted_gaps(got, list(gaps), marks)
    for v, w in zip(gaps, want):
        for _ in range(w):
            ref.add(v)
    assert got.count == ref.count and (got.counts == ref.counts).all() and got.max == ref.max
    reqs = [Request(i, 0.0, 1, 1) for i in range(len(joiners))]
    _joiner_max_itl(np.asarray(gaps), [a for a, _ in joiners], [b for _, b in joiners], reqs)
    assert [r.max_itl_s for r in reqs] == [max(gaps[a:b]) for a, b in joiners]


def short_bursts(n=240, seed=11, top=400):
    """Bursts of prompts shorter than the budget: the queue's head takes its whole prompt in one
    step and leaves the rest of the budget to the next (arrival_folds._fold_head), often beside a
    joiner's last chunk; some longer prompts among them."""
    rng = np.random.default_rng(seed)
    at = np.repeat(np.cumsum(rng.exponential(1.2, n)), rng.integers(1, 6, n))[:n]
    prompts = np.where(rng.random(n) < 0.8, rng.integers(1, top, n), rng.integers(top, 2500, n))
    return Workload(at, prompts, rng.integers(1, 120, n))


HEADS = {
    "short bursts": (dict(), short_bursts()),
    "short bursts, tight pool": (dict(num_gpu_blocks_override=260), short_bursts(seed=12)),
    "short bursts, few seats": (dict(max_num_seqs=4), short_bursts(seed=13)),
    "short bursts, synchronous": (dict(async_scheduling=False), short_bursts(seed=14)),
    "short bursts, budget 256": (dict(max_num_batched_tokens=256), short_bursts(seed=15, top=200)),
}


@pytest.mark.parametrize("case", sorted(HEADS))
def test_whole_prompts_in_one_step_fold_beside_the_next(case, monkeypatch):
    """The queue's head whose prompt fits in what the decodes leave folds as a head for the next
    arrival (the run goes on), or goes back to the queue's front when the next cannot fold: the
    same as stepping, and the path is taken (counted: folded heads not put back)."""
    extra, wl = HEADS[case]
    got = {"head": 0, "back": 0}
    fold_head, unfold = arrival_folds._fold_head, arrival_folds._unfold_head

    def head(replica, *a):
        r = fold_head(replica, *a)
        got["head"] += r is not None
        return r

    def back(replica, req):
        r = unfold(replica, req)
        got["back"] += r
        return r

    monkeypatch.setattr(arrival_folds, "_fold_head", head)
    monkeypatch.setattr(arrival_folds, "_unfold_head", back)
    res = assert_modes_agree("vllm", dict(VLLM, **extra), wl)
    assert res.summary["completed"] == len(wl)
    assert got["head"] - got["back"] >= 5, got
    if "seats" in case or "pool" in case:  # the next cannot always fold: the head goes back to the queue
        assert got["back"] > 0, got


@pytest.mark.parametrize("async_", [False, True])
def test_a_rejected_arrival_that_cut_a_joiners_prompt_ends_the_fold(async_):
    """A prompt folded into a run is cut short by the next arrival (its last chunk waits to go
    beside that arrival's first), and that arrival is rejected (longer than the pool): the run ends
    there, as stepping has it, rather than folding an arrival that is not queued."""
    wl = Workload(
        np.array([0.0] * 22 + [0.125, 0.25, 0.5]),
        np.array([1] * 22 + [636, 1152, 488]),
        np.array([1, 1, 1, 3, 1, 1, 1, 17, 1, 1, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 6, 1, 1, 1]),
        block_hashes=None,
        block_tokens=32,
        closed_loop_concurrency=None,
    )
    flags = dict(
        max_num_batched_tokens=32,
        max_num_seqs=2,
        num_gpu_blocks_override=37,
        block_size=32,
        max_model_len=8192,
        enable_prefix_caching=False,
        async_scheduling=async_,
        scheduler_reserve_full_isl=False,
        enable_chunked_prefill=True,
    )
    res = assert_modes_agree("vllm", flags, wl, until=None)
    assert res.summary["completed"] == len(wl) - 1  # the 1,152-token prompt does not fit 36 blocks of 32
