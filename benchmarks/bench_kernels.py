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


def main() -> None:
    tables = []
    for name, (folder, spec) in GPUS.items():
        df, _ = load(folder)
        tables.append(df)
        print(f"\n{name} ({folder}): held out by shape, mean of {len(SEEDS)} draws (percent)")
        print(held_out(df, base_of(spec)).to_string(index=False))
    for label, (folder, base) in FOLDERS.items():
        df, _ = read_llmservingsim(LSS / folder)
        print(f"\nLLMServingSim {label}: held out by shape (percent)")
        print(held_out(df, load_hardware(base)).to_string(index=False))
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
