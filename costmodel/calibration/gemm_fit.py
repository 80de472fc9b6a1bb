"""Fitting the tile/wave GEMM model (``costmodel/gemm_tiles.py``) to measured GEMM times.

Used for class "gemm" under the "physical" form when the spec gives the GPU's SM count and L2
size. Two passes keep it fast: every candidate kernel on a 2,000-row sample, then all rows with
each row's six fastest kernels at the first pass's constants (predictions use every kernel). Same conventions as the other classes: log residuals, soft_l1, parameters as ln(p/p0),
1σ from the Jacobian; π, β and the L2-resident capacities (weights, activations, output) are capped at the spec sheet (a fit that
lands on a cap says so), the per-thread-block bandwidth at β. Then the unsplit kernel's region
(``costmodel/gemm_serial.py``: bounds searched over a grid, its line by least squares on the rows
the tile model prices 10 % fast), kept only if four folds of the table's shapes, each priced with
the region found without it, say so; with a region the tile constants are refitted without its
rows and the region searched again. Then the bounded smooth correction
(``costmodel/gemm_correction.py``) on the tile model's log residuals: linear least squares in its
knot values with a second-difference penalty λ (solved by preconditioned conjugate gradients),
reweighted toward least absolute deviations; λ
(or no correction) is chosen by a shape split inside the fitted table itself (a quarter of its
(n, k) shapes predicted from the rest), so a held-out evaluation stays honest. Last, the residual
field (``costmodel/gemm_residual.py``) on what the correction leaves: its kernel widths along n and
k and its shrinkage (or no field) chosen by the same inner split, the correction refitted on its
three quarters so that the held-out quarter's residuals are as a new shape's would be.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import scipy.sparse as sp
import scipy.sparse.linalg  # noqa: F401  (sp.linalg)
from scipy.optimize import least_squares
from scipy.sparse.linalg import cg, spsolve

from .. import gemm_residual, gemm_serial
from ..gemm_correction import BOUND, corners, log_factor
from ..gemm_residual import Field, build
from ..gemm_tiles import GEMM_DTYPES, PARAMS, UNITS, element_bytes, grid, shortlist, times_on
from .fit import F_SCALE, LOSS, ClassFit, ape_stats
from .identify import identify

SUBSAMPLE = (
    2000  # rows of the first pass over every kernel; the second refines on all rows, each with its 6 likeliest kernels
)
KNOTS = 8  # correction knots per axis at least, and one per octave of the table's range (fewer
# where the table has fewer distinct values): tiles and split factors step by powers of two
LAMBDAS = (0.1, 0.3, 1.0)  # smoothness penalties tried by the inner shape split
RIDGE = 0.01  # pulls knots no row reaches toward no correction
FIELD = True  # fit the residual field (costmodel/gemm_residual.py)
FIELD_WIDTHS = tuple((hn, hk) for hn in (0.2, 0.3, 0.5, 1.0) for hk in (0.5, 1.0, 1.5, 2.0, 3.0))  # residual
# field kernel widths along n and k (grid steps) tried by the inner shape split
FIELD_SHRINK = (0.5, 0.75, 1.0)  # ... and its shrinkage
SERIAL = True  # look for the unsplit kernel's region (costmodel/gemm_serial.py)
SERIAL_NK = tuple(np.arange(16.0, 22.01, 0.5))  # log2 n·k bounds of the region tried
SERIAL_M = (2, 4, 8, 16, 32, 64, 128)  # row bounds tried
SERIAL_WIDE = True  # also look for the wide outputs' unsplit branch (n >= N, m <= M_w)
SERIAL_N = (512, 768, 1024, 1536, 2048, 3072, 4096)  # its least n tried
SERIAL_OVER = 1.1  # rows this much slower than the tile model set the unsplit kernel's line
SERIAL_GAIN = 0.01  # the least share of the held-out shapes' summed |log error| a region must remove
SERIAL_FOLDS = 4


def _grid(df: pd.DataFrame, sms: int) -> dict:
    """The tile model's grid of the rows; quantized rows (``dtype`` one of ``GEMM_DTYPES``) stream
    their weights and activations at that dtype's bytes per element."""
    mnk = (df["m"].to_numpy(float), df["n"].to_numpy(float), df["k"].to_numpy(float))
    dt = df["dtype"].astype(str).to_numpy() if "dtype" in df else np.array([], str)
    if not np.isin(dt, list(GEMM_DTYPES)).any():
        return grid(*mnk, sms)
    wx = np.array([element_bytes(d) for d in dt], float)
    return grid(*mnk, sms, 2.0, wx[:, 0], wx[:, 1])


