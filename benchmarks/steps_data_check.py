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


def fit_monotone(cfg: pd.DataFrame, over: np.ndarray | None = None):
    """Best member of the family (g non-decreasing) for the configurations' medians, by least
    squares on relative error: a function (prompt, batch) -> ms. With ``over`` (each configuration's
    recorded peak power above TDP, a fraction) the rows term is also scaled by 1 + k·over, k >= 0
    fitted, and the function takes (prompt, batch, over)."""
    p, b, T = (cfg[c].to_numpy(float) for c in ("prompt_size", "batch_size", "median"))
    rows = p * b
    ur, inv = np.unique(rows, return_inverse=True)
    w = (rows / T) ** 2
    o = np.zeros(len(T)) if over is None else np.asarray(over, float)

    def parts(x):
        F, S, A, k = np.abs(x) if over is not None else (*np.abs(x), 0.0)
        y = (T - F - S * b - A * b * p * p) / (rows * (1 + k * o))
        yy = np.array([np.average(y[inv == j], weights=w[inv == j]) for j in range(len(ur))])
        ww = np.array([w[inv == j].sum() for j in range(len(ur))])
        return F, S, A, k, np.maximum(isotonic(yy, ww), 0.0)

    def loss(x):
        F, S, A, k, g = parts(x)
        return float((((F + S * b + A * b * p * p + rows * (1 + k * o) * g[inv]) / T - 1) ** 2).sum())

    starts = ([50, 1, 1e-6], [100, 0.1, 1e-5], [10, 5, 1e-7], [150, 0.01, 0.0])
    if over is not None:
        starts = tuple(x + [k] for x in starts for k in (1.0, 10.0))
    opts = dict(maxiter=4000, xatol=1e-6, fatol=1e-12) if over is None else dict(maxiter=6000, xatol=1e-7, fatol=1e-13)
    best = min((minimize(loss, x0, method="Nelder-Mead", options=opts) for x0 in starts), key=lambda r: r.fun)
    F, S, A, k, g = parts(best.x)
    f = lambda pp, bb, oo=0.0: (
        F
        + S * bb
        + A * bb * pp * pp  # noqa: E731
        + pp * bb * (1 + k * oo) * np.interp(np.log(pp * bb), np.log(ur), g)
    )
    f.k = k
    return f


def power_check(raw: pd.DataFrame, gpu: str, held: set) -> list[str]:
    """What the recorded power (peak and average, fractions of TDP; no clocks) says about the
    prefill cost per token, and two ways of using it, neither a predictive model."""
    r = raw[raw.hardware == gpu]
    m = medians(raw, gpu).merge(
        r.groupby(["prompt_size", "batch_size"], as_index=False).agg(
            peak=("peak_power", "max"), avg=("average_power", "max")
        )
    )
    if not (m.peak > 0).any():
        return ["    power: not recorded for this GPU"]
    m["per_token"] = m["median"] / (m.prompt_size * m.batch_size)
    rec = m[m.peak > 0]
    cells = ", ".join(
        f"{int(x.prompt_size)}x{int(x.batch_size)} {x.per_token:.3f} ms/token at peak {x.peak:.3f} avg {x.avg:.3f}"
        for x in rec.itertuples()
    )
    big = rec[rec.prompt_size * rec.batch_size >= 1024]
    out = [
        f"    power recorded (one value per configuration, constant over its repeats): {cells}; "
        f"{len(m) - len(rec)} configurations without ({', '.join(f'{int(x.prompt_size)}x{int(x.batch_size)}' for x in m[m.peak == 0].itertuples())})",
        f"    from 1024 rows up every recorded peak is at the power limit ({big.peak.min():.3f}-{big.peak.max():.3f} of TDP), "
        f"the cheapest configuration per token ({big.per_token.min():.3f} ms) as much as the dearest ({big.per_token.max():.3f}): "
        "the record says the steps reached the limit, not by how much any was throttled",
    ]
    h = np.array([(int(p), int(b)) in held for p, b in zip(m.prompt_size, m.batch_size)])
    over = np.maximum(m.peak.to_numpy() - 1, 0.0)
    f = fit_monotone(m[~h], over[~h])
    pb = m[["prompt_size", "batch_size"]].to_numpy(float)
    e = f(pb[h, 0], pb[h, 1], over[h]) / m["median"].to_numpy()[h] - 1
    out.append(
        f"    the family with its rows term scaled by 1 + k·(peak - 1), fitted on the training configurations: k = {f.k:.1f}, "
        f"held out {', '.join(f'{int(p)}x{int(b)} {100 * x:+.1f}' for (p, b), x in zip(pb[h], e))}; MAPE {100 * np.abs(e).mean():.2f} % "
        "(not adopted: it reads each held-out step's own measured peak power, which a simulator never has, "
        "and no law ties a 1-3 % overshoot of the limit to a throttle k times as deep)"
    )
    s = m[m.peak > 0].reset_index(drop=True)
    hs = np.array([(int(p), int(b)) in held for p, b in zip(s.prompt_size, s.batch_size)])
    if hs.any() and (~hs).sum() >= 4:
        fs = fit_monotone(s[~hs])
        es = fs(s.prompt_size[hs].to_numpy(float), s.batch_size[hs].to_numpy(float)) / s["median"][hs].to_numpy() - 1
        out.append(
            f"    the family fitted on the power-recorded training configurations only: held out "
            f"{', '.join(f'{int(p)}x{int(b)} {100 * x:+.1f}' for p, b, x in zip(s.prompt_size[hs], s.batch_size[hs], es))}; "
            f"MAPE {100 * np.abs(es).mean():.2f} % (not adopted: it drops the other session's 16384- and 32768-row "
            "configurations because they break monotonicity; where the sessions overlap, 512x1, they agree)"
        )
    return out


