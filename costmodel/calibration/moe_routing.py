"""How many experts the routing of AIConfigurator's fused-MoE table touches.

Its collector does not route uniformly: ``collector/helper.py`` ``power_law_logits_v3`` draws each
expert's load from a power law of exponent α (``distribution`` power_law_α; x_min = 1,
x_max = 0.8·T when T·k > E, else 0.01 and 2), scales the loads to T·k routed tokens and rounds
them, so many experts get none. The importer needs the expected count of experts with at least
one token (each streams its weights); it samples that routing (fixed seed, ``DRAWS`` draws; the
rounding's remainder goes to the most loaded experts, as the collector's does). Under this
routing an H100 fit streams weights at 3.4 TB/s (spec 3.35); counted as uniform routing
(E·(1 - (1 - k/E)^T)), it would need 5.4 TB/s. The simulator prices real routing as uniform
(``costmodel/moe_cost.py``).
"""

from __future__ import annotations

import numpy as np

from ..moe_cost import experts_touched

DRAWS = 64


def _power_law_touched(tokens: int, k: int, experts: int, alpha: float, rng) -> float:
    lo, hi = (1.0, 0.8 * tokens) if tokens * k > experts else (0.01, 2.0)
    u = rng.random((DRAWS, experts))
    a = 1.0 - alpha
    x = ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)
    n = np.round(x / x.sum(axis=1, keepdims=True) * tokens * k).astype(np.int64)
    touched = []
    for row in n:
        d = tokens * k - int(row.sum())
        order = np.argsort(-row, kind="stable")
        if d > 0:
            np.add.at(row, order[np.arange(d) % experts], 1)
        while d < 0:
            for j in order:
                if d == 0:
                    break
                if row[j] > 0:
                    row[j] -= 1
                    d += 1
        touched.append(int((row > 0).sum()))
    return float(np.mean(touched))


def table_touched(tokens, k, experts, ep, distribution) -> np.ndarray:
    """Expected experts touched on one GPU (of E/ep) for each table row."""
    rng = np.random.default_rng(0)
    memo: dict = {}
    out = np.empty(len(tokens))
    for i, (t, kk, e, p, dist) in enumerate(zip(tokens, k, experts, ep, distribution)):
        key = (int(t), int(kk), int(e), str(dist))
        if key not in memo:
            if str(dist).startswith("power_law_"):
                memo[key] = _power_law_touched(*key[:3], float(str(dist).rsplit("_", 1)[1]), rng)
            elif str(dist) == "balanced":
                memo[key] = float(min(e, t * kk))
            else:
                memo[key] = float(experts_touched(t, kk, e))
        out[i] = memo[key] / p
    return out
