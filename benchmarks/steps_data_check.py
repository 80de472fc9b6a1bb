"""How consistent Splitwise's BLOOM-176B prefill times are with any step model monotone in rows
(bench_steps.py prints these): the bound a model family puts on the step-level bar, from the data.

The family: a prefill of b prompts of p tokens (rows r = p·b) costs

  T = F + S·b + A·b·p² + r·g(r),   F, S, A >= 0,  g monotone in r

F a fixed cost per step (host, launches), S per sequence (host, sampling, attention's per-sequence
part), A attention's quadratic part, g the cost of one row of every GEMM and all-reduce, any
function of the rows that only rises (throttling, a rows regime) or only falls (tile/wave
quantisation). Every step model in chunksim (and roofline, tile or unit forms) is inside it.
For fixed (F, S, A), the best g is a weighted isotonic regression (pool adjacent violators).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import minimize


def isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of y (pool adjacent violators)."""
    blocks = []
    for yi, wi in zip(y, w):
        blocks.append([yi, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return np.concatenate([[v] * c for v, _, c in blocks])


def medians(raw: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Per (prompt, batch): median, min and max prefill ms over the repeats, and their count."""
    g = raw[raw.hardware == gpu].groupby(["prompt_size", "batch_size"]).prompt_time
    return g.agg(["median", "min", "max", "size"]).reset_index()


def fit_monotone(cfg: pd.DataFrame):
    """Best member of the family (g non-decreasing) for the configurations' medians, by least
    squares on relative error: a function (prompt, batch) -> ms."""
    p, b, T = (cfg[c].to_numpy(float) for c in ("prompt_size", "batch_size", "median"))
    rows = p * b
    ur, inv = np.unique(rows, return_inverse=True)
    w = (rows / T) ** 2

    def parts(x):
        F, S, A = np.abs(x)
        y = (T - F - S * b - A * b * p * p) / rows
        yy = np.array([np.average(y[inv == k], weights=w[inv == k]) for k in range(len(ur))])
        ww = np.array([w[inv == k].sum() for k in range(len(ur))])
        return F, S, A, np.maximum(isotonic(yy, ww), 0.0)

    def loss(x):
        F, S, A, g = parts(x)
        return float((((F + S * b + A * b * p * p + rows * g[inv]) / T - 1) ** 2).sum())

    starts = ([50, 1, 1e-6], [100, 0.1, 1e-5], [10, 5, 1e-7], [150, 0.01, 0.0])
    best = min((minimize(loss, x0, method="Nelder-Mead", options=dict(maxiter=4000, xatol=1e-6, fatol=1e-12))
                for x0 in starts), key=lambda r: r.fun)
    F, S, A, g = parts(best.x)
    return lambda pp, bb: F + S * bb + A * bb * pp * pp + pp * bb * np.interp(np.log(pp * bb), np.log(ur), g)


def report(raw: pd.DataFrame, gpu: str, held: set, other: str | None = None) -> list[str]:
    """Lines for bench_steps: repeat spread, the 512-prompt bound, the family fitted on all and on
    the training configurations, and the ratio to another GPU's medians."""
    m = medians(raw, gpu)
    out = ["  data check (benchmarks/steps_data_check.py):"]
    spread = ", ".join(f"{int(r.prompt_size)}x{int(r.batch_size)} {100 * (r['max'] / r['min'] - 1):.1f}"
                       for _, r in m.iterrows())
    out.append(f"    prefill repeat spread max/min - 1 (%): {spread}")
    rr = raw[raw.hardware == gpu].merge(m, on=["prompt_size", "batch_size"])
    is_held = np.array([(p, b) in held for p, b in zip(rr.prompt_size, rr.batch_size)])
    noise = np.abs(rr.prompt_time / rr["median"] - 1)[is_held].mean() * 100
    out.append(f"    held-out prefill steps around their own configuration's median: MAPE {noise:.2f} % (the floor)")
    t = m[m.prompt_size == 512].set_index("batch_size")["median"]
    if all(k in t.index for k in (1, 8, 16, 32)):
        up = max((t[1] + t[32]) / 2, 2 * t[8])
        out.append(f"    512x16: any member reproducing 512x1, 512x8 and 512x32 prices it at most max((T1 + T32)/2, 2·T8) "
                   f"= {up:.0f} ms, measured {t[16]:.0f} ms ({100 * (up / t[16] - 1):+.1f} %)")
    pb = m[["prompt_size", "batch_size"]].to_numpy(float)
    f_all = fit_monotone(m)
    e_all = f_all(pb[:, 0], pb[:, 1]) / m["median"].to_numpy() - 1
    h = np.array([(int(p), int(b)) in held for p, b in pb])
    cells = ", ".join(f"{int(p)}x{int(b)} {100 * e:+.1f}" for (p, b), e in zip(pb, e_all))
    out.append(f"    best monotone member fitted on every configuration (held-out ones too): {cells}; "
               f"MAPE {100 * np.abs(e_all).mean():.2f} %, over the held-out configurations {100 * np.abs(e_all[h]).mean():.2f} %")
    f_tr = fit_monotone(m[~h])
    e_te = f_tr(pb[h, 0], pb[h, 1]) / m["median"].to_numpy()[h] - 1
    cells = ", ".join(f"{int(p)}x{int(b)} {100 * e:+.1f}" for (p, b), e in zip(pb[h], e_te))
    out.append(f"    best monotone member fitted on the training configurations, held out predicted: {cells}; "
               f"MAPE {100 * np.abs(e_te).mean():.2f} %")
    if other:
        o = medians(raw, other).set_index(["prompt_size", "batch_size"])["median"]
        ratio = ", ".join(f"{int(r.prompt_size)}x{int(r.batch_size)} {r['median'] / o[(r.prompt_size, r.batch_size)]:.2f}"
                          for _, r in m.iterrows() if (r.prompt_size, r.batch_size) in o.index)
        out.append(f"    prefill median / {other}'s: {ratio}")
    return out


def provenance_notes(raw: pd.DataFrame) -> list[str]:
    """Facts about the file itself that a fit should know: duplicated rows, derived rows."""
    dup = raw[raw.duplicated(keep=False)].groupby(["hardware", "prompt_size", "batch_size"]).size()
    out = [f"  exact duplicate rows: {', '.join(f'{h} {p}x{b}: {n}' for (h, p, b), n in dup.items()) or 'none'}"]
    a, c = raw[raw.hardware == "h100-80gb"].reset_index(drop=True), raw[raw.hardware == "h100-80gb-pcap"].reset_index(drop=True)
    if len(a) and len(a) == len(c):
        rp, rd = c.prompt_time / a.prompt_time, c.token_time / a.token_time
        out.append(f"  h100-80gb-pcap / h100-80gb row by row: prefill x{rp.min():.4f}..{rp.max():.4f}, decode "
                   f"x{rd.min():.4f}..{rd.max():.4f} (derived by a formula, not measured: no evidence on throttling)")
    return out
