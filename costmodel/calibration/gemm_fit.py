"""Fitting the tile/wave GEMM model (``costmodel/gemm_tiles.py``) to measured GEMM times.

Used for class "gemm" under the "physical" form when the spec gives the GPU's SM count and L2
size. Two passes keep it fast: every candidate kernel on a 2,000-row sample, then all rows with
each row's six fastest kernels at the first pass's constants (predictions use every kernel). Same conventions as the other classes: log residuals, soft_l1, parameters as ln(p/p0),
1σ from the Jacobian; π, β and the L2-resident capacity are capped at the spec sheet (a fit that
lands on a cap says so), the per-thread-block bandwidth at β.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..gemm_tiles import PARAMS, UNITS, grid, shortlist, times_on
from .fit import F_SCALE, LOSS, ClassFit, ape_stats
from .identify import identify


SUBSAMPLE = 2000   # rows of the first pass over every kernel; the second refines on all rows, each with its 6 likeliest kernels


def _grid(df: pd.DataFrame, sms: int) -> dict:
    return grid(df["m"].to_numpy(float), df["n"].to_numpy(float), df["k"].to_numpy(float), sms)


@dataclass(frozen=True)
class GemmTilesFit(ClassFit):
    units: dict = None
    sms: int = 0

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return times_on(_grid(df, self.sms), self.values)


def fit_gemm_tiles(df: pd.DataFrame, form: str, upper: dict, sms: int, l2_bytes: float) -> GemmTilesFit:
    t = df["time_s"].to_numpy(float)
    g = _grid(df, sms)
    beta_cap = upper.get("beta", np.inf)
    spec = {"pi": upper.get("pi", np.inf), "beta": beta_cap, "beta_cta": beta_cap, "l2": l2_bytes, "l2_out": l2_bytes}
    cap = np.array([spec.get(p, np.inf) for p in PARAMS])
    F, B = df["flops"].to_numpy(float), df["bytes"].to_numpy(float)
    env = lambda q: float(np.max(q / t))  # noqa: E731  (upper envelope of a rate)
    p0 = np.array([0.7 * env(F), 0.7 * env(B), 3 * env(B), 0.02 * env(B), 0.5 * t.min(), 0.5 * t.min(),
                   0.1 * t.min(), 0.5 * l2_bytes, 0.5 * l2_bytes])
    p0 = np.where(p0 >= cap, 0.5 * cap, p0)
    hi = np.minimum(np.log(1e4), np.log(cap / p0))
    lo = np.full(len(PARAMS), -np.log(1e4))
    sub = np.random.default_rng(0).permutation(len(t))[:SUBSAMPLE]
    gs = {k: (v[:, sub] if isinstance(v, np.ndarray) else v) for k, v in g.items()}
    x0 = least_squares(lambda x: np.log(times_on(gs, p0 * np.exp(x)) / t[sub]), np.zeros(len(PARAMS)),
                       bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", ftol=1e-4, tr_solver="lsmr").x
    short = shortlist(g, p0 * np.exp(x0))
    res = least_squares(lambda x: np.log(times_on(short, p0 * np.exp(x)) / t), x0,
                        bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", tr_solver="lsmr")
    values = p0 * np.exp(res.x)
    active, cov, s2, warns = identify("gemm", PARAMS, values, lambda v: times_on(g, v), res, len(t), cap, UNITS)
    base = np.log(times_on(g, values))
    return GemmTilesFit("gemm", form, PARAMS, values, cov, float(np.sqrt(s2)), active,
                        ape_stats(np.exp(base), t), tuple(warns), units=dict(UNITS), sms=sms)
