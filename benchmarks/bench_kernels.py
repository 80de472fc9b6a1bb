"""Kernel-level accuracy of the fitted operator models, held out by shape, and the fit's speed.

    python benchmarks/bench_kernels.py [--gpu a100-sxm ...]  # everything (a few minutes)
    python benchmarks/bench_kernels.py --only gemm    # one operator class (gemm, attention, allreduce, moe): its
                                                      # held-out table (same draws as the whole run) and its in-sample fit
    python benchmarks/bench_kernels.py --only wideep  # H200 DeepEP all-to-all, grouped-GEMM MoE, MLA
                                                      # (calibration/wideep_fit.py), held out by shape
    python benchmarks/bench_kernels.py --quantized [--dtype fp8 ...]  # the quantized GEMM fits (gemm_dtypes):
                                                      # held out by shape, all rows and decode-size rows

For each AIConfigurator GPU (H100, A100, B200, L40S): fit on 3/4 of the whole shapes (GEMM (n, k),
attention head configurations, all-reduce sizes, fused-MoE model configurations), predict the rest;
MAPE / median / p90 per group, over 3 draws of the held-out shapes; then per GPU count the
all-reduce's held-out error by message size with the data's monotone floors, and the fused MoE
per configuration (as drawn, and each configuration held out in turn). Then the same on LLMServingSim's two profile folders (one
model each, so attention is held out by context-length bucket). Then the time of one fit of a
40k-row table. Needs ../shared/data.

How each figure moved as the kernel models grew, the terms tried and dropped, and what the
data themselves limit: docs/kernel-notes.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_profiles import (  # noqa: E402
    DATA,
    GEMM_DTYPES_FITTED,
    GPUS,
    base_of,
    dtype_base,
    load,
    load_gemm_dtype,
)

from costmodel import load_hardware  # noqa: E402
from costmodel.calibration.allreduce_model import NCCL_REFERENCE  # noqa: E402
from costmodel.calibration.fit import fit  # noqa: E402
from costmodel.calibration.holdout import error_table, group_of, split_by_shape  # noqa: E402
from costmodel.calibration.importers import read_llmservingsim  # noqa: E402
from costmodel.errors import InputError  # noqa: E402
from costmodel.gemm_tiles import GEMM_DTYPES  # noqa: E402

LSS = ROOT.parent / "shared" / "data" / "validation" / "llmservingsim" / "profiles"
FOLDERS = {
    "RTX 4090 / Llama-3.1-8B": ("RTX4090/meta-llama/Llama-3.1-8B/bf16", "rtx4090"),
    "RTX PRO 6000 / Qwen3-32B tp2": ("RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2", "rtx-pro-6000"),
}
SEEDS = (0, 1, 2)


def held_out(df: pd.DataFrame, spec, rows: list | None = None, only: str | None = None) -> pd.DataFrame:
    """Error table per group over the draws; ``rows`` (a list) also gets each draw's held-out
    all-reduce rows with their prediction and the monotone floor (``allreduce_floor``), and its
    held-out fused-MoE rows with their prediction. ``only``: fit and report that operator class
    alone, on the same draws as the whole table (the split is drawn before the class is picked)."""
    out = []
    for seed in SEEDS:
        train, held = split_by_shape(df, 0.25, seed)
        if only:
            train, held = (x[x["op_class"] == only].reset_index(drop=True) for x in (train, held))
        f = fit(train, form="physical", spec=spec)
        held = held[
            group_of(held).isin(set(group_of(train))).to_numpy()
        ]  # a kernel the fit saw no row of: not held out
        out.append(error_table(f, held).assign(seed=seed))
        if only == "attention":
            out.append(error_table(f, train).assign(seed=seed, group=lambda e: e["group"] + " (fit)"))
        if rows is not None:
            ar = held[engine_allreduce(held)]
            rows.append(
                ar.assign(pred=f.predict(ar), floor=allreduce_floor(train[engine_allreduce(train)], ar), seed=seed)
            )
            moe = held[held["op_class"] == "moe"]
            rows.append(moe.assign(pred=f.predict(moe), seed=seed))
    e = pd.concat(out)
    return (
        e.groupby("group")
        .agg(n=("n", "sum"), mape=("mape", "mean"), median_ape=("median_ape", "mean"), p90_ape=("p90_ape", "mean"))
        .round(1)
        .reset_index()
    )


def neighbour_floor(df: pd.DataFrame) -> str:
    """Context attention's held-out configurations predicted from their nearest measured neighbours
    instead of a model (same draws): for each held-out row, the training rows of the same prompt
    length and head dim, interpolated linearly in log time over (log2 heads·prompts,
    log2 KV heads·prompts) (nearest neighbour outside their hull): what the measured tables
    themselves say about a configuration they did not time. MAPE / median over all held-out rows,
    and the MAPE inside the hull."""
    pos = lambda d: np.c_[np.log2(d["heads"] * d["prefill_seqs"]), np.log2(d["kv_heads"] * d["prefill_seqs"])]  # noqa: E731
    return _neighbour_floor(df, lambda x: x["op"] == "attention_prefill", ["prefill_q", "n"], pos, "configurations'")


def gemm_neighbour_floor(df: pd.DataFrame) -> str:
    """GEMM's held-out (n, k) shapes predicted from their measured neighbours instead of a model
    (same draws): for each held-out row, the training rows of the same m, log time interpolated
    linearly over (log2 n, log2 k) (Delaunay; nearest neighbour outside the hull): what the
    measured table itself says about a shape it did not time. MAPE / median over all held-out
    rows, and the MAPE inside the hull."""
    pos = lambda d: np.c_[np.log2(d["n"]), np.log2(d["k"])]  # noqa: E731
    return _neighbour_floor(df, lambda x: x["op_class"] == "gemm", ["m"], pos, "shapes'")


def _neighbour_floor(df: pd.DataFrame, rows, keys, pos, what: str) -> str:
    """The held-out rows (``rows`` of each draw) predicted from the training rows of the same
    ``keys``, log time interpolated linearly over ``pos`` (nearest neighbour outside the hull)."""
    stats = []
    for seed in SEEDS:
        train, held = (x[rows(x)].reset_index(drop=True) for x in split_by_shape(df, 0.25, seed))
        pred, inside = _floor_predict(train, held, keys, pos)
        ape = 100 * np.abs(np.exp(pred) / held["time_s"].to_numpy() - 1)
        ok = np.isfinite(ape)
        stats.append((ape[ok].mean(), np.median(ape[ok]), ape[ok & inside].mean(), 100 * (ok & inside).mean()))
    m = np.mean(stats, axis=0)
    return f"MAPE {m[0]:.1f} / median {m[1]:.1f}; inside the training {what} hull ({m[3]:.0f} % of rows) {m[2]:.1f}"


def _floor_predict(train: pd.DataFrame, held: pd.DataFrame, keys, pos) -> tuple[np.ndarray, np.ndarray]:
    """(ln time, inside the hull) of each held-out row from the training rows of the same ``keys``,
    interpolated linearly over ``pos`` (nearest neighbour outside the hull; NaN under 4 rows)."""
    from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator

    pred, inside = np.full(len(held), np.nan), np.zeros(len(held), bool)
    for key, g in held.groupby(keys):
        t = train[(train[keys].to_numpy(float) == np.atleast_1d(np.asarray(key, float))).all(axis=1)]
        if len(t) < 4:
            continue
        y, idx = np.log(t["time_s"].to_numpy()), g.index.to_numpy()
        lin = LinearNDInterpolator(pos(t), y)(pos(g))
        inside[idx], pred[idx] = (
            np.isfinite(lin),
            np.where(np.isfinite(lin), lin, NearestNDInterpolator(pos(t), y)(pos(g))),
        )
    return pred, inside


DECODE_M = 128  # decode-size GEMMs: m ≤ this many rows (a decode batch of up to 128 sequences)


REPEAT_PAIRS = ((48, 64), (80, 96))  # rows of one shape that TensorRT-LLM runs with one tactic (below)


def pair_scatter(df: pd.DataFrame, pairs=REPEAT_PAIRS) -> float:
    """The table's own repeatability, model-free (percent): for each pair (a, b) of rows m = a and
    m = b of one (n, k) shape, ln(t_b / t_a) less its median over the shapes, then the mean
    |exp - 1| over the shapes and pairs. TensorRT-LLM's plugins take their tactic from the profile
    at the next power of two of m (``GemmPluginProfiler::getBestConfig``, gemmPluginProfiler.cpp),
    so in its tables both rows of a pair run one kernel on nearly the same work (the same m-tile
    count for tiles of 32 rows or more): what stays is the two rows' timing noise, which no model
    of the shape predicts. With independent noise a row's own is 1/2 (spikes) to 1/√2 (Gaussian)
    of this: the least MAPE an exact model could show.
    NaN where the table has neither pair."""
    t = df.pivot_table(index=["n", "k"], columns="m", values="time_s")
    devs = []
    for a, b in pairs:
        if a in t.columns and b in t.columns:
            r = np.log(t[b] / t[a]).dropna().to_numpy()
            devs.append(np.abs(np.expm1(r - np.median(r))))
    return 100 * float(np.concatenate(devs).mean()) if devs else float("nan")


def quantized_gemm(name: str, folder: str, spec, dtype: str) -> dict:
    """One quantized dtype's GEMM table (``fit_profiles.load_gemm_dtype``) fitted at its spec peak on
    3/4 of its (n, k) shapes and the rest predicted, over the draws: MAPE / median / p90 of all
    held-out rows and of the decode-size ones (m ≤ DECODE_M), and the neighbour floor's MAPE
    (``gemm_neighbour_floor``: the measured shapes around a held-out one interpolated) on both;
    ``shape``: the decode-size MAPE left once each held-out shape's own median error is divided out
    (an oracle no fit has: what the rows of one shape scatter around their m-dependence); ``pair``:
    the whole table's repeatability (``pair_scatter``)."""
    df, _ = load_gemm_dtype(folder, dtype)
    spec = dtype_base(spec, folder, dtype)
    pos = lambda d: np.c_[np.log2(d["n"]), np.log2(d["k"])]  # noqa: E731
    stats = []
    for seed in SEEDS:
        train, held = split_by_shape(df, 0.25, seed)
        signed = fit(train, form="physical", spec=spec).predict(held) / held["time_s"].to_numpy() - 1
        ape = 100 * np.abs(signed)
        fl = 100 * np.abs(np.exp(_floor_predict(train, held, ["m"], pos)[0]) / held["time_s"].to_numpy() - 1)
        dec = (held["m"] <= DECODE_M).to_numpy()
        row = []
        for sel in (np.ones(len(held), bool), dec):
            a = ape[sel]
            row += [a.mean(), np.median(a), np.percentile(a, 90), np.nanmean(fl[sel])]
        h = held[dec].assign(lerr=np.log1p(signed[dec]))
        shape_median = h.groupby(["n", "k"])["lerr"].transform("median")
        row.append(100 * float(np.abs(np.expm1(h["lerr"] - shape_median)).mean()))
        stats.append(row)
    m = np.mean(stats, axis=0)
    keys = ("mape", "median", "p90", "floor")
    return {
        "gpu": name,
        "dtype": dtype,
        "rows": len(df),
        **{f"all_{k}": round(float(v), 1) for k, v in zip(keys, m[:4])},
        **{f"dec_{k}": round(float(v), 1) for k, v in zip(keys, m[4:8])},
        "dec_shape": round(float(m[8]), 1),
        "pair": round(pair_scatter(df), 1),
    }


