"""The model-error draws of ``--uncertainty``: a factor on every step's time, run as a change of time
unit (experiments/model_error.py), and the expected error each kind of profile carries
(costmodel/expected_error.py)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import load_hardware, load_model
from costmodel.expected_error import KINDS, expected_error, profile_kind, time_scales
from experiments.engines import build_cluster
from experiments.model_error import run_at_scale
from simcore.simulation import Simulation, fixed_workload


def _workload(seed: int, n: int = 250, closed: int | None = None):
    rng = np.random.default_rng(seed)
    return fixed_workload(
        np.sort(rng.uniform(0, 40, n)), rng.integers(20, 4000, n), rng.integers(1, 200, n), concurrency=closed
    )


def _slower(hw, k: int):
    """The seed roofline with every rate 2^k times slower: every step exactly 2^k times as long
    (no floors, no overheads; a power of two scales every float exactly)."""
    f = 2.0**k
    return hw.replace(
        pi_eff=hw.pi_eff / f, beta_eff=hw.beta_eff / f, interconnect_bandwidth=hw.interconnect_bandwidth / f
    )


@pytest.mark.parametrize("policy", ["vllm", "sglang"])
@pytest.mark.parametrize("k", [1, -1, 2])
@pytest.mark.parametrize(("replicas", "closed"), [(1, None), (3, None), (1, 16)])
def test_a_time_factor_equals_a_gpu_that_much_slower(policy, k, replicas, closed):
    """Independent of the time-unit argument: the same run on a profile whose every rate is 2^k
    slower, request by request, bit for bit (preemptions included: a tight pool)."""
    m, hw, wl = load_model("llama-3.1-8b"), load_hardware("h100"), _workload(k + 7, closed=closed)
    flags = {"vllm": {"num_gpu_blocks_override": 600}, "sglang": {"max_total_tokens": 9600}}[policy]
    router = "least_outstanding" if replicas > 1 else "round_robin"
    slow, route, max_len = build_cluster(policy, m, _slower(hw, k), 1, flags, replicas, router)
    direct = Simulation(slow, wl, max_model_len=max_len, router=route if replicas > 1 else None).run(
        goodput={"ttft": 300}
    )
    fast, route, _ = build_cluster(policy, m, hw, 1, flags, replicas, router)
    scaled = run_at_scale(
        fast, wl, 2.0**k, router=route if replicas > 1 else None, max_model_len=max_len, goodput={"ttft": 300}
    )
    cols = [c for c in direct.requests.columns if c != "rejected"]
    assert np.array_equal(direct.requests[cols].to_numpy(float), scaled.requests[cols].to_numpy(float), equal_nan=True)
    for key, v in direct.summary.items():
        if "itl" in key:  # from a log histogram of the unit's values: within its bin
            assert scaled.summary[key] == pytest.approx(v, rel=2e-3)
        elif isinstance(v, (int, float)):
            assert scaled.summary[key] == v, key
    if policy == "vllm" and replicas == 1 and not closed and k >= 1:
        assert direct.summary["num_preemptions"] > 0  # the tight pool is exercised


def test_every_profile_has_a_kind_and_an_expected_error():
    kinds = {profile_kind(load_hardware(h)) for h in ("h100", "a100-80gb", "h100-sxm", "l40s")}
    assert kinds == {"spec-sheet", "kernel-calibrated"}
    for kind in KINDS:
        hw = load_hardware("h100") if kind == "spec-sheet" else load_hardware("h100-sxm")
        if kind == "step-calibrated":
            hw = hw.replace(calibration={"step_fit": {}})
        e = expected_error(hw)
        assert e.kind == kind and 0 < e.sigma_log < 1 and e.figures > 0 and e.evidence


def test_time_scales_are_lognormal_with_the_kinds_sigma():
    s = time_scales(0.3, 20000, np.random.default_rng(3))
    assert np.median(s) == pytest.approx(1.0, abs=0.02)
    assert np.std(np.log(s)) == pytest.approx(0.3, rel=0.03)
