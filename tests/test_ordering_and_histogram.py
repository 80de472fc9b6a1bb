"""Same-timestamp ordering (an arrival at t joins the batch planned at t) and the ITL histogram."""

import numpy as np
import pytest

from experiments.engines import build_engine
from simcore.histogram import LogHistogram
from simcore.simulation import Simulation, fixed_workload


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize("ff", [True, False])
def test_arrival_at_a_step_boundary_joins_that_plan(llama8b, h100, policy, ff):
    sched, pool, cm, L = build_engine(policy, llama8b, h100, 1, {})
    prefill = cm.time(cm.shape([500], [0]))
    decode = cm.time(cm.shape([1], [500]))
    boundary = prefill + decode  # end of A's first decode step, computed independently
    wl = fixed_workload([0.0, boundary, boundary + 1e-9], [500, 500, 500], [50, 50, 50])
    df = Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=L).run().requests
    assert df.first_scheduled_s[1] == pytest.approx(boundary, abs=1e-12)
    assert df.first_scheduled_s[2] > boundary + 1e-9  # a hair later waits for the step in progress


def test_histogram_quantiles_match_numpy_within_bin_width():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.lognormal(-4.5, 0.4, 50000), rng.lognormal(-1.5, 0.3, 500)])
    h = LogHistogram()
    h.add_many(x[:30000])
    for v in x[30000:]:
        h.add(float(v))
    for q in (0.5, 0.9, 0.99, 0.999):
        assert h.quantile(q) == pytest.approx(np.quantile(x, q, method="lower"), rel=2e-3)
    assert h.count == len(x) and h.max == x.max() and h.mean == pytest.approx(x.mean(), rel=1e-12)


@pytest.mark.parametrize("lo, hi, per_decade", [(1e-6, 1e5, 2000), (1e-3, 10.0, 50), (2.5e-7, 3e3, 333)])
def test_bins_are_the_log_formula_to_the_bit(lo, hi, per_decade):
    """The table lookup against floor(log10(x / lo) * per_decade) + 1, clipped, on random values
    over and past the range and on each bin's edge and the floats either side of it."""
    h = LogHistogram(lo, hi, per_decade)
    edges = lo * 10.0 ** (np.arange(h.nbins - 1) / per_decade)
    rng = np.random.default_rng(per_decade)
    x = np.concatenate(
        [
            10 ** rng.uniform(np.log10(lo) - 2, np.log10(hi) + 2, 200_000),
            edges,
            np.nextafter(edges, 0),
            np.nextafter(edges, np.inf),
            [0.0, 5e-324, lo, hi, np.inf],
        ]
    )
    with np.errstate(divide="ignore"):
        formula = np.clip(np.floor(np.log10(x / lo) * per_decade), -1, h.nbins - 2).astype(np.int64) + 1
    assert np.array_equal(h._index(x.copy()), formula)
    assert list(h._index(np.array([-1.0, -np.inf, np.nan]))) == [0, 0, h.nbins - 1]


@pytest.mark.parametrize("how", ["add", "add weighted", "list", "array", "array weighted", "per-value weights"])
def test_a_nan_latency_is_an_error_not_a_bin(how):
    """A NaN among many values (one add's, or in a bulk add, with or without weights) is reported
    when the histogram is read, however it was added; numbers alone read as before."""
    from simcore.histogram import NaNValue

    h = LogHistogram()
    h.add_many(np.linspace(0.001, 0.1, 1000))
    assert h.count == 1000
    bad = np.array([0.01, np.nan, 0.02])
    {
        "add": lambda: h.add(float("nan")),
        "add weighted": lambda: h.add(float("nan"), 3),
        "list": lambda: h.add_many(bad.tolist()),
        "array": lambda: h.add_many(bad),
        "array weighted": lambda: h.add_many(bad, weight=4),
        "per-value weights": lambda: h.add_weighted(bad, np.array([1, 2, 3])),
    }[how]()
    with pytest.raises(NaNValue, match="NaN"):
        h.count  # noqa: B018 -- reading the property is what raises
    assert issubclass(NaNValue, ValueError)
    h.add_many(np.array([0.5, 0.25]))
    assert h.count == 1002  # after the error: the batch with the NaN dropped, the rest counted once
    assert h.count == h.counts.sum()