def quantized_only(gpus=None, dtypes=None) -> None:
    """``--quantized``: the held-out table of every fitted (GPU, quantized dtype), or of the named
    dtypes on every GPU whose table holds them."""
    out = []
    for name, (folder, spec) in GPUS.items():
        if gpus and name not in gpus:
            continue
        for dt in dtypes or GEMM_DTYPES_FITTED.get(name, ()):
            try:
                out.append(quantized_gemm(name, folder, base_of(spec, name), dt))
            except InputError:
                continue
            print(pd.DataFrame(out[-1:]).to_string(index=False, header=len(out) == 1), flush=True)
    print(
        f"\nquantized GEMMs held out by shape, mean of {len(SEEDS)} draws (percent); dec: m <= {DECODE_M}; "
        "floor: the neighbour floor's MAPE; dec_shape: the decode rows' MAPE with each held-out shape's "
        "median error divided out; pair: the table's own repeatability, two rows of one shape that one "
        "TensorRT-LLM tactic runs (m = 48 and 64, 80 and 96; pair_scatter)"
    )
    print(pd.DataFrame(out).to_string(index=False))


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence nearest y in least squares (pool adjacent violators)."""
    blocks = []  # [mean, weight]
    for v in y:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2), (m1, w1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return np.concatenate([[m] * w for m, w in blocks])


def engine_allreduce(df: pd.DataFrame) -> np.ndarray:
    """The all-reduce rows that are the engine's time (not the NCCL table's reference rows, which
    only inform the fit's NCCL lines: ``importers/aiconfigurator.py``, ``_engine_rows``)."""
    return ((df["op_class"] == "allreduce") & (df["op"] != NCCL_REFERENCE)).to_numpy()


