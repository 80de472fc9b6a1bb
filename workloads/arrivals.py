"""Arrival times with ``vllm bench serve`` semantics (``get_request`` in vllm/benchmarks/serve.py).

Request i is sent at the cumulative sum of gaps 0..i, so the first request also waits its own
gap. Gaps are Gamma(shape=burstiness, scale=1/(rate*burstiness)): mean 1/rate, CV^2 = 1/burstiness;
burstiness = 1 is a Poisson process. Gaps are never clipped. Without a ramp, vLLM rescales the
cumulative times so the last arrival lands exactly at n/rate (``normalize=True``, the default;
the rescale factor is 1 + O(1/sqrt(n))). ``rate = inf`` sends everything at t = 0.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.errors import require

RAMP_STRATEGIES = ("linear", "exponential")


def _check(rate: float, n: int) -> None:
    require(isinstance(n, (int, np.integer)) and n >= 1, "num_prompts", n, "must be an integer >= 1")
    require(rate > 0, "request_rate", rate, "must be > 0 (inf sends all requests at t=0)")


def _normalized(t: np.ndarray, rate: float, normalize: bool) -> np.ndarray:
    if normalize and t[-1] > 0:
        t = t * ((len(t) / rate) / t[-1])
    return t


def gamma(rate: float, burstiness: float, n: int, rng: np.random.Generator, normalize: bool = True) -> np.ndarray:
    """Gamma-renewal arrivals (vLLM ``--request-rate`` with ``--burstiness``)."""
    _check(rate, n)
    require(burstiness > 0, "burstiness", burstiness, "must be > 0")
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        return constant(rate, n)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    return _normalized(np.cumsum(gaps), rate, normalize)


def poisson(rate: float, n: int, rng: np.random.Generator, normalize: bool = True) -> np.ndarray:
    """Poisson arrivals: exponential gaps with mean 1/rate (gamma with burstiness 1)."""
    return gamma(rate, 1.0, n, rng, normalize)


def constant(rate: float, n: int) -> np.ndarray:
    """Evenly spaced, gap 1/rate, first at 1/rate (vLLM's burstiness = inf limit)."""
    _check(rate, n)
    if math.isinf(rate):
        return np.zeros(n)
    return np.arange(1, n + 1, dtype=np.float64) / rate


def ramp_rates(strategy: str, start_rps: float, end_rps: float, n: int) -> np.ndarray:
    """Per-request rate by request index (vLLM ``_get_current_request_rate``)."""
    require(strategy in RAMP_STRATEGIES, "ramp_up_strategy", strategy, f"must be one of {RAMP_STRATEGIES}")
    require(start_rps > 0 and math.isfinite(start_rps), "ramp_up_start_rps", start_rps, "must be > 0 and finite")
    require(end_rps > 0 and math.isfinite(end_rps), "ramp_up_end_rps", end_rps, "must be > 0 and finite")
    progress = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    return start_rps * (end_rps / start_rps) ** progress


def ramp(
    strategy: str, start_rps: float, end_rps: float, n: int, rng: np.random.Generator, burstiness: float = 1.0
) -> np.ndarray:
    """Rate ramping from start to end over the request index; gap i drawn at rate i; no rescale."""
    _check(1.0, n)
    require(burstiness > 0, "burstiness", burstiness, "must be > 0")
    rates = ramp_rates(strategy, start_rps, end_rps, n)
    if math.isinf(burstiness):
        return np.cumsum(1.0 / rates)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rates * burstiness))
    return np.cumsum(gaps)
