"""Is a simulated point overloaded? Its queue grows while requests keep arriving.

When a server completes requests at rate μ below the offered rate λ, the backlog grows by
(λ − μ)·t requests, so a request arriving at time t waits about (λ − μ)·t/μ = (λ/μ − 1)·t
before its first token. The *queue growth* of a run is that slope, measured robustly:

    growth = (median TTFT of the last fifth of arrivals − median TTFT of the first fifth)
             / (median arrival time of the last fifth − median arrival time of the first fifth)

in seconds of extra wait per second of arrivals. A point is **overloaded** when growth > 0.10:
the server completes less than 1/1.1 ≈ 91% of what is offered (μ < λ/1.1). In a stable run, the
wait does not trend: growth is near 0, whatever the run's length, and a rare long prompt moves
neither median. A request that never produced a token (rejected) waits forever, so it counts as
an infinite TTFT. Runs whose requests all arrive at once (request rate inf), or with fewer than
``MIN_REQUESTS`` requests, have no rate to keep up with: growth is NaN and they are not flagged.
"""

from __future__ import annotations

import numpy as np

GROWTH_LIMIT = 0.10  # s of extra TTFT per s of arrivals: throughput below 1/1.1 of the offered rate
MIN_REQUESTS = 20


def queue_growth(arrival_s: np.ndarray, ttft_s: np.ndarray) -> float:
    """The slope above; NaN when it is undefined (too few requests, or no spread in arrivals)."""
    a = np.asarray(arrival_s, dtype=float)
    w = np.where(np.isnan(np.asarray(ttft_s, dtype=float)), np.inf, ttft_s)
    if len(a) < MIN_REQUESTS:
        return float("nan")
    order = np.argsort(a, kind="stable")
    a, w = a[order], w[order]
    k = len(a) // 5
    dt = np.median(a[-k:]) - np.median(a[:k])
    if dt <= 0:
        return float("nan")
    late, early = np.median(w[-k:]), np.median(w[:k])
    return float("inf") if np.isinf(late) else float((late - early) / dt)


def load_figures(arrival_s: np.ndarray, ttft_s: np.ndarray) -> dict:
    """offered_rate (req/s over the arrival span), queue_growth, overloaded (growth > GROWTH_LIMIT)."""
    a = np.asarray(arrival_s, dtype=float)
    span = float(a.max() - a.min()) if len(a) else 0.0
    g = queue_growth(a, ttft_s)
    return {
        "offered_rate": (len(a) - 1) / span if span > 0 else float("inf"),
        "queue_growth": g,
        "overloaded": bool(g > GROWTH_LIMIT),
    }