def allreduce_floor(train: pd.DataFrame, held: pd.DataFrame) -> np.ndarray:
    """Per held-out all-reduce row, the least |relative error| of any prediction non-decreasing in
    size that keeps the training sizes on their isotonic fit (log time): the measured time
    clipped to the interval the neighbouring training sizes leave it."""
    out = np.zeros(len(held))
    for n in held["workers"].unique():
        tr = train[(train["op_class"] == "allreduce") & (train["workers"] == n)].sort_values("m")
        iso, sizes = np.exp(isotonic(np.log(tr["time_s"].to_numpy()))), tr["m"].to_numpy()
        sel = (held["workers"] == n).to_numpy()
        j = np.searchsorted(sizes, held["m"].to_numpy()[sel])
        lo = np.where(j > 0, iso[np.maximum(j - 1, 0)], 0.0)
        hi = np.where(j < len(sizes), iso[np.minimum(j, len(sizes) - 1)], np.inf)
        t = held["time_s"].to_numpy()[sel]
        out[sel] = np.abs(np.clip(t, lo, hi) / t - 1)
    return 100 * out


def nccl_agreement(folder: str, ar: pd.DataFrame) -> dict:
    """Per GPU count, the median and largest |custom / NCCL - 1| (percent) over the sizes where
    TensorRT-LLM's dispatch runs NCCL on NVLink GPUs (above ONESHOT_MAX_TOKENS tokens on 4 and 8,
    above the 16 MB workspace on 2; PCIe GPUs run NCCL at these sizes too): two timings of the same
    NCCL call."""
    from costmodel.calibration.allreduce_model import ONESHOT_MAX_TOKENS
    from costmodel.calibration.importers import read_aiconfigurator

    d = DATA / folder / "nccl"
    if not d.is_dir():
        return {}
    nccl = read_aiconfigurator(d, classes=["allreduce"])[0].set_index(["workers", "m"])["time_s"]
    big = ar[(ar["tokens"] > ONESHOT_MAX_TOKENS) & ((ar["workers"] > 2) | (ar["m"] > 16e6))]
    both = big.join(nccl.rename("nccl"), on=["workers", "m"], how="inner")
    dev = 100 * np.abs(both["time_s"] / both["nccl"] - 1)
    return {int(n): (float(g.median()), float(g.max())) for n, g in dev.groupby(both["workers"])}


