"""Overloaded sweep points: queue growth against queueing theory, and no recommendation from them."""

import numpy as np
import pytest

from experiments.overload import GROWTH_LIMIT, load_figures, queue_growth
from experiments.sweep import SweepSpec, all_overloaded, overload_message, recommend, run_sweep


def fifo_ttft(rate: float, service_s: float, n: int, seed: int = 0):
    """One FIFO server, Poisson arrivals, fixed service time (Lindley's recursion); TTFT = wait + service."""
    a = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))
    start = np.empty(n)
    free = 0.0
    for i, t in enumerate(a):
        start[i] = max(t, free)
        free = start[i] + service_s
    return a, start - a + service_s


@pytest.mark.parametrize("load", [1.25, 2.0, 4.0])
def test_growth_is_lambda_over_mu_minus_one_when_overloaded(load):
    a, ttft = fifo_ttft(rate=10.0, service_s=load / 10.0, n=2000)
    assert queue_growth(a, ttft) == pytest.approx(load - 1, rel=0.1)
    assert load_figures(a, ttft)["overloaded"]


@pytest.mark.parametrize("load", [0.3, 0.7, 0.85])
def test_a_stable_queue_does_not_grow(load):
    for n in (100, 2000):  # short and long runs alike
        a, ttft = fifo_ttft(rate=10.0, service_s=load / 10.0, n=n, seed=n)
        g = load_figures(a, ttft)
        assert abs(g["queue_growth"]) < GROWTH_LIMIT and not g["overloaded"]
        assert g["offered_rate"] == pytest.approx(10.0, rel=0.25)


def test_rejected_requests_wait_forever_and_bursts_have_no_rate():
    a = np.linspace(0, 10, 50)
    ttft = np.full(50, 0.1)
    ttft[-10:] = np.nan
    assert load_figures(a, ttft)["overloaded"]
    burst = load_figures(np.zeros(50), np.linspace(0.1, 5, 50))  # request rate inf: nothing to keep up with
    assert np.isnan(burst["queue_growth"]) and not burst["overloaded"]
    assert np.isnan(queue_growth(a[:10], ttft[:10]))


WL = {"kind": "poisson", "num_prompts": 200, "lengths": {"kind": "fixed", "input_len": 256, "output_len": 64}}


@pytest.fixture(scope="module")
def swept():
    spec = SweepSpec(
        grid={"vllm": {"max_num_batched_tokens": [2048]}},
        request_rates=(2, 2000),
        workload=WL,
        model="llama-3.1-8b",
        hardware="h100",
    )
    return run_sweep(spec)


def test_sweep_flags_the_point_the_server_cannot_keep_up_with(swept):
    slow, fast = swept.iloc[0], swept.iloc[1]
    assert not slow.overloaded and fast.overloaded
    assert fast.request_throughput < fast.offered_rate / (1 + GROWTH_LIMIT)
    assert slow.request_throughput > 0.8 * slow.offered_rate
    rec = recommend(swept, itl_slo_ms=1e6).iloc[0]  # any ITL passes: only overload rules a point out
    assert rec.request_rate == 2 and rec.overloaded == 1 and not all_overloaded(swept)


def test_every_point_overloaded_means_no_recommendation(swept):
    only_fast = swept.iloc[[1]]
    rec = recommend(only_fast, itl_slo_ms=1e6).iloc[0]
    assert rec.meeting_slo == 0 and rec.get("request_rate") is None
    assert all_overloaded(only_fast)
    assert "every point is overloaded" in overload_message(only_fast)
