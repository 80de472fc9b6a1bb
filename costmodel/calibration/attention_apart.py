"""Kernel-separate attention tables (AIConfigurator's: context and generation kernels timed apart)
fitted as two problems, one per kernel.

No row of such a table has both a prefill and a decode part, and no parameter prices both
(``operator_models.touched_rows``), so the joint least-squares problem is block-diagonal: its
solution is the two fits'. Solved jointly, though, the two blocks share one trust region, one
stopping rule and, for the decode model's structure (grouping, split, MMHA occupancy:
``operator_models._grouping``), one sample whose cost mixed in the context rows' noise: B200's
choice of split then moved with the context terms (held out 4.9 with its gen split, 5.4 once the
context terms joined the joint fit). Apart, each kernel's fit sees only its own rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .fit import ape_stats


def kernel_rows(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(prefill rows, decode rows) as boolean masks: a row with a prefill part, one with decodes."""
    f, fd = df["flops"].to_numpy(float), df["decode_flops"].to_numpy(float)
    return f > fd, fd > 0


def apart(df: pd.DataFrame, params) -> bool:
    """Whether the table is kernel-separate with both kernels in it and the unit decode model."""
    pre, dec = kernel_rows(df)
    return "unit" in params and "pi_mixed" not in params and pre.any() and dec.any() and not (pre & dec).any()  # type: ignore[return-value]


def fit_apart(df: pd.DataFrame, params, form: str, upper: dict, sms: int, l2: float, tile: int):
    """One ModelFit over ``params`` from the context rows' fit (prefill parameters) and the
    generation rows' fit (decode parameters), each with its own covariance block and warnings."""
    from .operator_models import PREFILL_ONLY, UNITS, ModelFit, base_name, fit_model_class, model_times

    pre, dec = kernel_rows(df)
    fp = fit_model_class(df[pre].reset_index(drop=True), "attention", form, upper, sms, l2, tile)
    fd = fit_model_class(df[dec].reset_index(drop=True), "attention", form, upper, sms, l2, tile)
    own = [fp if p in PREFILL_ONLY else fd for p in params]
    idx = [f.params.index(p) for f, p in zip(own, params)]
    values = np.array([f.values[j] for f, j in zip(own, idx)])
    cov = np.full((len(params), len(params)), np.inf)
    for f in (fp, fd):
        mine = [i for i, o in enumerate(own) if o is f]
        cov[np.ix_(mine, mine)] = f.log_cov[np.ix_([idx[i] for i in mine], [idx[i] for i in mine])]
    warns = tuple(
        w
        for f in (fp, fd)
        for w in f.warnings
        if any(w.startswith(f"attention.{p} ") and o is f for p, o in zip(params, own))
    )
    n_p, n_d = int(pre.sum()), int(dec.sum())
    s = float(np.sqrt((fp.s**2 * n_p + fd.s**2 * n_d) / (n_p + n_d)))
    active = {p: o.active[p] for p, o in zip(params, own)}
    groups = fd.groups
    errors = ape_stats(
        model_times("attention", params, values, df, sms, groups, fp.q_tile), df["time_s"].to_numpy(float)
    )
    return ModelFit(
        "attention",
        form,
        tuple(params),
        values,
        cov,
        s,
        active,
        errors,
        warns,
        units={p: UNITS[base_name(p)] for p in params},
        sms=sms,
        groups=groups,
        q_tile=fp.q_tile,
    )