def allreduce_each_size(df: pd.DataFrame, spec) -> dict:
    """Per GPU count, the MAPE with each message size held out in turn (the all-reduce rows alone,
    of every table, fitted without that size; the engine's row at it predicted): every size
    counts once, where the three draws of a quarter of the sizes weigh 18 rows."""
    ar = df[df["op_class"] == "allreduce"]
    out: dict = {}
    for s in sorted(ar["m"].unique()):
        f = fit(ar[ar["m"] != s], form="physical", spec=spec)
        held = ar[(ar["m"] == s) & engine_allreduce(ar)]
        for n, ape in zip(held["workers"], 100 * np.abs(f.predict(held) / held["time_s"].to_numpy() - 1)):
            out.setdefault(int(n), []).append(float(ape))
    return {n: float(np.mean(v)) for n, v in out.items()}


def allreduce_report(name: str, df: pd.DataFrame, rows: list, spec=None, folder: str | None = None) -> str:
    """Per GPU count: held-out MAPE, the monotone floor over the same rows, the isotonic fit's
    MAPE on every size (what a monotone curve through all of them leaves), the model fitted on every
    size (what its own form leaves, nothing held out), where the folder has an NCCL table the
    median / largest gap between the two timings of the NCCL call (``nccl_agreement``), and the
    held-out error per message size (elements of float16, mean over the draws that held it out)."""
    e = pd.concat(rows)
    e = e.assign(ape=100 * np.abs(e["pred"] / e["time_s"] - 1))
    moe, e = e[e["op_class"] == "moe"], e[e["op_class"] == "allreduce"]
    every = df[df["op_class"] == "allreduce"]
    ar = df[engine_allreduce(df)]
    full = fit(every, form="physical", spec=spec).predict(ar) if spec is not None else None
    agree = nccl_agreement(folder, ar) if folder else {}
    each = allreduce_each_size(df, spec) if spec is not None else {}
    lines = [
        f"{name} all-reduce, held out by message size: MAPE | monotone floor (held out) | isotonic fit on "
        f"every size | model fitted on every size | each size held out in turn | custom vs NCCL table where "
        f"both run NCCL, median / max; then held-out APE by size (elements)"
    ]
    for n, g in e.groupby("workers"):
        sel = (ar["workers"] == n).to_numpy()
        a = ar[sel].sort_values("m")
        iso = np.exp(isotonic(np.log(a["time_s"].to_numpy())))
        per = g.groupby("m")["ape"].mean()
        ins = f"{100 * np.mean(np.abs(full[sel] / ar['time_s'].to_numpy()[sel] - 1)):.1f}" if full is not None else "-"
        gap = "{:.0f} / {:.0f}".format(*agree[int(n)]) if int(n) in agree else "-"
        one = f"{each[int(n)]:.1f}" if int(n) in each else "-"
        lines.append(
            f"  @{int(n)}: {g['ape'].mean():.1f} | {g['floor'].mean():.1f} | "
            f"{100 * np.mean(np.abs(iso / a['time_s'].to_numpy() - 1)):.1f} | {ins} | {one} | {gap};  "
            + " ".join(f"{int(m / 2)}:{v:.0f}" for m, v in per.items())
        )
    if len(moe):
        lines.append(
            f"{name} fused MoE, held out by model configuration (hidden, expert width, top-k, experts; "
            "draws that held it out): MAPE / median"
        )
        for (h, i, k, ex), g in moe.groupby(["k", "n", "heads", "kv_heads"]):
            lines.append(
                f"  H={int(h)} I={int(i)} top-{int(k)} of {int(ex)}: {g['ape'].mean():.1f} / "
                f"{g['ape'].median():.1f}  (draws {sorted(set(g['seed']))})"
            )
    return "\n".join(lines)


