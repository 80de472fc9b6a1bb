"""A run with every step ``scale`` times as long and the same arrivals, and bands over such runs.

A uniform factor on every step's time is a change of time unit: the run with steps × s and
arrivals a_i is the run with steps × 1 and arrivals a_i / s, its times then × s. Nothing a
scheduler decides reads the clock's absolute value (budgets, pools and queues are counted in
tokens, blocks and requests), so the two are the same schedule, and no cost model has to learn a
scale. ``--uncertainty`` draws one factor per run from the profile's expected error
(costmodel/expected_error.py), beside the fit's parameter draws where the profile has them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel.calibration import sample_hardware
from costmodel.calibration.profile import fitted_parameters
from costmodel.expected_error import expected_error, time_scales
from simcore.simulation import Result, Simulation

PER_SECOND = ("request_throughput", "output_throughput", "total_token_throughput", "request_goodput")


def rescaled(res: Result, scale: float) -> Result:
    """``res`` with its clock run ``scale`` times slower: times × scale, rates ÷ scale."""
    df = res.requests.copy()
    for c in df.columns:
        if c.endswith("_s") and c != "rejected":
            df[c] = df[c] * scale
    summary = {}
    for k, v in res.summary.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if k == "duration" or k.endswith("_ms"):
                v = v * scale
            elif k in PER_SECOND:
                v = v / scale
        summary[k] = v
    return dataclasses.replace(res, requests=df, summary=summary)


def run_at_scale(
    engines,
    workload,
    scale: float,
    *,
    router=None,
    max_model_len: int = 0,
    goodput: dict | None = None,
    fast_forward=True,
) -> Result:
    """Simulate ``workload`` as if every step took ``scale`` times the cost model's price."""
    wl = workload if scale == 1.0 else dataclasses.replace(workload, arrival_s=np.asarray(workload.arrival_s) / scale)
    slo = {k: v / scale for k, v in goodput.items()} if goodput else goodput
    res = Simulation(engines, wl, fast_forward=fast_forward, max_model_len=max_model_len, router=router).run(
        goodput=slo
    )
    return res if scale == 1.0 else rescaled(res, scale)


def draws(hw, n: int, rng: np.random.Generator, sigma_log: float | None = None) -> tuple[list, np.ndarray]:
    """``n`` (profile, time factor) draws: the fit's parameters from its covariance where the profile
    has one (else the profile itself), then a factor from the expected error (the kind's sigma, or
    ``sigma_log``), in that order from ``rng``."""
    profiles = sample_hardware(hw, n, rng) if len(fitted_parameters(hw)[0]) else [hw] * n
    s = expected_error(hw).sigma_log if sigma_log is None else sigma_log
    return profiles, time_scales(s, n, rng)
