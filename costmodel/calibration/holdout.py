"""Held-out data by shape: whole shapes the fit never sees, not random rows.

GEMMs are held out by weight shape (n, k), attention by head configuration (heads, KV heads, head
dim) — and, for LLMServingSim's single model, by context-length bucket; all-reduce by message size;
everything else by token count. A fraction of the distinct keys of each class is drawn with the
given seed; every row with a drawn key is held out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SHAPE_KEYS = {
    "gemm": ["n", "k"],
    "attention": ["heads", "kv_heads", "n"],
    "moe": ["k", "n", "heads", "kv_heads"],
    "allreduce": ["m"],
}


def shape_keys(df: pd.DataFrame, op_class: str) -> pd.Series:
    cols = SHAPE_KEYS.get(op_class, ["m"])
    key = df[cols].astype(str).agg("|".join, axis=1) if len(cols) > 1 else df[cols[0]].astype(str)
    if op_class == "attention" and key.nunique() < 3:  # one model: hold out context-length buckets
        key = np.floor(np.log2(np.maximum(df["k"].to_numpy(float), 1.0))).astype(int).astype(str)
        key = pd.Series(key, index=df.index) + "|" + df["op"].astype(str)
    return key


def split_by_shape(df: pd.DataFrame, fraction: float = 0.25, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fit, held-out)."""
    rng = np.random.default_rng(seed)
    held = np.zeros(len(df), bool)
    for cls, idx in df.groupby("op_class").indices.items():
        key = shape_keys(df.iloc[idx], cls).to_numpy()  # type: ignore[arg-type]
        uniq = np.unique(key)
        if len(uniq) < 3:
            continue
        pick = rng.choice(uniq, size=max(1, int(round(fraction * len(uniq)))), replace=False)
        held[idx] = np.isin(key, pick)
    return df[~held].reset_index(drop=True), df[held].reset_index(drop=True)


def group_of(df: pd.DataFrame) -> pd.Series:
    """The row's report group: attention by kernel (prefill, decode, mixed), all-reduce by GPU
    count (the NCCL table's reference rows apart: not the engine's time), everything else by
    operator class."""
    g = df["op_class"].astype(str).copy()
    att, ar = (df["op_class"] == "attention").to_numpy(), (df["op_class"] == "allreduce").to_numpy()
    g[att] = df.loc[att, "op"].astype(str)
    g[ar] = "allreduce@" + df.loc[ar, "workers"].astype(int).astype(str)
    ref = (df["op"] == "nccl_reference").to_numpy()
    g[ref] = "nccl_reference@" + df.loc[ref, "workers"].astype(int).astype(str)
    return g


def error_table(fit, df: pd.DataFrame) -> pd.DataFrame:
    """APE statistics (n, MAPE, median, p90; percent) per report group of ``df``."""
    from .fit import ape_stats

    pred, meas = fit.predict(df), df["time_s"].to_numpy(float)
    ok = np.isfinite(pred)
    g = group_of(df).to_numpy()
    return pd.DataFrame(
        [{"group": k, **ape_stats(pred[(g == k) & ok], meas[(g == k) & ok])} for k in sorted(set(g[ok]))]
    )