def composed_steps(folder: str, base: str, model: str, tp: int, n: int = 100, seed: int = 0) -> pd.DataFrame:
    """Whole steps composed from the folder's own measured per-layer tables (attention at n grid
    points of each kind: prefill only, decode only, mixed; every dense operator at that token count;
    lm_head and sampler at that many sequences; linear interpolation between measured token counts)
    against the price of a profile fitted to the folder's tables with a quarter of the shapes held
    out. The all-reduce is not in the tables, so it is left out of both sides."""
    from costmodel import CostModel, load_model
    from costmodel.calibration.profile import profile_from_fit

    d = LSS / folder
    tpdir = d if d.name.startswith("tp") else d / f"tp{tp}"
    df, _ = read_llmservingsim(d)
    train, _ = split_by_shape(df, 0.25, seed)
    hw = profile_from_fit(fit(train, form="physical", spec=load_hardware(base)), load_hardware(base), folder)
    m = load_model(model)
    cm = CostModel(m, hw, tp, counting="faithful")
    att = pd.read_csv(tpdir / "attention.csv")
    kind = (att.prefill_chunk > 0).astype(int) + 2 * (att.n_decode > 0).astype(int)
    att = pd.concat([g.sample(min(n, len(g)), random_state=seed) for _, g in att.groupby(kind)])
    dense, per_seq = pd.read_csv(tpdir / "dense.csv"), pd.read_csv(tpdir / "per_sequence.csv")
    at = lambda tab, layer, col, x: float(np.interp(x, tab[tab.layer == layer][col], tab[tab.layer == layer].time_us))  # noqa: E731
    once = {"embedding", "final_layernorm"}
    rows = []
    for r in att.itertuples():
        T, S = r.prefill_chunk + r.n_decode, (r.prefill_chunk > 0) + r.n_decode
        layer = sum(at(dense, lay, "tokens", T) for lay in set(dense.layer) - once) + r.time_us
        meas = (
            m.L * layer
            + sum(at(dense, lay, "tokens", T) for lay in once)
            + at(per_seq, "lm_head", "sequences", S)
            + at(per_seq, "sampler", "sequences", S)
        ) * 1e-6
        q = ([r.prefill_chunk] if r.prefill_chunk else []) + [1] * r.n_decode
        kv = ([r.kv_prefill] if r.prefill_chunk else []) + [r.kv_decode] * r.n_decode
        b = cm.breakdown(cm.shape(q, kv))
        pred = b.time_s - sum(o.time_s for o in b.operators if o.name == "allreduce")
        rows.append(
            dict(
                kind="mixed" if r.prefill_chunk and r.n_decode else ("prefill" if r.prefill_chunk else "decode"),
                ape=100 * abs(pred / meas - 1),
            )
        )
    e = pd.DataFrame(rows)
    return (
        e.groupby("kind")["ape"]
        .agg(n="size", mape="mean", median_ape="median", p90_ape=lambda x: x.quantile(0.9))
        .round(1)
        .reset_index()
    )


