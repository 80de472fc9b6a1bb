"""Synthetic workloads: arrival processes against theory, vLLM length semantics, the config door."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from costmodel.errors import InputError
from workloads import FIXTURES, Workload, arrivals, lengths, workload_from_config


def gaps(t):
    return np.diff(np.concatenate(([0.0], t)))


@pytest.mark.parametrize("rate", [0.5, 4.0, 50.0, 2000.0])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("normalize", [False, True])
def test_poisson_gaps_are_exponential(rate, seed, normalize):
    t = arrivals.poisson(rate, 10_000, np.random.default_rng([seed, int(rate * 10)]), normalize=normalize)
    g = gaps(t)
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue > 0.001  # 16 cases: family-wise < 2 %
    assert g.mean() == pytest.approx(1 / rate, rel=0.03)
    assert np.all(g > 0)


def test_ks_test_has_power():
    g = gaps(arrivals.gamma(4.0, 2.0, 10_000, np.random.default_rng(1)))
    assert stats.kstest(g, "expon", args=(0, 0.25)).pvalue < 1e-6


def test_normalize_puts_last_arrival_at_n_over_rate():
    t = arrivals.poisson(7.0, 1000, np.random.default_rng(0))
    assert t[-1] == pytest.approx(1000 / 7.0, rel=1e-12)
    raw = arrivals.poisson(7.0, 1000, np.random.default_rng(0), normalize=False)
    np.testing.assert_allclose(t, raw * (t[-1] / raw[-1]))


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 8.0])
def test_gamma_gap_cv2_is_one_over_burstiness(burstiness):
    g = gaps(arrivals.gamma(10.0, burstiness, 100_000, np.random.default_rng(3)))
    cv2 = g.var() / g.mean() ** 2
    assert cv2 == pytest.approx(1 / burstiness, rel=0.05)
    assert g.mean() == pytest.approx(0.1, rel=1e-3)  # normalized: exactly n/rate overall


def test_constant_infinite_rate_and_infinite_burstiness():
    np.testing.assert_array_equal(arrivals.constant(4.0, 4), [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(arrivals.poisson(math.inf, 5, np.random.default_rng(0)), np.zeros(5))
    np.testing.assert_array_equal(arrivals.gamma(4.0, math.inf, 4, np.random.default_rng(0)), arrivals.constant(4.0, 4))


def test_ramp_rate_by_request_index():
    np.testing.assert_allclose(arrivals.ramp_rates("linear", 1, 5, 5), [1, 2, 3, 4, 5])
    np.testing.assert_allclose(arrivals.ramp_rates("exponential", 1, 16, 5), [1, 2, 4, 8, 16])
    np.testing.assert_allclose(arrivals.ramp_rates("linear", 3, 9, 1), [3])
    t = arrivals.ramp("linear", 1, 5, 5, np.random.default_rng(0), burstiness=math.inf)
    np.testing.assert_allclose(gaps(t), [1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    g = gaps(arrivals.ramp("exponential", 10, 10, 20_000, np.random.default_rng(1)))
    assert stats.kstest(g, "expon", args=(0, 0.1)).pvalue > 0.01  # start == end: plain Poisson
    with pytest.raises(InputError, match="ramp_up_start_rps"):
        arrivals.ramp("linear", 0, 5, 10, np.random.default_rng(0))
    with pytest.raises(InputError, match="ramp_up_strategy"):
        arrivals.ramp("cubic", 1, 5, 10, np.random.default_rng(0))


@pytest.mark.parametrize("bad", [dict(rate=0.0), dict(rate=-1.0), dict(rate=float("nan")), dict(n=0)])
def test_arrival_arguments_checked(bad):
    kw = dict(rate=1.0, n=10) | bad
    with pytest.raises(InputError):
        arrivals.poisson(kw["rate"], kw["n"], np.random.default_rng(0))


@pytest.mark.parametrize(
    "args, inp, out",
    [
        ((1024, 128, 0.0), (1024, 1024), (128, 128)),
        ((1024, 128, 0.5), (512, 1536), (64, 192)),
        ((10, 1, 0.25), (7, 13), (1, 2)),  # floor(7.5), ceil(12.5); output clamped to >= 1
        ((3, 3, 0.9), (0, 6), (1, 6)),
    ],
)
def test_random_bounds_follow_vllm(args, inp, out):
    assert lengths.random_bounds(*args) == (inp, out)


@settings(max_examples=60, deadline=None)
@given(input_len=st.integers(1, 5000), output_len=st.integers(1, 2000), r=st.floats(0, 0.99), seed=st.integers(0, 99))
def test_random_lengths_hold_bounds_exactly(input_len, output_len, r, seed):
    (ilo, ihi), (olo, ohi) = lengths.random_bounds(input_len, output_len, r)
    if ilo < 1:
        return
    L = lengths.random(4000, np.random.default_rng(seed), input_len, output_len, r)
    assert ilo <= L.prompt_len.min() and L.prompt_len.max() <= ihi
    assert olo <= L.output_len.min() and L.output_len.max() <= ohi
    if ihi - ilo <= 20:  # small ranges: both ends are reached (inclusive)
        assert (L.prompt_len.min(), L.prompt_len.max()) == (ilo, ihi)


def test_random_range_ratio_must_be_below_one():
    with pytest.raises(InputError, match="range_ratio"):
        lengths.random(10, np.random.default_rng(0), 100, 10, 1.0)
    with pytest.raises(InputError, match="empty"):
        lengths.random(10, np.random.default_rng(0), 1, 10, 0.5)


def test_random_prefix_is_shared_by_all_requests():
    L = lengths.random(50, np.random.default_rng(0), 100, 10, 0.2, prefix_len=40, block_tokens=16)
    assert np.all(L.prompt_len >= 40 + 80)
    assert all(h[:2] == (0, 1) for h in L.block_hashes)
    assert all(len(h) == -(-p // 16) for h, p in zip(L.block_hashes, L.prompt_len))
    assert len({x for h in L.block_hashes for x in h[2:]}) == sum(len(h) - 2 for h in L.block_hashes)


def test_shared_prefix_hashes():
    L = lengths.shared_prefix(
        23, np.random.default_rng(5), num_prefixes=4, prefix_len=40, suffix_len=30, output_len=7, block_tokens=16
    )
    assert len(L) == 20 and "rounded down to 20" in L.notes[0]
    assert set(L.prompt_len) == {70} and set(L.output_len) == {7}
    heads = [h[:2] for h in L.block_hashes]
    assert sorted(set(heads)) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all(heads.count(x) == 5 for x in set(heads))
    tails = [x for h in L.block_hashes for x in h[2:]]  # the boundary block (tokens 32..47) is unique
    assert len(tails) == 20 * 3 and len(set(tails)) == len(tails) and min(tails) == 8
    assert heads != sorted(heads)  # shuffled, as vLLM does


def test_length_table_rows_are_drawn_from_the_table():
    import pandas as pd

    df = pd.read_csv(FIXTURES / "sharegpt_8k_filtered_200.csv")
    rows = set(zip(df.num_prefill_tokens, df.num_decode_tokens))
    L = lengths.table(FIXTURES / "sharegpt_8k_filtered_200.csv", 1000, np.random.default_rng(0))
    assert set(zip(L.prompt_len.tolist(), L.output_len.tolist())) <= rows
    L2 = lengths.table(
        FIXTURES / "azure_conv_120.csv",
        10,
        np.random.default_rng(0),
        {"prompt_len": "ContextTokens", "output_len": "GeneratedTokens"},
    )
    assert len(L2) == 10


def test_workload_validates_and_is_frozen():
    w = Workload([0.0, 1.0], [5, 6], [1, 2], None, 16, 4)
    assert len(w) == 2 and w.closed_loop_concurrency == 4
    with pytest.raises(ValueError):
        w.arrival_s[0] = 3.0
    assert list(w.to_frame().columns) == ["arrival_s", "prompt_len", "output_len"]
    with pytest.raises(InputError, match="sorted"):
        Workload([1.0, 0.0], [5, 6], [1, 2])
    with pytest.raises(InputError, match="prompt_len"):
        Workload([0.0, 1.0], [5, 0], [1, 2])
    with pytest.raises(InputError, match="block_hashes"):
        Workload([0.0, 1.0], [5, 6], [1, 2], [(1,)])


CFG = {
    "kind": "gamma",
    "request_rate": 8,
    "burstiness": 0.5,
    "num_prompts": 500,
    "lengths": {"kind": "random", "input_len": 512, "output_len": 64, "range_ratio": 0.5},
}


def test_config_same_seed_same_arrays_and_streams_are_independent():
    a, b = workload_from_config(CFG, 7), workload_from_config(CFG, 7)
    for f in ("arrival_s", "prompt_len", "output_len"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    c = workload_from_config(CFG, 8)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    fixed_len = workload_from_config(CFG | {"lengths": {"kind": "fixed", "input_len": 9, "output_len": 9}}, 7)
    np.testing.assert_array_equal(a.arrival_s, fixed_len.arrival_s)  # lengths don't move arrivals


def test_config_kinds_and_closed_loop():
    w = workload_from_config(
        {
            "kind": "poisson",
            "num_prompts": 20,
            "max_concurrency": 4,
            "lengths": {"kind": "fixed", "input_len": 100, "output_len": 10},
        },
        0,
    )
    assert w.closed_loop_concurrency == 4 and np.all(w.arrival_s == 0)  # default rate inf
    w = workload_from_config(
        {
            "kind": "constant",
            "request_rate": 2,
            "num_prompts": 4,
            "lengths": {"kind": "fixed", "input_len": 1, "output_len": 1},
        },
        0,
    )
    np.testing.assert_array_equal(w.arrival_s, [0.5, 1, 1.5, 2])
    w = workload_from_config(
        {
            "kind": "ramp",
            "ramp_up_strategy": "linear",
            "ramp_up_start_rps": 1,
            "ramp_up_end_rps": 10,
            "num_prompts": 50,
            "lengths": {"kind": "shared_prefix", "num_prefixes": 5},
        },
        0,
    )
    assert len(w) == 50 and w.block_hashes is not None
    w = workload_from_config(
        {
            "kind": "poisson",
            "request_rate": "inf",
            "num_prompts": 30,
            "lengths": {"kind": "table", "path": "sharegpt_8k_filtered_200.csv"},
        },
        0,
        base_dir=FIXTURES,
    )
    assert len(w) == 30


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"kind": "poisson", "rate": 3}, r"workload=\['rate'\]: unknown keys"),
        ({"kind": "poisson", "burstiness": 2}, r"\['burstiness'\]: unknown keys for kind 'poisson'"),
        ({"kind": "uniform"}, "workload:kind"),
        ({"kind": "poisson", "lengths": {"kind": "fixed", "input_len": 5, "output_len": 5, "extra": 1}}, "extra"),
        ({"kind": "poisson", "lengths": {"kind": "fixed", "input_len": 5}}, "lengths:output_len"),
        ({"kind": "poisson", "lengths": {"kind": "zipf"}}, "lengths:kind"),
        ({"kind": "trace", "trace": {"format": "azure", "path": "x.csv", "speed": 2}}, r"\['speed'\]"),
        ({"kind": "trace", "num_prompts": 5, "trace": {"path": "x.csv"}}, "num_prompts"),
        ({"kind": "poisson", "num_prompts": 0}, "num_prompts"),
        ({"kind": "poisson", "max_concurrency": 0}, "max_concurrency"),
        ({"kind": "poisson", "request_rate": "fast"}, "request_rate"),
        ({"kind": "ramp", "ramp_up_strategy": "linear"}, "ramp_up_start_rps"),
        ({"kind": "poisson", "lengths": {"kind": "shared_prefix", "prefix_len": 40.5}}, "prefix_len=40.5"),
        ({"kind": "poisson", "lengths": {"kind": "random", "input_len": True}}, "input_len"),
    ],
)
def test_config_rejects_bad_keys_and_values(cfg, match):
    with pytest.raises(InputError, match=match):
        workload_from_config(cfg, 0)
