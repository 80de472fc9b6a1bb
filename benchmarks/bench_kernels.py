"""Kernel-level accuracy of the fitted operator models, held out by shape, and the fit's speed.

    python benchmarks/bench_kernels.py

For each AIConfigurator GPU (H100, A100, B200, L40S): fit on 3/4 of the whole shapes (GEMM (n, k),
attention head configurations, all-reduce sizes), predict the rest; MAPE / median / p90 per group,
over 3 draws of the held-out shapes. Then the same on LLMServingSim's two profile folders (one
model each, so attention is held out by context-length bucket). Then the time of one fit of a
40k-row table. Needs ../shared/data.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fit_profiles import GPUS, base_of, load  # noqa: E402

from costmodel import load_hardware  # noqa: E402
from costmodel.calibration.fit import fit  # noqa: E402
from costmodel.calibration.holdout import error_table, split_by_shape  # noqa: E402
from costmodel.calibration.importers import read_llmservingsim  # noqa: E402

LSS = ROOT.parent / "shared" / "data" / "validation" / "llmservingsim" / "profiles"
FOLDERS = {"RTX 4090 / Llama-3.1-8B": ("RTX4090/meta-llama/Llama-3.1-8B/bf16", "rtx4090"),
           "RTX PRO 6000 / Qwen3-32B tp2": ("RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2", "rtx-pro-6000")}
SEEDS = (0, 1, 2)


def held_out(df: pd.DataFrame, spec) -> pd.DataFrame:
    out = []
    for seed in SEEDS:
        train, held = split_by_shape(df, 0.25, seed)
        out.append(error_table(fit(train, form="physical", spec=spec), held).assign(seed=seed))
    e = pd.concat(out)
    return e.groupby("group").agg(n=("n", "sum"), mape=("mape", "mean"), median_ape=("median_ape", "mean"),
                                  p90_ape=("p90_ape", "mean")).round(1).reset_index()


def composed_steps(folder: str, base: str, model: str, tp: int, n: int = 100, seed: int = 0) -> pd.DataFrame:
    """Whole steps composed from the folder's own measured per-layer tables (attention at n grid
    points of each kind: prefill only, decode only, mixed; every dense operator at that token count;
    lm_head and sampler at that many sequences; linear interpolation between measured token counts)
    against the price of a profile fitted to the folder's tables with a quarter of the shapes held
    out. The all-reduce is not in the tables, so it is left out of both sides."""
    import numpy as np
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
        meas = (m.L * layer + sum(at(dense, lay, "tokens", T) for lay in once)
                + at(per_seq, "lm_head", "sequences", S) + at(per_seq, "sampler", "sequences", S)) * 1e-6
        q = ([r.prefill_chunk] if r.prefill_chunk else []) + [1] * r.n_decode
        kv = ([r.kv_prefill] if r.prefill_chunk else []) + [r.kv_decode] * r.n_decode
        b = cm.breakdown(cm.shape(q, kv))
        pred = b.time_s - sum(o.time_s for o in b.operators if o.name == "allreduce")
        rows.append(dict(kind="mixed" if r.prefill_chunk and r.n_decode else ("prefill" if r.prefill_chunk else "decode"),
                         ape=100 * abs(pred / meas - 1)))
    e = pd.DataFrame(rows)
    return e.groupby("kind")["ape"].agg(n="size", mape="mean", median_ape="median",
                                        p90_ape=lambda x: x.quantile(0.9)).round(1).reset_index()


def main() -> None:
    tables = []
    for name, (folder, spec) in GPUS.items():
        df, _ = load(folder)
        tables.append(df)
        print(f"\n{name} ({folder}): held out by shape, mean of {len(SEEDS)} draws (percent)")
        print(held_out(df, base_of(spec, name)).to_string(index=False))
    for label, (folder, base) in FOLDERS.items():
        df, _ = read_llmservingsim(LSS / folder)
        print(f"\nLLMServingSim {label}: held out by shape (percent)")
        print(held_out(df, load_hardware(base)).to_string(index=False))
    for label, folder, base, model, tp in (("RTX 4090 / Llama-3.1-8B", FOLDERS["RTX 4090 / Llama-3.1-8B"][0], "rtx4090",
                                            "llama-3.1-8b", 1),
                                           ("RTX PRO 6000 / Qwen3-32B tp2", FOLDERS["RTX PRO 6000 / Qwen3-32B tp2"][0],
                                            "rtx-pro-6000", "qwen3-32b", 2)):
        print(f"\nLLMServingSim {label}: whole steps composed from the measured per-layer tables vs the profile "
              f"fitted with a quarter of the shapes held out (percent; all-reduce excluded)")
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
    fit(big_one, form="physical")
    print(f"fit of a 40,000-row table (the A100 tables, repeated): {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
