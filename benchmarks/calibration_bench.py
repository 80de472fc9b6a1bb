"""Calibration's acceptance figures: synthetic recovery and 1σ coverage, Llama-2-7B → InternLM-20B /
Qwen-72B prediction error per operator class (each fit form), the norm (RMSNorm) model against the
plain B/β + floor and its sensitivity to the GPU constants it assumes, and the CPU measure → fit →
predict pipeline. ``python benchmarks/calibration_bench.py [--seeds N] [--kernels DIR] [--no-cpu]``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.calibration import fit
from costmodel.calibration.fit import FORMS, H100, TILE_ROWS, Device, fit_class
from costmodel.calibration.microbench import cpu_plan, measure, split_holdout
from costmodel.calibration.timings import gemm_row, load_timings
from experiments.report import table

TRUTH = {"pi": 7e14, "beta": 3e12, "floor": 6e-6}
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels" / "vidur"
MODELS = {
    "Llama-2-7B": "meta-llama/Llama-2-7b-hf",
    "InternLM-20B": "internlm/internlm-20b",
    "Qwen-72B": "Qwen/Qwen-72B",
}


def synthetic(rng, noise=0.03) -> pd.DataFrame:
    df = pd.DataFrame(
        [
            gemm_row("g", m, k, n, 2, 0.0)
            for m in np.unique(np.geomspace(1, 8192, 40).astype(int))
            for k, n in ((4096, 4096), (4096, 22016), (11008, 4096), (1024, 1024), (512, 2048))
        ]
    )
    a = df["flops"] * np.ceil(df["m"] / TILE_ROWS) * TILE_ROWS / df["m"] / TRUTH["pi"]  # the default "smooth" form
    t = np.hypot(a, df["bytes"] / TRUTH["beta"]) + TRUTH["floor"]
    return df.assign(time_s=t * np.exp(noise * rng.standard_normal(len(df))))


def recovery(seeds: int) -> list[dict]:
    est, hits = [], []
    for s in range(seeds):
        c = fit_class(synthetic(np.random.default_rng(s)), "gemm")
        truth = np.array([TRUTH[p] for p in c.params])
        est.append(c.values / truth - 1)
        hits.append(np.abs(np.log(c.values / truth)) <= c.rel_sigma)
    est, hits = np.array(est), np.array(hits)
    return [
        {
            "parameter": p,
            "truth": TRUTH[p],
            "max |error| %": 100 * np.abs(est[:, j]).max(),
            "mean 1σ %": 100 * c.rel_sigma[j],
            "1σ coverage %": 100 * hits[:, j].mean(),
        }
        for j, p in enumerate(c.params)
    ]


def transfer(kernels: Path) -> tuple[list[dict], list[dict]]:
    data = {name: load_timings(kernels / "compute/h100" / path / "mlp.csv") for name, path in MODELS.items()}
    rows, params = [], []
    for form in FORMS:
        t0 = time.perf_counter()
        r = fit(data["Llama-2-7B"], form=form)
        secs = time.perf_counter() - t0
        params.append(
            {
                "form": form,
                "π_eff TFLOP/s": r.value("gemm.pi") / 1e12,
                "β_eff TB/s": r.value("gemm.beta") / 1e12,
                "floor/overhead µs": r.value("gemm.floor") * 1e6,
                "fit s": secs,
            }
        )
        for name, df in data.items():
            for e in r.errors(df).to_dict("records"):
                rows.append({"form": form, "predicted": name, **e})
    return rows, params


def norm_models(kernels: Path) -> list[dict]:
    """Held-out norm MAPE of the wave/L2 model vs the plain memory roofline (B/β + floor, fitted as a
    generic memory-bound class), and of the wave/L2 model under other L2 sizes and wave widths."""
    data = {name: load_timings(kernels / "compute/h100" / path / "mlp.csv") for name, path in MODELS.items()}
    data = {name: df[df["op_class"] == "norm"] for name, df in data.items()}
    variants = [("B/β + floor (before)", None), ("waves + L2, H100 (132 SMs × 2 blocks, 50 MB)", H100)]
    variants += [(f"waves + L2, L2 = {l2 / 1e6:g} MB", Device(l2_bytes=l2)) for l2 in (30e6, 40e6, 60e6)]
    variants += [
        ("waves + L2, 1 block per SM (R = 132)", Device(threads_per_sm=1024)),
        ("waves + L2, 128 SMs (R = 256)", Device(sms=128)),
    ]
    rows = []
    for label, dev in variants:
        if dev is None:
            c = fit_class(data["Llama-2-7B"].assign(op_class="norm_flat"), "norm_flat")
            pred = {name: c.predict(df.assign(op_class="norm_flat")) for name, df in data.items()}
        else:
            c = fit_class(data["Llama-2-7B"], "norm", device=dev)
            pred = {name: c.predict(df) for name, df in data.items()}
        params = ", ".join(f"{p} {v:.3g}±{100 * s:.1f}%" for p, v, s in zip(c.params, c.values, c.rel_sigma))
        rows.append(
            {
                "norm model": label,
                **{
                    name: 100 * float(np.mean(np.abs(pred[name] / df["time_s"].to_numpy() - 1)))
                    for name, df in data.items()
                },
                "fitted on Llama (1σ)": params,
            }
        )
    return rows


def cpu_pipeline() -> list[dict]:
    t0 = time.perf_counter()
    train, held = split_holdout(measure(cpu_plan(), "cpu"))
    t1 = time.perf_counter()
    r = fit(train)
    print(
        f"cpu: measured {len(train) + len(held)} kernels in {t1 - t0:.1f} s, fit in {r.seconds:.2f} s; "
        f"gemm π {r.value('gemm.pi') / 1e9:.1f} GFLOP/s, β {r.value('gemm.beta') / 1e9:.1f} GB/s"
    )
    for w in r.warnings:
        print(f"  warning: {w}")
    fitted = r.errors(train).set_index("op_class")["mape"]
    return [{**e, "fitted mape": fitted[e["op_class"]]} for e in r.errors(held).to_dict("records")]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--kernels", type=Path, default=SHARED)
    p.add_argument("--no-cpu", action="store_true")
    args = p.parse_args(argv)
    print(f"synthetic GEMMs, 3 % lognormal noise, {args.seeds} seeds\n{table(recovery(args.seeds))}\n")
    if args.kernels.is_dir():
        rows, params = transfer(args.kernels)
        print(f"fit on H100 Llama-2-7B mlp.csv (seed profile: 500 TFLOP/s, 2.6 TB/s)\n{table(params)}\n")
        wide = pd.DataFrame(rows).pivot_table(index=["form", "op_class"], columns="predicted", values="mape")
        print("MAPE % per operator class\n" + table(wide.reset_index().to_dict("records")) + "\n")
        print("norm (RMSNorm) MAPE % by model, fitted on Llama-2-7B\n" + table(norm_models(args.kernels)) + "\n")
    if not args.no_cpu:
        print("held-out error on this CPU (%)\n" + table(cpu_pipeline()))


if __name__ == "__main__":
    main()