@dataclass(frozen=True)
class GemmTilesFit(ClassFit):
    units: dict = None  # type: ignore[assignment]
    sms: int = 0
    corr_knots: tuple = ()
    corr: tuple = ()
    field: tuple = ()  # (m grid, shapes, residuals, h, a) of the residual field; (): none
    serial: tuple = ()  # [t0, tau, S, K, M] of the unsplit kernel's region (costmodel/gemm_serial.py); (): none

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        mnk = [df[c].to_numpy(float) for c in "mnk"]
        t = gemm_serial.apply(times_on(_grid(df, self.sms), self.values), *mnk, self.serial)  # type: ignore[call-arg]
        if self.corr:
            t = t * np.exp(log_factor(self.corr_knots, self.corr, *mnk))
        if self.field:
            t = t * np.exp(Field(*self.field)(*mnk))
        return t


def _knots(x: np.ndarray) -> list:
    lo, hi = float(np.log2(x.min())), float(np.log2(x.max()))
    num = min(max(KNOTS, int(np.ceil(hi - lo - 1e-9)) + 1), len(np.unique(x)))
    return [lo, lo + 1.0] if num < 2 or hi <= lo else [float(v) for v in np.linspace(lo, hi, num)]


def _design(knots, df: pd.DataFrame) -> sp.csr_matrix:
    idx, w = corners(knots, *(df[c].to_numpy(float) for c in "mnk"))
    size = len(knots[0]) * len(knots[1]) * len(knots[2])
    rows = np.tile(np.arange(len(df)), 8)
    return sp.csr_matrix((w.ravel(), (rows, idx.ravel())), shape=(len(df), size))


def _roughness(knots) -> sp.csr_matrix:
    """PᵀP of the second differences of the knot values along each axis."""
    shape = tuple(len(kn) for kn in knots)
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    blocks = []
    for ax in range(3):
        s = np.moveaxis(ids, ax, 0)
        if s.shape[0] >= 3:  # type: ignore[misc]
            cols = np.concatenate([s[:-2].ravel(), s[1:-1].ravel(), s[2:].ravel()])
            n = cols.size // 3
            vals = np.repeat([1.0, -2.0, 1.0], n)
            blocks.append(sp.csr_matrix((vals, (np.tile(np.arange(n), 3), cols)), shape=(n, ids.size)))
    P = sp.vstack(blocks) if blocks else sp.csr_matrix((0, ids.size))
    return (P.T @ P).tocsr()


def _spd_solve(M: sp.csr_matrix, rhs: np.ndarray, x0: np.ndarray | None) -> np.ndarray:
    """M x = rhs for the symmetric positive definite normal equations: conjugate gradients with a
    Jacobi preconditioner from the last sweep's solution (a direct factorisation fills in badly on
    the 3-d knot grid), a direct solve if they stall."""
    d = M.diagonal()
    pre = sp.linalg.LinearOperator(M.shape, matvec=lambda v: v / d)
    x, info = cg(M, rhs, x0=x0, rtol=1e-10, atol=0.0, maxiter=5000, M=pre)
    return x if info == 0 else spsolve(M.tocsc(), rhs)


def _solve(A: sp.csr_matrix, y: np.ndarray, PtP, lam: float, sweeps: int = 3) -> np.ndarray:
    n = len(y)
    reg = (PtP * (lam * lam) + sp.identity(A.shape[1]) * RIDGE**2) * (n / 1000.0)
    w, c = np.ones(n), None
    for _ in range(sweeps):
        c = _spd_solve((A.T @ sp.diags(w) @ A + reg).tocsr(), A.T @ (w * y), c)
        w = 1.0 / np.maximum(np.abs(A @ c - y), 0.02)
        w *= n / w.sum()
    return np.clip(c, -BOUND, BOUND)  # type: ignore[arg-type]


