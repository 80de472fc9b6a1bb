"""A bounded, smooth correction to the tile/wave GEMM model (``gemm_tiles.py``): what the library's
own kernel heuristics add to or take from the modelled best kernel, as a function of the shape.

The tile model prices the fastest candidate kernel; the measured tables run whichever kernel the
library's heuristic picks (TensorRT-LLM's or cuBLAS's, from a few dozen), with tile shapes, stage
counts and split-K factors the model does not enumerate. Much of what remains varies slowly with
the shape over an octave or two (on AIConfigurator's A100 table the tile model runs 20–50 % slow for
m = 1 with n, k ≤ 1,024 and ~5 % fast at k = 512–768, whatever the other dimensions), so it is
modelled as a factor exp(c(log₂m, log₂n, log₂k)), c trilinear between knots evenly spaced over the
fitted table's range of each axis (constant beyond it), each |c| ≤ BOUND. Fitted on the log
residuals with a second-difference smoothness penalty (``calibration/gemm_fit.py``); a profile
ships the knots and values (``gemm_corr_knots``, ``gemm_corr``), empty: no correction.
"""
from __future__ import annotations

import numpy as np

BOUND = float(np.log(1.5))     # the factor stays within [1/1.5, 1.5]


def cells(knots, m, n, k):
    """Per axis (lower knot index, weight of the upper knot) of each point, arrays over points."""
    out = []
    for kn, v in zip(knots, (m, n, k)):
        kn = np.asarray(kn, float)
        x = np.clip(np.log2(np.maximum(np.asarray(v, float), 1.0)), kn[0], kn[-1])
        i = np.clip(np.searchsorted(kn, x, side="right") - 1, 0, len(kn) - 2)
        out.append((i, (x - kn[i]) / (kn[i + 1] - kn[i])))
    return out


def corners(knots, m, n, k):
    """(flat coefficient index, trilinear weight) of the 8 corners around each point: 8 × points."""
    (i, a), (j, b), (l, c) = cells(knots, m, n, k)
    nn, nk = len(knots[1]), len(knots[2])
    idx, w = [], []
    for di in (0, 1):
        for dj in (0, 1):
            for dl in (0, 1):
                idx.append(((i + di) * nn + j + dj) * nk + l + dl)
                w.append((a if di else 1 - a) * (b if dj else 1 - b) * (c if dl else 1 - c))
    return np.array(idx), np.array(w)


def log_factor(knots, coef, m, n, k) -> np.ndarray:
    """c at each (m, n, k): ln of the factor the tile model's time is multiplied by."""
    idx, w = corners(knots, m, n, k)
    return (np.asarray(coef, float)[idx] * w).sum(0)


def check(knots, coef, source: str = "gemm_corr") -> None:
    """Consistent shapes, increasing knots and values within ±BOUND (else InputError)."""
    from .errors import require
    if not knots and not coef:
        return
    require(len(knots) == 3 and all(len(kn) >= 2 for kn in knots), f"{source}_knots", knots,
            "must be three lists (log2 m, n, k) of at least 2 knots")
    require(all(np.all(np.diff(np.asarray(kn, float)) > 0) for kn in knots), f"{source}_knots", knots,
            "each list must increase")
    size = len(knots[0]) * len(knots[1]) * len(knots[2])
    require(len(coef) == size, source, len(coef), f"must hold {size} values (one per knot triple)")
    require(bool(np.all(np.abs(np.asarray(coef, float)) <= BOUND + 1e-9)), source, max(map(abs, coef)),
            f"values must lie within ±{BOUND:.4f} (ln 1.5)")
