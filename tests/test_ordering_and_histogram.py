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
    boundary = prefill + decode            # end of A's first decode step, computed independently
    wl = fixed_workload([0.0, boundary, boundary + 1e-9], [500, 500, 500], [50, 50, 50])
    df = Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=L).run().requests
    assert df.first_scheduled_s[1] == pytest.approx(boundary, abs=1e-12)
    assert df.first_scheduled_s[2] > boundary + 1e-9   # a hair later waits for the step in progress


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
    x = np.concatenate([10 ** rng.uniform(np.log10(lo) - 2, np.log10(hi) + 2, 200_000), edges,
                        np.nextafter(edges, 0), np.nextafter(edges, np.inf), [0.0, 5e-324, lo, hi, np.inf]])
    with np.errstate(divide="ignore"):
        formula = np.clip(np.floor(np.log10(x / lo) * per_decade), -1, h.nbins - 2).astype(np.int64) + 1
    assert np.array_equal(h._index(x.copy()), formula)
    assert list(h._index(np.array([-1.0, -np.inf, np.nan]))) == [0, 0, h.nbins - 1]


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
