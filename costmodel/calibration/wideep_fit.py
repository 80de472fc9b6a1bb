"""Fit the wide-EP kernel models (DeepEP all-to-all, grouped-GEMM MoE, MLA) to AIConfigurator's
SGLang tables, and their errors on shapes the fit never saw.

Families, each its own constants (log residuals, soft_l1, parameters as ln(p/p0), as ``fit.py``):
  deepep_{normal,low_latency}_{dispatch,combine}   ``costmodel/deepep.py``; shape = token count
  moe_{context,generation}                         ``moe_cost.grouped_moe_time``; shape = (tokens, ep)
  mla_{context,generation}                         ``costmodel/mla.py``; shape = the per-GPU
                                                   (heads, batch, length): the same kernel shape
                                                   logged at two tp sizes is one shape
Held out: a quarter of each family's distinct shapes, every row of a drawn shape, seeds 0-2.

What the tables' rows are (AIConfigurator ``collector/sglang/collect_wideep_deepep_moe.py``): a
larger EP is simulated on 2 GPUs with 256/(ep/2) experts; ``num_tokens`` is logged as the tokens
per rank × ep. Its "uniform" layout gives every local expert ⌊T·k/E⌋ rows, or, when that is 0
(decode), one row to each of the first T·k/2 local experts; each rank receives all T tokens
(prefill), which is what the permute pass costs there. The simulator prices real routing
(``moe_cost.hot_rank_load``); only this module reads the collector's layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from .. import deepep, mla, moe_cost
from .fit import ape_stats

FOLDER = "h200_sxm/sglang/0.5.1.post1"
GPUS_PER_NODE = 8
SEEDS = (0, 1, 2)
FRACTION = 0.25
P0 = {
    "deepep": dict(t0_intra=20e-6, bw_intra=300e9, t0=30e-6, hop=2e-6, c_sm=3e9, q=0.5, bw=50e9, gamma=1.0),
    "moe": dict(pi=1e15, beta=4e12, floor=1e-4, pad=16.0, tok_s=1e-9, knee=1.0),
    "mla_context": dict(pi=5e14, pi_fp8=7e14, beta=2e12, floor=1e-5, cta_s=2e-6, solo=1.5, sms=-132.0),
    "mla_generation": dict(pi=3e14, beta=2e12, beta_fp8=2e12, beta_one=2e11, floor=1e-5, cta_s=1e-6, sms=-132.0),
}


def _deepep(folder: Path) -> pd.DataFrame:
    n = pd.read_csv(folder / "wideep_deepep_normal_perf.txt")
    ll = pd.read_csv(folder / "wideep_deepep_ll_perf.txt")
    rows = []
    for mode, df in (("normal", n), ("low_latency", ll)):
        for d in ("dispatch", "combine"):
            t = df[f"{d}_transmit_us"] + df[f"{d}_notify_us"] if mode == "normal" else df[f"{d}_avg_t_us"]
            rows.append(
                pd.DataFrame(
                    dict(
                        family=f"deepep_{mode}_{d}",
                        nodes=df["node_num"],
                        tokens=df["num_token"],
                        sms=df[f"{d}_sms"] if mode == "normal" else 0,
                        k=df["num_topk"],
                        experts=df["num_experts"],
                        hidden=df["hidden_size"],
                        time_s=t * 1e-6,
                    )
                )
            )
    out = pd.concat(rows, ignore_index=True)
    out["copies"] = [
        deepep.copies("normal" if "normal" in f else "low_latency", int(g), GPUS_PER_NODE, int(k), int(e))
        for f, g, k, e in zip(out["family"], out["nodes"], out["k"], out["experts"])
    ]
    out["nbytes"] = [
        deepep.dispatch_bytes(h) if f.endswith("dispatch") else deepep.combine_bytes(h)
        for f, h in zip(out["family"], out["hidden"])
    ]
    out["shape"] = out["tokens"].astype(str)
    return out


def _moe(folder: Path) -> pd.DataFrame:
    frames = []
    for phase in ("context", "generation"):
        df = pd.read_csv(folder / f"wideep_{phase}_moe_perf.txt")
        T, k, E, ep = (df[c].to_numpy(float) for c in ("num_tokens", "topk", "num_experts", "moe_ep_size"))
        base, local = np.floor(T * k / E), E / ep
        if phase == "context":
            touched, rows, received = local, base * local, T
        else:
            touched = np.where(base > 0, local, np.minimum(local, T * k / 2))
            rows, received = np.where(base > 0, base * local, touched), 0 * T
        frames.append(
            pd.DataFrame(
                dict(
                    family=f"moe_{phase}",
                    tokens=T,
                    ep=ep,
                    rows=rows,
                    touched=touched,
                    received=received,
                    hidden=df["hidden_size"],
                    inter=df["inter_size"],
                    distribution=df["distribution"],
                    time_s=df["latency"] * 1e-3,
                    shape=df["num_tokens"].astype(str) + "|" + df["moe_ep_size"].astype(str),
                )
            )
        )
    return pd.concat(frames, ignore_index=True)


def _mla(folder: Path) -> pd.DataFrame:
    frames = []
    for phase in ("context", "generation"):
        df = pd.read_csv(folder / f"{phase}_mla_perf.txt")
        length = df["isl"] if phase == "context" else df["isl"] + df["step"]
        frames.append(
            pd.DataFrame(
                dict(
                    family=f"mla_{phase}",
                    heads=df["num_heads"],
                    batch=df["batch_size"],
                    length=length,
                    kv_b=np.where(df["kv_cache_dtype"] == "fp8", 1.0, 2.0),
                    time_s=df["latency"] * 1e-3,
                    shape=df["num_heads"].astype(str) + "|" + df["batch_size"].astype(str) + "|" + length.astype(str),
                )
            )
        )
    return pd.concat(frames, ignore_index=True)


def load(root: Path) -> pd.DataFrame:
    """Every row of the H200 SGLang wide-EP, MoE and MLA tables under ``root`` (the aiconfigurator
    folder), one ``family`` each; grouped MoE: the collector's uniform rows only."""
    folder = Path(root) / FOLDER
    moe = _moe(folder)
    return pd.concat([_deepep(folder), moe[moe["distribution"] == "uniform"], _mla(folder)], ignore_index=True)


