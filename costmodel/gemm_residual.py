"""What the smooth shape correction leaves of a GEMM's measured time, carried from the measured
shapes to their neighbours: the library's kernel choice for one (n, k) shape resembles its
choice for the shapes next to it far more than a smooth function of the shape can say.

On AIConfigurator's tables (a 21 × 21 grid of n, k, each at 21 row counts m) the log residual of
the tile model with its correction at a held-out shape correlates 0.4-0.5 with the mean residual
of its four grid neighbours at the same m, while a trend over an octave (``gemm_correction.py``)
cannot carry it. So the profile ships the residual of every measured shape at every measured m
(the field), and a GEMM's factor is exp(c) with

  c(m, n, k) = a · Σ_s w_s·r_s(m) / (Σ_s w_s + w₀),
  w_s = exp(-(Δn_s/h_n)²/2 - (Δk_s/h_k)²/2),  w₀ = exp(-(D/max(h_n, h_k))²/2)

Δn_s, Δk_s the distances from (n, k) to the measured shape s counted in steps of the table's own
grid of n and of k values (log₂ spacing between them; beyond the grid, its last step), r_s(m)
linear in log₂ m between the measured rows (a shape's missing rows count for nothing there, never
interpolated across), h_n, h_k the kernel's widths and a the shrinkage, chosen by a shape split
inside the fitted table (``calibration/gemm_fit.py``), and w₀ a zero residual at D = 1.5 grid
steps: a shape the table measured takes its own residual, one between measured shapes a mean of
its nearest, and the field fades to nothing away from every measured shape. The split picks a
kernel narrow in n and wide in k on every AIConfigurator table (A100, B200, L40S: h_n = 0.3,
h_k = 0.5-1 steps): the residual follows the output grid's tiles (m, n), and changes slowly with k
at one n. Each residual is clipped to ±ln 1.5 and so is c. A profile ships the log₂ m grid, the
shapes' log₂ (n, k), the residuals (NaN where a shape has no row), [h_n, h_k] and a as
``gemm_field_m``, ``gemm_field_shapes``, ``gemm_field``, ``gemm_field_h``, ``gemm_field_shrink``;
empty: no field.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

BOUND = float(np.log(1.5))
FADE = 1.5  # grid steps from the nearest measured shape at which the field has half faded


def _steps(v: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """log₂ values as positions on the grid ``axis`` (sorted log₂ values): fractional between them,
    extended by the end steps beyond."""
    if len(axis) < 2:
        return v - axis[0]
    pos = np.interp(v, axis, np.arange(len(axis), dtype=float))
    pos += np.where(v < axis[0], (v - axis[0]) / (axis[1] - axis[0]), 0.0)
    pos += np.where(v > axis[-1], (v - axis[-1]) / (axis[-1] - axis[-2]), 0.0)
    return pos


def build(m, n, k, r) -> tuple[list, list, list]:
    """(log₂ m grid, shapes' log₂ (n, k), residuals shapes × grid with NaN where unmeasured) from
    rows m, n, k and their log residuals r (rows repeated at one (m, n, k) are averaged)."""
    lm, ln, lk = (np.log2(np.asarray(x, float)) for x in (m, n, k))
    r = np.clip(np.asarray(r, float), -BOUND, BOUND)
    grid = np.unique(lm)
    shapes, inv = np.unique(np.c_[ln, lk], axis=0, return_inverse=True)
    inv, col = inv.ravel(), np.searchsorted(grid, lm)
    total = np.zeros((len(shapes), len(grid)))
    count = np.zeros_like(total)
    np.add.at(total, (inv, col), r)
    np.add.at(count, (inv, col), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        vals = np.where(count > 0, total / count, np.nan)
    return [float(v) for v in grid], [[float(a), float(b)] for a, b in shapes], vals.tolist()


class Field:
    """A profile's residual field, laid out once (it is priced on the hot path)."""

    def __init__(self, m_grid, shapes, values, h, shrink: float):
        self.grid = np.asarray(m_grid, float)
        self._grid_list = [float(v) for v in self.grid]
        s = np.asarray(shapes, float).reshape(-1, 2)
        self.axes = (np.unique(s[:, 0]), np.unique(s[:, 1]))
        self.pos = np.c_[_steps(s[:, 0], self.axes[0]), _steps(s[:, 1], self.axes[1])]
        v = np.asarray(values, float).reshape(len(s), len(self.grid))
        self.ok = np.isfinite(v).astype(float)
        self.vals = np.where(self.ok > 0, v, 0.0)
        self.h, self.shrink = np.broadcast_to(np.asarray(h, float), (2,)).copy(), float(shrink)
        self.w0 = math.exp(-0.5 * (FADE / float(self.h.max())) ** 2)
        self.key = hash((self.grid.tobytes(), self.pos.tobytes(), v.tobytes(), self.h.tobytes(), self.shrink))
        self._by_shapes: dict = {}

    def columns(self, n, k) -> np.ndarray:
        """shapes × m-grid: c of each (n, k) at every grid m."""
        q = np.c_[_steps(np.log2(n), self.axes[0]), _steps(np.log2(k), self.axes[1])]
        d2 = (((q[:, None, :] - self.pos[None, :, :]) / self.h) ** 2).sum(2)
        w = np.exp(-0.5 * d2)
        c = self.shrink * (w @ self.vals) / (w @ self.ok + self.w0)
        return np.clip(c, -BOUND, BOUND)

    def _at(self, g: np.ndarray, m) -> np.ndarray:
        if len(self.grid) < 2:
            return g[:, 0]
        m = np.asarray(m, float)
        if len(m) and m[0] == m[-1] and (len(m) < 3 or (m == m[0]).all()):  # one m: a pass's GEMMs
            kn = self._grid_list
            x = min(max(math.log2(max(float(m[0]), 1.0)), kn[0]), kn[-1])
            i = min(bisect_right(kn, x) - 1, len(kn) - 2)
            a = (x - kn[i]) / (kn[i + 1] - kn[i])
            return g[:, i] * (1.0 - a) + g[:, i + 1] * a
        x = np.clip(np.log2(np.maximum(np.asarray(m, float), 1.0)), self.grid[0], self.grid[-1])
        i = np.clip(np.searchsorted(self.grid, x, side="right") - 1, 0, len(self.grid) - 2)
        a = (x - self.grid[i]) / (self.grid[i + 1] - self.grid[i])
        rows = np.arange(len(g))
        return g[rows, i] * (1.0 - a) + g[rows, i + 1] * a

    def __call__(self, m, n, k) -> np.ndarray:
        """c at each (m, n, k) (1-d arrays of equal length); the (n, k) weights kept per shape set."""
        key = (np.asarray(n, float).tobytes(), np.asarray(k, float).tobytes())
        g = self._by_shapes.get(key)
        if g is None:
            if len(self._by_shapes) > 64:
                self._by_shapes.clear()
            g = self._by_shapes[key] = self.columns(np.asarray(n, float), np.asarray(k, float))
        return self._at(g, m)


def check(m_grid, shapes, values, h, shrink, source: str = "gemm_field") -> None:
    """Consistent shapes, an increasing m grid, widths h (one, or [h_n, h_k]) > 0, 0 ≤ a ≤ 1 (else
    InputError)."""
    from .errors import require

    if not m_grid and not shapes and not values:
        return
    require(
        len(m_grid) >= 1 and bool(np.all(np.diff(np.asarray(m_grid, float)) > 0)),
        f"{source}_m",
        m_grid,
        "must be an increasing list of log2 row counts",
    )
    require(
        all(len(s) == 2 for s in shapes) and len(shapes) >= 1,
        f"{source}_shapes",
        len(shapes),
        "must be a list of [log2 n, log2 k] pairs",
    )
    require(
        len(values) == len(shapes) and all(len(v) == len(m_grid) for v in values),
        source,
        len(values),
        f"must hold one row of {len(m_grid)} values per shape ({len(shapes)} shapes)",
    )
    finite = np.asarray(values, float)
    finite = finite[np.isfinite(finite)]
    require(
        bool(np.all(np.abs(finite) <= BOUND + 1e-9)),
        source,
        float(np.abs(finite).max(initial=0.0)),
        f"values must lie within ±{BOUND:.4f} (ln 1.5) or be NaN",
    )
    hs = np.atleast_1d(np.asarray(h, float))
    require(hs.size in (1, 2) and bool(np.all(hs > 0)), f"{source}_h", h, "must be one width or [h_n, h_k], each > 0")
    require(0 <= shrink <= 1, f"{source}_shrink", shrink, "must lie in [0, 1]")