def moe_leave_one_out(df: pd.DataFrame, spec) -> str:
    """The fused-MoE class alone, each model configuration held out in turn (MAPE / median / p90)."""
    from costmodel.calibration.fit import ape_stats

    moe = df[df["op_class"] == "moe"]
    key = ["k", "n", "heads", "kv_heads"]
    lines, all_pred, all_meas = [], [], []
    for cfg, held in moe.groupby(key):
        train = moe[~(moe[key] == pd.Series(cfg, index=key)).all(axis=1)]
        pred = fit(train, form="physical", spec=spec).predict(held)
        e = ape_stats(pred, held["time_s"].to_numpy())
        all_pred.append(pred)
        all_meas.append(held["time_s"].to_numpy())
        lines.append(
            f"  H={int(cfg[0])} I={int(cfg[1])} top-{int(cfg[2])} of {int(cfg[3])}: "
            f"{e['mape']:.1f} / {e['median_ape']:.1f} / {e['p90_ape']:.1f}"
        )
    e = ape_stats(np.concatenate(all_pred), np.concatenate(all_meas))
    return "\n".join(
        [
            f"fused MoE, each configuration held out in turn: all {e['mape']:.1f} / {e['median_ape']:.1f} / "
            f"{e['p90_ape']:.1f} (MAPE / median / p90)"
        ]
        + lines
    )


def allreduce_only(gpus=None) -> None:
    """``--only allreduce``: each GPU's all-reduce rows alone, held out and reported as in ``main``
    (the all-reduce's draw of held-out sizes is the same: ``split_by_shape`` draws it first)."""
    for name, (folder, spec) in GPUS.items():
        if gpus and name not in gpus:
            continue
        df, _ = load(folder)
        df = df[df["op_class"] == "allreduce"].reset_index(drop=True)
        rows: list = []
        print(f"\n{name} ({folder}): held out by shape, mean of {len(SEEDS)} draws (percent)")
        print(held_out(df, base_of(spec, name), rows).to_string(index=False))
        print(allreduce_report(name, df, rows, base_of(spec, name), folder))