def _p0(family: str) -> dict:
    if family.startswith("deepep"):
        p = dict(P0["deepep"])
        if "low_latency" in family:  # no SM knob, one NIC rate at every node count
            p.update(c_sm=0.0, q=0.0, gamma=0.0)
        return p
    if family == "moe_generation":  # the decode table's ranks receive no prefill tokens to permute
        return {**P0["moe"], "tok_s": 0.0}
    return dict(P0["moe"] if family.startswith("moe") else P0[family])


def predict(family: str, df: pd.DataFrame, p: dict) -> np.ndarray:
    """Seconds per row of one family's frame at constants ``p``."""
    c = lambda name: df[name].to_numpy(float)  # noqa: E731
    if family.startswith("deepep"):
        return deepep.a2a_time(c("tokens"), c("nodes"), c("sms"), c("copies"), c("nbytes"), p)
    if family.startswith("moe"):
        return moe_cost.grouped_moe_time(c("rows"), c("touched"), c("received"), c("hidden"), c("inter"), p)
    if family == "mla_context":
        return mla.time_context(c("heads"), c("batch"), c("length"), c("kv_b"), p)
    return mla.time_generation(c("heads"), c("batch"), c("length"), c("kv_b"), p)


def fit_family(family: str, df: pd.DataFrame) -> dict:
    """Least-squares constants of one family on ``df``'s rows (log residuals, soft_l1); MLA
    generation's head tile is a discrete choice, the one whose fit leaves the least loss on these rows."""
    if family == "mla_generation":
        fits = [_fit(family, df, {**_p0(family), "head_tile": float(t)}) for t in mla.HEAD_TILES]
        return min(fits, key=lambda f: f[1])[0]
    return _fit(family, df, _p0(family))[0]


def _fit(family: str, df: pd.DataFrame, p0: dict) -> tuple[dict, float]:
    """(constants, the robust loss they leave) with ``p0``'s zeros off and negatives held."""
    free = [k for k, v in p0.items() if v > 0 and k != "head_tile"]  # 0: off; < 0: held at its magnitude
    p0 = {k: abs(v) for k, v in p0.items()}
    scale = np.array([p0[k] for k in free])
    t = df["time_s"].to_numpy(float)

    def res(x):
        return np.log(predict(family, df, {**p0, **dict(zip(free, scale * np.exp(x)))})) - np.log(t)

    r = least_squares(res, np.zeros(len(free)), loss="soft_l1", f_scale=0.05)
    return {**p0, **{k: float(v) for k, v in zip(free, scale * np.exp(r.x))}}, float(r.cost)


def held_out(df: pd.DataFrame, seeds=SEEDS, fraction: float = FRACTION) -> pd.DataFrame:
    """Per family and seed: fit on the rows of 1 - ``fraction`` of its shapes, APE stats on the rest."""
    out = []
    for family, sub in df.groupby("family"):
        sub = sub.reset_index(drop=True)
        shapes = np.unique(sub["shape"].to_numpy())
        for seed in seeds:
            pick = np.random.default_rng(seed).choice(shapes, size=round(fraction * len(shapes)), replace=False)
            held = sub["shape"].isin(pick).to_numpy()
            p = fit_family(str(family), sub[~held])
            pred = predict(str(family), sub[held], p)
            out.append(dict(family=family, seed=seed, **ape_stats(pred, sub["time_s"].to_numpy(float)[held])))
    return pd.DataFrame(out)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """``held_out`` averaged over the seeds: one row per family (n, MAPE, median, p90; percent)."""
    h = held_out(df)
    return h.groupby("family", as_index=False)[["n", "mape", "median_ape", "p90_ape"]].mean().round(2)


def fit_all(df: pd.DataFrame) -> dict:
    """Every family's constants fitted on all its rows (what ``costmodel/wideep_h200.json`` ships)."""
    return {str(f): fit_family(str(f), sub.reset_index(drop=True)) for f, sub in df.groupby("family")}