def _inner_split(df: pd.DataFrame) -> np.ndarray | None:
    """The inner shape split: a quarter of the table's (n, k) shapes (None under 4 shapes)."""
    key = np.unique(df[["n", "k"]].to_numpy(float), axis=0, return_inverse=True)[1].ravel()
    uniq = np.unique(key)
    if len(uniq) < 4:
        return None
    return np.isin(key, np.random.default_rng(0).choice(uniq, size=len(uniq) // 4, replace=False))


def fit_correction(df: pd.DataFrame, t_model: np.ndarray) -> tuple[tuple, tuple, float | None]:
    """(knots, values, λ) of the correction to ``t_model`` for the table's rows; () () None when
    the inner shape split finds that no correction predicts its held-out shapes better."""
    y = np.log(df["time_s"].to_numpy(float) / t_model)
    knots = [_knots(df[c].to_numpy(float)) for c in "mnk"]
    A, PtP = _design(knots, df), _roughness(knots)
    held = _inner_split(df)
    if held is None:
        return (), (), None
    score = lambda c: float(np.mean(np.abs(np.expm1(A[held] @ c - y[held]))))  # noqa: E731
    best, best_score = None, score(np.zeros(A.shape[1]))
    for lam in LAMBDAS:
        s = score(_solve(A[~held], y[~held], PtP, lam))
        if s < best_score:
            best, best_score = lam, s
    if best is None:
        return (), (), None
    c = _solve(A, y, PtP, best)
    return tuple(tuple(kn) for kn in knots), tuple(float(np.clip(round(v, 5), -BOUND, BOUND)) for v in c), best


def fit_field(df: pd.DataFrame, t_model: np.ndarray, lam: float | None, t_corrected: np.ndarray) -> tuple:
    """(m grid, shapes, residuals, h, a) of the residual field (``costmodel/gemm_residual.py``) on
    what the correction leaves of ``t_corrected``; () when the inner shape split finds no (h, a) that
    predicts its held-out shapes better than none. The split repeats the whole fit inside the
    table: the correction (at λ) refitted on three quarters of the shapes, the field built on their
    residuals, scored on the rest."""
    held = _inner_split(df)
    if held is None:
        return ()
    m, n, k, t = (df[c].to_numpy(float) for c in ("m", "n", "k", "time_s"))
    y = np.log(t / t_model)
    if lam is None:
        c_in = np.zeros(len(t))
    else:
        knots = [_knots(df[c].to_numpy(float)) for c in "mnk"]
        A = _design(knots, df)
        c_in = A @ _solve(A[~held], y[~held], _roughness(knots), lam)
    r = y - c_in
    grid, shapes, vals = build(m[~held], n[~held], k[~held], r[~held])
    score = lambda f: float(np.mean(np.abs(np.expm1(c_in[held] + f - y[held]))))  # noqa: E731
    best, best_score = None, score(0.0)
    uq, inv = np.unique(np.c_[n[held], k[held]], axis=0, return_inverse=True)
    for h in FIELD_WIDTHS:
        fld = Field(grid, shapes, vals, h, 1.0)
        raw = fld._at(fld.columns(uq[:, 0], uq[:, 1])[inv.ravel()], m[held])
        for a in FIELD_SHRINK:
            s = score(a * raw)
            if s < best_score:
                best, best_score = (h, a), s
    if best is None:
        return ()
    grid, shapes, vals = build(m, n, k, np.log(t / t_corrected))
    (hn, hk), a = best
    return (
        grid,
        shapes,
        [
            [
                float(np.clip(round(v, 5), -gemm_residual.BOUND, gemm_residual.BOUND))
                if np.isfinite(v)
                else float("nan")
                for v in row
            ]
            for row in vals
        ],
        (hn, hk),
        a,
    )


def _line(k: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(t0, tau) of t ≈ t0 + tau·k, least squares in relative error."""
    (t0, tau), *_ = np.linalg.lstsq(np.c_[1.0 / t, k / t], np.ones(len(t)), rcond=None)
    return float(t0), float(tau)


def _region_gain(r, m, k, t, b, err0, over):
    """(t0, tau, gain) of the unsplit kernel's line on the rows ``r``: least squares on the rows
    where it is the slower kernel, gain the summed |log error| it removes (None: no line)."""
    if r.sum() < 8:
        return None
    slow = r & over  # where the unsplit kernel is the slower, and so its time
    t0, tau = _line(k[slow], t[slow]) if slow.sum() >= 2 else _line(k[r], t[r])
    if t0 <= 0 or tau <= 0:
        return None
    return t0, tau, float((err0[r] - np.abs(np.log(np.maximum(b[r], t0 + tau * k[r]) / t[r]))).sum())


def _serial_search(m, n, k, t, b) -> tuple[tuple, float]:
    """The region [t0, tau, S, K, M] or [t0, tau, S, K, M, N, M_w] (``costmodel/gemm_serial.py``)
    that most lowers the summed |log error| of the tile model's times ``b`` on these rows, and what
    it removes (t0 and tau by least squares in relative error on the region's rows where it is the
    slower kernel): the narrow region first, then the wide branch added to it (or alone) where it
    removes SERIAL_GAIN more of the rows' summed |log error|."""
    near = (m >= 2) & (m <= max(SERIAL_M))
    m, n, k, t, b = m[near], n[near], k[near], t[near], b[near]
    err0 = np.abs(np.log(b / t))
    over = t > SERIAL_OVER * b
    best, best_gain = (), 0.0
    for s_exp in SERIAL_NK:
        for m_max in SERIAL_M:
            inner = (m <= m_max) & (n * k < 2.0**s_exp)
            for k_max in np.unique(k[inner]):
                g = _region_gain(inner & (k <= k_max), m, k, t, b, err0, over)
                if g is not None and g[2] > best_gain:
                    best, best_gain = (float(g[0]), float(g[1]), float(2.0**s_exp), float(k_max), float(m_max)), g[2]  # type: ignore[assignment]
    if not SERIAL_WIDE:
        return best, best_gain
    narrow = gemm_serial.region(m, n, k, best) if best else np.zeros(len(m), bool)
    s_k_m, need = best[2:5] if best else (1.0, 1.0, 2.0), best_gain + SERIAL_GAIN * float(err0.sum())
    for n_min in SERIAL_N:
        for m_max in SERIAL_M:
            g = _region_gain(narrow | ((m <= m_max) & (n >= n_min)), m, k, t, b, err0, over)
            if g is not None and g[2] > max(need, best_gain):
                best, best_gain = (float(g[0]), float(g[1]), *map(float, s_k_m), float(n_min), float(m_max)), g[2]  # type: ignore[assignment]
    return best, best_gain


def fit_serial(df: pd.DataFrame, base: np.ndarray) -> tuple:
    """[t0, tau, S, K, M] of the unsplit kernel's region (``costmodel/gemm_serial.py``) on the tile
    model's times ``base``, or () unless, over SERIAL_FOLDS folds of the table's (n, k) shapes, the
    regions found without each fold lower the summed |log error| of the folds' rows by SERIAL_GAIN
    of it (a shape split as for the correction, in folds because a region's rows are few); then
    the region is searched on every row."""
    key = np.unique(df[["n", "k"]].to_numpy(float), axis=0, return_inverse=True)[1].ravel()
    if key.max() + 1 < 2 * SERIAL_FOLDS:
        return ()
    fold = np.random.default_rng(0).permutation(key.max() + 1)[key] % SERIAL_FOLDS
    m, n, k, t = (df[c].to_numpy(float) for c in ("m", "n", "k", "time_s"))
    err0 = err1 = 0.0
    for f in range(SERIAL_FOLDS):
        out, into = fold != f, fold == f
        cand, _ = _serial_search(m[out], n[out], k[out], t[out], base[out])
        err0 += float(np.abs(np.log(base[into] / t[into])).sum())
        err1 += float(np.abs(np.log(gemm_serial.apply(base[into], m[into], n[into], k[into], cand) / t[into])).sum())
    if err0 - err1 < SERIAL_GAIN * err0:
        return ()
    return _serial_search(m, n, k, t, base)[0]


def fit_gemm_tiles(df: pd.DataFrame, form: str, upper: dict, sms: int, l2_bytes: float) -> GemmTilesFit:
    t = df["time_s"].to_numpy(float)
    g = _grid(df, sms)
    beta_cap = upper.get("beta", np.inf)
    spec = {
        "pi": upper.get("pi", np.inf),
        "beta": beta_cap,
        "beta_cta": beta_cap,
        "l2": l2_bytes,
        "l2_out": l2_bytes,
        "l2_act": l2_bytes,
    }
    cap = np.array([spec.get(p, np.inf) for p in PARAMS])
    F, B = df["flops"].to_numpy(float), df["bytes"].to_numpy(float)
    env = lambda q: float(np.max(q / t))  # noqa: E731  (upper envelope of a rate)
    p0 = np.array(
        [
            0.7 * env(F),
            0.7 * env(B),
            3 * env(B),
            0.02 * env(B),
            0.5 * t.min(),
            0.5 * t.min(),
            0.1 * t.min(),
            0.5 * l2_bytes,
            0.5 * l2_bytes,
            0.5 * l2_bytes,
        ]
    )
    p0 = np.where(p0 >= cap, 0.5 * cap, p0)
    hi = np.minimum(np.log(1e4), np.log(cap / p0))
    lo = np.full(len(PARAMS), -np.log(1e4))
    sub = np.random.default_rng(0).permutation(len(t))[:SUBSAMPLE]
    gs = {k: (v[:, sub] if isinstance(v, np.ndarray) else v) for k, v in g.items()}
    x0 = least_squares(
        lambda x: np.log(times_on(gs, p0 * np.exp(x)) / t[sub]),
        np.zeros(len(PARAMS)),
        bounds=(lo, hi),
        loss=LOSS,
        f_scale=F_SCALE,
        method="trf",
        ftol=1e-4,
        tr_solver="lsmr",
    ).x
    short = shortlist(g, p0 * np.exp(x0))
    res = least_squares(
        lambda x: np.log(times_on(short, p0 * np.exp(x)) / t),
        x0,
        bounds=(lo, hi),
        loss=LOSS,
        f_scale=F_SCALE,
        method="trf",
        ftol=1e-4,
        tr_solver="lsmr",
    )
    values = p0 * np.exp(res.x)
    mnk = [df[c].to_numpy(float) for c in "mnk"]
    serial = fit_serial(df, times_on(g, values)) if SERIAL else ()
    if serial:  # the tile constants again without the unsplit kernel's rows, then its region on them
        keep = ~gemm_serial.region(*mnk, serial)  # type: ignore[call-arg]
        short_k = {key: (v[:, keep] if isinstance(v, np.ndarray) else v) for key, v in short.items()}
        res = least_squares(
            lambda x: np.log(times_on(short_k, p0 * np.exp(x)) / t[keep]),
            res.x,
            bounds=(lo, hi),
            loss=LOSS,
            f_scale=F_SCALE,
            method="trf",
            ftol=1e-4,
            tr_solver="lsmr",
        )
        values = p0 * np.exp(res.x)
        serial = fit_serial(df, times_on(g, values)) or serial
    active, cov, s2, warns = identify("gemm", PARAMS, values, lambda v: times_on(g, v), res, len(res.fun), cap, UNITS)
    base = gemm_serial.apply(times_on(g, values), *mnk, serial)  # type: ignore[call-arg]
    knots, corr, lam = fit_correction(df, base)
    corrected = base * np.exp(log_factor(knots, corr, *mnk)) if corr else base
    field = fit_field(df, base, lam, corrected) if FIELD else ()
    out = GemmTilesFit(
        "gemm",
        form,
        PARAMS,
        values,
        cov,
        float(np.sqrt(s2)),
        active,
        {},
        tuple(warns),
        units=dict(UNITS),
        sms=sms,
        corr_knots=knots,
        corr=corr,
        field=field,
        serial=serial,
    )
    return replace(out, errors=ape_stats(out.predict(df), t))