def report(raw: pd.DataFrame, gpu: str, held: set, other: str | None = None) -> list[str]:
    """Lines for bench_steps: repeat spread, the 512-prompt bound, the family fitted on all and on
    the training configurations, and the ratio to another GPU's medians."""
    m = medians(raw, gpu)
    out = ["  data check (benchmarks/steps_data_check.py):"]
    spread = ", ".join(
        f"{int(r.prompt_size)}x{int(r.batch_size)} {100 * (r['max'] / r['min'] - 1):.1f}" for _, r in m.iterrows()
    )
    out.append(f"    prefill repeat spread max/min - 1 (%): {spread}")
    rr = raw[raw.hardware == gpu].merge(m, on=["prompt_size", "batch_size"])
    is_held = np.array([(p, b) in held for p, b in zip(rr.prompt_size, rr.batch_size)])
    noise = np.abs(rr.prompt_time / rr["median"] - 1)[is_held].mean() * 100
    out.append(f"    held-out prefill steps around their own configuration's median: MAPE {noise:.2f} % (the floor)")
    t = m[m.prompt_size == 512].set_index("batch_size")["median"]
    if all(k in t.index for k in (1, 8, 16, 32)):
        up = max((t[1] + t[32]) / 2, 2 * t[8])
        out.append(
            f"    512x16: any member reproducing 512x1, 512x8 and 512x32 prices it at most max((T1 + T32)/2, 2·T8) "
            f"= {up:.0f} ms, measured {t[16]:.0f} ms ({100 * (up / t[16] - 1):+.1f} %)"
        )
    pb = m[["prompt_size", "batch_size"]].to_numpy(float)
    f_all = fit_monotone(m)
    e_all = f_all(pb[:, 0], pb[:, 1]) / m["median"].to_numpy() - 1
    h = np.array([(int(p), int(b)) in held for p, b in pb])
    cells = ", ".join(f"{int(p)}x{int(b)} {100 * e:+.1f}" for (p, b), e in zip(pb, e_all))
    out.append(
        f"    best monotone member fitted on every configuration (held-out ones too): {cells}; "
        f"MAPE {100 * np.abs(e_all).mean():.2f} %, over the held-out configurations {100 * np.abs(e_all[h]).mean():.2f} %"
    )
    f_tr = fit_monotone(m[~h])
    e_te = f_tr(pb[h, 0], pb[h, 1]) / m["median"].to_numpy()[h] - 1
    cells = ", ".join(f"{int(p)}x{int(b)} {100 * e:+.1f}" for (p, b), e in zip(pb[h], e_te))
    out.append(
        f"    best monotone member fitted on the training configurations, held out predicted: {cells}; "
        f"MAPE {100 * np.abs(e_te).mean():.2f} %"
    )
    out.append(
        "    a GPU held at its power limit is in the family: GEMM time max(W, c·r, (E_w + E_r·r) / TDP) (weights, "
        "compute at full clock, energy per step and per row over the spec sheet's TDP) is a maximum of lines in r, "
        "so convex, and a convex f is f(0) + r·g(r) with g = (f(r) - f(0))/r rising: the 512x16 bound above "
        "holds for every such power model, whatever its energies"
    )
    out += power_check(raw, gpu, held)
    if other:
        o = medians(raw, other).set_index(["prompt_size", "batch_size"])["median"]
        ratio = ", ".join(
            f"{int(r.prompt_size)}x{int(r.batch_size)} {r['median'] / o[(r.prompt_size, r.batch_size)]:.2f}"
            for _, r in m.iterrows()
            if (r.prompt_size, r.batch_size) in o.index
        )
        out.append(f"    prefill median / {other}'s: {ratio}")
    return out


def provenance_notes(raw: pd.DataFrame) -> list[str]:
    """Facts about the file itself that a fit should know: duplicated rows, derived rows."""
    dup = raw[raw.duplicated(keep=False)].groupby(["hardware", "prompt_size", "batch_size"]).size()
    out = [f"  exact duplicate rows: {', '.join(f'{h} {p}x{b}: {n}' for (h, p, b), n in dup.items()) or 'none'}"]
    a, c = (
        raw[raw.hardware == "h100-80gb"].reset_index(drop=True),
        raw[raw.hardware == "h100-80gb-pcap"].reset_index(drop=True),
    )
    if len(a) and len(a) == len(c):
        rp, rd = c.prompt_time / a.prompt_time, c.token_time / a.token_time
        out.append(
            f"  h100-80gb-pcap / h100-80gb row by row: prefill x{rp.min():.4f}..{rp.max():.4f}, decode "
            f"x{rd.min():.4f}..{rd.max():.4f} (derived by a formula, not measured: no evidence on throttling)"
        )
    return out