def in_sample(sub: pd.DataFrame, spec) -> None:
    """The class's error fitted on every row (what its form leaves with nothing held out)."""
    from costmodel.calibration.fit import ape_stats

    t0 = time.perf_counter()
    f = fit(sub, form="physical", spec=spec)
    e = ape_stats(f.predict(sub), sub["time_s"].to_numpy())
    print(
        f"in sample ({len(sub)} rows, fit {time.perf_counter() - t0:.1f} s): MAPE {e['mape']:.1f}, median "
        f"{e['median_ape']:.1f}, p90 {e['p90_ape']:.1f}"
    )


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--gpu",
        action="append",
        choices=sorted(GPUS),
        help="only this AIConfigurator GPU (repeatable); skips the LLMServingSim folders and the fit timing",
    )
    ap.add_argument(
        "--only",
        choices=("gemm", "attention", "allreduce", "moe", "wideep"),
        help="one operator class on the AIConfigurator tables (attention also prints its fit error "
        "and context attention's neighbour floor; gemm its neighbour floor)",
    )
    ap.add_argument(
        "--quantized",
        action="store_true",
        help="the quantized GEMM fits (fit_profiles.GEMM_DTYPES_FITTED) held out by shape, all and decode-size rows",
    )
    ap.add_argument(
        "--dtype",
        action="append",
        choices=sorted(GEMM_DTYPES),
        help="with --quantized: only this GEMM dtype (repeatable), on every GPU whose table holds it",
    )
    args = ap.parse_args(argv)
    if args.quantized or args.dtype:
        return quantized_only(args.gpu, args.dtype)
    if args.only == "allreduce":
        return allreduce_only(args.gpu)
    if args.only == "wideep":
        from costmodel.calibration import wideep_fit

        print(f"H200 SGLang wide-EP, MoE and MLA tables: held out by shape, mean of {len(SEEDS)} draws (percent)")
        return print(wideep_fit.summary(wideep_fit.load(DATA)).to_string(index=False))
    if args.only:
        for name, (folder, spec) in GPUS.items():
            if args.gpu and name not in args.gpu:
                continue
            df, _ = load(folder)
            print(f"\n{name} ({folder}): {args.only}, held out by shape, mean of {len(SEEDS)} draws (percent)")
            print(held_out(df, base_of(spec, name), only=args.only).to_string(index=False))
            if args.only == "attention":
                print("context attention, neighbour floor: " + neighbour_floor(df))
            if args.only == "gemm":
                print("gemm, neighbour floor: " + gemm_neighbour_floor(df))
            in_sample(df[df["op_class"] == args.only], base_of(spec, name))
        return
    tables, reports = [], []
    for name, (folder, spec) in GPUS.items():
        if args.gpu and name not in args.gpu:
            continue
        df, _ = load(folder)
        tables.append(df)
        rows: list = []
        print(f"\n{name} ({folder}): held out by shape, mean of {len(SEEDS)} draws (percent)")
        print(held_out(df, base_of(spec, name), rows).to_string(index=False))
        print("context attention, neighbour floor: " + neighbour_floor(df))
        reports.append(allreduce_report(name, df, rows, base_of(spec, name), folder))
        if (df["op_class"] == "moe").any():
            reports.append(moe_leave_one_out(df, base_of(spec, name)))
    print("\n" + "\n".join(reports))
    if args.gpu:
        return
    for label, (folder, base) in FOLDERS.items():
        df, _ = read_llmservingsim(LSS / folder)
        print(f"\nLLMServingSim {label}: held out by shape (percent)")
        print(held_out(df, load_hardware(base)).to_string(index=False))
    for label, folder, base, model, tp in (
        ("RTX 4090 / Llama-3.1-8B", FOLDERS["RTX 4090 / Llama-3.1-8B"][0], "rtx4090", "llama-3.1-8b", 1),
        ("RTX PRO 6000 / Qwen3-32B tp2", FOLDERS["RTX PRO 6000 / Qwen3-32B tp2"][0], "rtx-pro-6000", "qwen3-32b", 2),
    ):
        print(
            f"\nLLMServingSim {label}: whole steps composed from the measured per-layer tables vs the profile "
            f"fitted with a quarter of the shapes held out (percent; all-reduce excluded)"
        )
        print(composed_steps(folder, base, model, tp).to_string(index=False))
    big = pd.concat(tables, ignore_index=True)
    big = big[big["op_class"] != "moe"].sample(40_000, random_state=0).reset_index(drop=True)
    t0 = time.perf_counter()
    fit(big[big["source"].str.contains("a100|l40s")], form="physical")
    t1 = time.perf_counter()
    one = pd.concat([t for t in tables[1:2]], ignore_index=True)
    print(f"\nfit of {len(big[big['source'].str.contains('a100|l40s')])} rows (A100 + L40S tables): {t1 - t0:.2f} s")
    big_one = pd.concat([one] * 3, ignore_index=True).head(40_000)
    t0 = time.perf_counter()
    fit(big_one, form="physical", spec=base_of(GPUS["a100-sxm"][1], "a100-sxm"))
    print(
        f"fit of a 40,000-row table (the A100 tables, repeated; tile GEMM and unit decode models): "
        f"{time.perf_counter() - t0:.2f} s"
    )


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        print(f"bench_kernels: {e}", file=sys.stderr)
        sys.exit(2)
