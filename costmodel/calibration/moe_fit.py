"""Fit the fused-MoE layer of ``costmodel/moe_cost.py`` to measured fused-MoE timings.

Rows are the tidy table's moe rows (``timings.py``: tokens, hidden k, expert width n, top-k heads,
experts kv_heads, tp, ep workers, seqs = the experts the routing touches). Fitted like the other
kernel models (log residuals, soft_l1, parameters as ln(p/p0), 1σ from the Jacobian, spec caps).

Two compute rates. SGLang's Triton fused MoE runs a tuned kernel config when it ships one for the
layer's (E, N = I/tp, GPU, dtype) and a default one otherwise (``fused_moe_triton``:
``get_config_file_name``, ``get_default_config``); in AIConfigurator's H100 table the shapes with a
tuned config run 2–2.3× faster once compute-bound (8 experts at N = 1,792–7,168, 128 at N = 192–768)
while every other shape sits within 16 % of one rate. So the fit runs twice: with one π, then,
if some (E, N) shapes' compute-bound rows (compute ≥ 2× the weight streaming) run at least
TUNED_RATIO faster than it predicts, with a second π for those shapes (``tuned``), which a profile
keeps (``moe_tuned_shapes``) so that a model of such a shape is priced at it. A shape the fit never
saw gets the default rate: which shapes the engine has tuned is not a law of the shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from .. import moe_cost
from .fit import F_SCALE, LOSS, ClassFit, ape_stats
from .identify import identify

PARAMS = tuple(f"{p}_moe" for p in moe_cost.PARAMS)
TUNED = "pi_tuned_moe"
UNITS = {**{f"{p}_moe": u for p, u in moe_cost.UNITS.items()}, TUNED: "FLOP/s"}
TUNED_RATIO = 1.3
COMPUTE_BOUND = 2.0


def shapes(df: pd.DataFrame) -> list:
    """(E, N) per row: experts and the expert width per GPU."""
    return list(zip(df["kv_heads"].astype(int), (df["n"] / df["tp"]).round().astype(int)))


def _cols(df: pd.DataFrame):
    return [df[c].to_numpy(float) for c in ("tokens", "k", "n", "tp", "workers", "heads", "seqs")]


def moe_times(v: np.ndarray, params, df: pd.DataFrame, tuned=()) -> np.ndarray:
    p = dict(zip(params, v))
    pi = p["pi_moe"]
    if tuned and TUNED in p:
        pi = np.where(np.array([s in set(tuned) for s in shapes(df)]), p[TUNED], pi)
    return moe_cost.moe_time(*_cols(df), pi, p["beta_moe"], p["floor_moe"], p["pad_moe"], p["depth_moe"])  # type: ignore[call-arg]


def _compute_share(v: np.ndarray, df: pd.DataFrame) -> np.ndarray:
    """Per row, compute time over weight-streaming time at the fitted constants."""
    T, H, inter, tp, ep, k, u = _cols(df)
    pi, beta, _, pad, depth = v[:5]
    n = inter / tp
    comp = 2.0 * (T * k / ep + pad * u) * (3.0 * H * n + depth * (2.0 * n + H)) / pi
    return comp * beta / (2.0 * (3.0 * H * n * u + 2.0 * H * T * k / ep))


def tuned_shapes(v: np.ndarray, df: pd.DataFrame) -> tuple:
    """The (E, N) shapes whose compute-bound rows run at least TUNED_RATIO faster than predicted."""
    ratio = moe_times(v, PARAMS, df) / df["time_s"].to_numpy(float)
    bound = _compute_share(v, df) >= COMPUTE_BOUND
    d = pd.DataFrame({"shape": shapes(df), "ratio": ratio})[bound]
    med = d.groupby("shape")["ratio"].median()
    return tuple(sorted(s for s, r in med.items() if r >= TUNED_RATIO))


@dataclass(frozen=True)
class MoeFit(ClassFit):
    units: dict = None  # type: ignore[assignment]
    tuned: tuple = ()

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return moe_times(self.values, self.params, df, self.tuned)


def _solve(df: pd.DataFrame, form: str, params, tuned, upper: dict, p0: np.ndarray) -> MoeFit:
    t = df["time_s"].to_numpy(float)
    cap = np.array([upper.get(p, np.inf) for p in params])
    p0 = np.where(p0 >= cap, 0.5 * cap, p0)
    fn = lambda x: np.log(moe_times(p0 * np.exp(x), params, df, tuned) / t)  # noqa: E731
    res = least_squares(
        fn,
        np.zeros(len(params)),
        bounds=(np.full(len(params), -np.log(1e6)), np.log(cap / p0)),
        loss=LOSS,
        f_scale=F_SCALE,
        method="trf",
    )
    values = p0 * np.exp(res.x)
    units = {p: UNITS[p] for p in params}
    active, cov, s2, warns = identify(
        "moe", params, values, lambda v: moe_times(v, params, df, tuned), res, len(t), cap, units
    )
    errors = ape_stats(moe_times(values, params, df, tuned), t)
    return MoeFit(
        "moe",
        form,
        tuple(params),
        values,
        cov,
        float(np.sqrt(s2)),
        active,
        errors,
        tuple(warns),
        units=units,
        tuned=tuple(tuned),
    )


def fit_moe(df: pd.DataFrame, form: str, upper: dict) -> MoeFit:
    """The five constants, then a tuned shapes' π if the first fit finds such shapes."""
    t = df["time_s"].to_numpy(float)
    f, b = df["flops"].to_numpy(float), df["bytes"].to_numpy(float)
    p0 = np.array([float(np.max(f / t)), float(np.max(b / t)), 0.5 * float(np.min(t)), 8.0, 64.0])
    one = _solve(df, form, PARAMS, (), upper, p0)
    tuned = tuned_shapes(one.values, df)
    if not tuned:
        return one
    start = np.append(one.values, TUNED_RATIO * one.values[0])
    return _solve(df, form, PARAMS + (TUNED,), tuned, upper, start)