def test_weighted_adds_count_each_sample():
    h = LogHistogram()
    h.add_many(np.array([0.01, 0.02]), weight=5)
    h.add(0.5)
    assert h.count == 11 and h.quantile(1.0) == 0.5 and h.quantile(0.0) == pytest.approx(0.01, rel=2e-3)


def test_request_frame_is_in_rid_order_whatever_the_list_order(llama8b, h100):
    """requests_frame sorts by rid only when the list is out of order; either way the same frame,
    its derived columns computed per row (TPOT NaN for one-token outputs, NaN where not reached)."""
    import random

    import pandas as pd

    from simcore.metrics import requests_frame

    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {})
    rng = np.random.default_rng(5)
    wl = fixed_workload(np.cumsum(rng.exponential(0.05, 60)), rng.integers(50, 3000, 60), rng.integers(1, 200, 60))
    sim = Simulation([(sched, pool, cm)], wl, max_model_len=L)
    sim.run(until=2.0)
    reqs = sim.requests
    df = requests_frame(reqs)
    assert list(df.rid) == sorted(r.rid for r in reqs) and df.finish_s.isna().any() and df.finish_s.notna().any()
    shuffled = reqs[:]
    random.Random(1).shuffle(shuffled)
    pd.testing.assert_frame_equal(requests_frame(shuffled), df, check_exact=True)
    for r, row in zip(sorted(reqs, key=lambda r: r.rid), df.itertuples()):
        ttft = (r.first_token_s - r.arrival_s) if r.first_token_s is not None else np.nan
        assert row.ttft_s == ttft or (np.isnan(ttft) and np.isnan(row.ttft_s))
        tpot = ((r.finish_s - r.arrival_s) - ttft) / (r.output_len - 1) if r.output_len > 1 and r.finish_s else np.nan
        assert row.tpot_s == tpot or (np.isnan(tpot) and np.isnan(row.tpot_s))
    assert len(requests_frame([])) == 0


@pytest.mark.parametrize("lo, hi", [(1e-6, 1e5), (3e-4, 7e2)])
def test_bins_at_one_per_decade_are_the_log_formula(lo, hi):
    """At one bin a decade (a bin wider than a factor of 8) the float-bit table's buckets must still
    hold at most one edge each: the lookup agrees with the log formula on values across the range."""
    h = LogHistogram(lo, hi, 1)
    x = 10 ** np.random.default_rng(1).uniform(np.log10(lo) - 2, np.log10(hi) + 2, 100_000)
    with np.errstate(divide="ignore"):
        formula = np.clip(np.floor(np.log10(x / lo)), -1, h.nbins - 2).astype(np.int64) + 1
    assert np.array_equal(h._index(x.copy()), formula)


@pytest.mark.parametrize(
    "replicas,closed,until", [(1, False, None), (3, False, None), (3, False, 4.0), (2, True, None)]
)
def test_a_runs_frame_is_every_request_object_read(llama8b, h100, replicas, closed, until):
    """Simulation builds its frame from the inputs it holds (rid, lengths, open loop's send times)
    and reads `rejected` only where a request did not finish: the same frame as reading every
    field of every request object (here, in the test), rejections, a stop and closed loop too."""
    import pandas as pd

    from experiments.engines import build_cluster
    from simcore.metrics import COLUMNS
    from workloads.workload import Workload

    rng = np.random.default_rng(replicas + 7 * closed)
    n = 240
    prompts, outputs = rng.integers(50, 3000, n), rng.integers(1, 200, n)
    prompts[::29] = 9000  # over max_model_len
    wl = Workload(np.cumsum(rng.exponential(0.03, n)), prompts, outputs, closed_loop_concurrency=6 if closed else None)
    engines, route, max_len = build_cluster(
        "vllm", llama8b, h100, 1, {"max_model_len": 8192}, replicas, "least_outstanding"
    )
    sim = Simulation(engines, wl, router=route if replicas > 1 else None, max_model_len=max_len)
    df = sim.run(until=until).requests
    reqs = sorted(sim.requests, key=lambda r: r.rid)
    want = pd.DataFrame(
        {
            name: np.array([getattr(r, name) for r in reqs], dtype=float if dtype is np.float64 else dtype)
            for name, dtype in COLUMNS.items()
        }
    )
    assert df.rejected.notna().sum() >= len(df) // 30
    assert (df.finish_s.notna().sum() + df.rejected.notna().sum() == len(df)) == (until is None)
    pd.testing.assert_frame_equal(df[list(COLUMNS)], want, check_exact=True)
