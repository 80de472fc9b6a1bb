"""A bounded, smooth correction to the tile/wave GEMM model (``gemm_tiles.py``): what the library's
own kernel heuristics add to or take from the modelled best kernel, as a function of the shape.

The tile model prices the fastest candidate kernel; the measured tables run whichever kernel the
library's heuristic picks (TensorRT-LLM's or cuBLAS's, from a few dozen), with tile shapes, stage
counts and split-K factors the model does not enumerate. Much of what remains varies slowly with
the shape over an octave or two (on AIConfigurator's A100 table the tile model runs 20–50 % slow for
m = 1 with n, k ≤ 1,024 and ~5 % fast at k = 512–768, whatever the other dimensions), so it is
modelled as a factor exp(c(log₂m, log₂n, log₂k)), c trilinear between knots evenly spaced over the
fitted table's range of each axis (constant beyond it), each |c| ≤ BOUND = ln 3 (wide enough for the
L40S's m = 1 GEMV rows, 40-55 % below the tile model at n ≤ 256; docs/kernel-notes.md). Fitted on the log
residuals with a second-difference smoothness penalty (``calibration/gemm_fit.py``); a profile
ships the knots and values (``gemm_corr_knots``, ``gemm_corr``), empty: no correction.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

BOUND = float(np.log(3.0))  # the factor stays within [1/3, 3]


def cells(knots, m, n, k):
    """Per axis (lower knot index, weight of the upper knot) of each point, arrays over points."""
    out = []
    for kn, v in zip(knots, (m, n, k)):
        kn = np.asarray(kn, float)
        x = np.clip(np.log2(np.maximum(v, 1.0)), kn[0], kn[-1])
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


class Correction:
    """The correction of one profile, its knot arrays laid out once (it is priced on the hot path)."""

    def __init__(self, knots, coef):
        self.knots = tuple(np.asarray(kn, float) for kn in knots)
        self.axes = [
            (
                2.0 ** kn[0],
                kn[-1],
                np.r_[kn[0] - 1.0, kn[:-1]],
                kn - np.r_[kn[0] - 1.0, kn[:-1]],
                np.r_[kn[1:], kn[-1] + 1.0],
                np.r_[kn[1:], kn[-1] + 1.0] - kn,
            )
            for kn in self.knots
        ]
        self.coef = np.asarray(coef, float).reshape(len(self.knots[0]), -1)
        self.shape = tuple(len(kn) for kn in self.knots)
        self.m_knots = [float(v) for v in self.knots[0]]
        self._by_shapes: dict = {}  # (n, k) bytes -> shapes × m-knots: c with n, k contracted

    def hats(self, axis: int, v) -> np.ndarray:
        """points × knots: each knot's hat-function weight at log₂ v (clipped to the knots' range):
        a point's weights sum to 1 and interpolate linearly between its two knots."""
        lo, hi, prev, left, nxt, right = self.axes[axis]
        x = np.minimum(np.log2(np.maximum(v, lo)), hi)[:, None]
        w = np.minimum((x - prev) / left, (nxt - x) / right)  # ≤ 1: one side is within its knot gap
        return np.maximum(w, 0.0, out=w)

    def __call__(self, m, n, k) -> np.ndarray:
        """c at each (m, n, k) (1-d arrays of equal length). One m for every shape (a pass's
        weight GEMMs) takes a short path through the shapes' n, k weights, kept per shape set."""
        if len(m) and m[0] == m[-1] and (len(m) < 3 or (m == m[0]).all()):
            key = (n.tobytes(), k.tobytes())
            g = self._by_shapes.get(key)
            if g is None:
                if len(self._by_shapes) > 64:
                    self._by_shapes.clear()
                wn, wk = self.hats(1, n), self.hats(2, k)
                g = self._by_shapes[key] = np.einsum("ijl,pj,pl->pi", self.coef.reshape(self.shape), wn, wk)
            kn = self.m_knots
            x = min(max(math.log2(max(float(m[0]), 1.0)), kn[0]), kn[-1])
            i = min(bisect_right(kn, x) - 1, len(kn) - 2)
            a = (x - kn[i]) / (kn[i + 1] - kn[i])
            return g[:, i] * (1.0 - a) + g[:, i + 1] * a
        wm, wn, wk = self.hats(0, m), self.hats(1, n), self.hats(2, k)
        c = (wm @ self.coef).reshape(len(wm), self.shape[1], self.shape[2])
        c *= wn[:, :, None]
        c *= wk[:, None, :]
        return c.sum((1, 2))


def log_factor(knots, coef, m, n, k) -> np.ndarray:
    """c at each (m, n, k): ln of the factor the tile model's time is multiplied by."""
    return Correction(knots, coef)(*(np.asarray(v, float).ravel() for v in (m, n, k)))


def check(knots, coef, source: str = "gemm_corr") -> None:
    """Consistent shapes, increasing knots and values within ±BOUND (else InputError)."""
    from .errors import require

    if not knots and not coef:
        return
    require(
        len(knots) == 3 and all(len(kn) >= 2 for kn in knots),
        f"{source}_knots",
        knots,
        "must be three lists (log2 m, n, k) of at least 2 knots",
    )
    require(
        all(np.all(np.diff(np.asarray(kn, float)) > 0) for kn in knots),
        f"{source}_knots",
        knots,
        "each list must increase",
    )
    size = len(knots[0]) * len(knots[1]) * len(knots[2])
    require(len(coef) == size, source, len(coef), f"must hold {size} values (one per knot triple)")
    require(
        bool(np.all(np.abs(np.asarray(coef, float)) <= BOUND + 1e-9)),
        source,
        max(map(abs, coef)),
        f"values must lie within ±{BOUND:.4f} (ln 3)",
    )
