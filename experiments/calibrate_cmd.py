"""Fit the roofline's π_eff, β_eff, launch floor and interconnect to kernel timings (Vidur CSVs or a
microbenchmark run here), report each with 1σ and the error per operator class, and write a
hardware profile that every verb accepts with --hardware."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from costmodel import load_hardware, load_model
from costmodel.calibration import fit, profile_from_fit
from costmodel.calibration.fit import DEFAULT_FORM, FORMS
from costmodel.calibration.microbench import DEVICES, cpu_plan, measure, model_plan, split_holdout
from costmodel.calibration.plot import residual_plot
from costmodel.calibration.profile import cpu_base
from costmodel.calibration.timings import load_timings, write_timings_csv
from costmodel.errors import require

from . import calibrate_steps
from .common_args import positive_int
from .report import table

FORMATS = ("vidur", "timings", "steps", "splitwise", "vllm-log")


def add_parser(p):
    p.add_argument("--from", dest="sources", nargs=2, action="append", metavar=("FORMAT", "PATH"),
                   help="fit existing timings: 'vidur DIR|CSV' (mlp.csv, all_reduce.csv), 'timings CSV', or step "
                        "timings 'steps CSV', 'splitwise CSV', 'vllm-log LOG' (π, β scales and host terms); repeatable")
    p.add_argument("--measure", action="store_true", help="run the microbenchmark here, then fit")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="microbenchmark back end (cuda needs torch)")
    p.add_argument("--model", default="llama-3.1-8b", help="shapes for the cuda microbenchmark")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel shard for the cuda microbenchmark")
    p.add_argument("--holdout", metavar="PATH", action="append", default=[],
                   help="timings to predict, not fit (same formats as --from); repeatable")
    p.add_argument("--holdout-steps", nargs=2, action="append", metavar=("FORMAT", "PATH"), default=[],
                   help="step timings to predict, not fit (steps, splitwise, vllm-log); repeatable")
    p.add_argument("--base", help="profile whose spec fields the fitted one keeps (default h100; cpu: this machine)")
    p.add_argument("--form", choices=FORMS, default=DEFAULT_FORM,
                   help="smooth: √((F'/π)² + (B/β)²) + floor, GEMM rows padded to 128 (default); "
                        "offset: max(F/π, B/β) + floor; max: max(F/π, B/β, floor)")
    p.add_argument("--name", help="name of the written profile")
    p.add_argument("--out", help="folder for fitted.yaml, timings.csv, residuals.png, report.json")
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    calibrate_steps.add_arguments(p)


def _timings(args) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    if args.measure:
        require(not args.sources, "from", args.sources, "give --from or --measure, not both")
        plan = model_plan(load_model(args.model), args.tp) if args.device == "cuda" else cpu_plan()
        train, held = split_holdout(measure(plan, args.device))
        return train, held, f"microbench:{args.device}"
    require(bool(args.sources), "from", None, "give --from FORMAT PATH or --measure")
    for fmt, _ in args.sources:
        require(fmt in FORMATS, "from", fmt, f"unknown format; known: {', '.join(FORMATS)}")
    train = pd.concat([load_timings(path) for _, path in args.sources], ignore_index=True)
    return train, None, ", ".join(path for _, path in args.sources)


def calibrate(args) -> dict:
    kernel_sources, step_sources = calibrate_steps.split_sources(args.sources)
    if step_sources:
        return _calibrate_steps(args, kernel_sources, step_sources)
    train, held, source = _timings(args)
    if args.holdout:
        held = pd.concat([load_timings(p) for p in args.holdout], ignore_index=True)
    result = fit(train, form=args.form)
    base = load_hardware(args.base) if args.base else (cpu_base() if args.measure and args.device == "cpu"
                                                        else load_hardware("h100"))
    if base.name == "cpu":
        base = base.replace(peak_flops=result.value("gemm.pi"), peak_bandwidth=result.value("gemm.beta"))
    hw = profile_from_fit(result, base, source, args.name)
    report = {"source": source, "fit_seconds": result.seconds, "points": len(train),
              "parameters": result.table().to_dict("records"),
              "errors_fit": result.errors(train).to_dict("records"),
              "errors_held_out": result.errors(held).to_dict("records") if held is not None else [],
              "warnings": result.warnings, "base": {"name": base.name, "pi_eff": base.pi_eff, "beta_eff": base.beta_eff},
              "files": {}}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        files = {"profile": out / "fitted.yaml", "timings": out / "timings.csv", "plot": out / "residuals.png",
                 "report": out / "report.json"}
        files["profile"].write_text(hw.to_yaml())
        write_timings_csv(pd.concat([train, held]) if held is not None else train, files["timings"])
        residual_plot(result, train, files["plot"], held)
        report["files"] = {k: str(v) for k, v in files.items()}
        files["report"].write_text(json.dumps(report, indent=2, default=float))
    report["_hardware"] = hw
    return report


def _calibrate_steps(args, kernel_sources, step_sources) -> dict:
    """Kernel sources first (their profile is the step fit's base), then the step fit."""
    base = load_hardware(args.base or "h100")
    kernel_report = None
    if kernel_sources:
        args.sources = kernel_sources
        kernel_report = calibrate(argparse_copy(args, out=None))
        base = kernel_report.pop("_hardware")
    result, report = calibrate_steps.fit_from_args(step_sources, args, base)
    hw = result.hardware(args.name)
    report["files"], report["kernel_fit"] = {}, kernel_report
    report["fitted"] = {"pi_eff": hw.pi_eff, "beta_eff": hw.beta_eff, "host_step_s": hw.host_step_s,
                        "host_per_seq_s": hw.host_per_seq_s, "host_per_prefill_seq_s": hw.host_per_prefill_seq_s}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        files = {"profile": out / "fitted.yaml", "report": out / "report.json"}
        files["profile"].write_text(hw.to_yaml())
        report["files"] = {k: str(v) for k, v in files.items()}
        files["report"].write_text(json.dumps(report, indent=2, default=float))
    return report


def argparse_copy(args, **changes):
    import argparse
    return argparse.Namespace(**{**vars(args), **changes})


def run(args) -> int:
    report = calibrate(args)
    if "fitted" in report:
        return _print_steps(report, args)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return 0
    print(f"fitted {report['points']} timings from {report['source']} in {report['fit_seconds']:.2f} s")
    print(table([{"parameter": r["parameter"], "value": r["value"], "unit": r["unit"],
                  "1σ %": 100 * r["rel_sigma"], "points": r["active_points"]} for r in report["parameters"]]))
    b = report["base"]
    pi = next((r["value"] for r in report["parameters"] if r["parameter"] == "gemm.pi"), None)
    beta = next((r["value"] for r in report["parameters"] if r["parameter"] == "gemm.beta"), None)
    if pi and beta:
        print(f"\nπ_eff {pi / 1e12:.4g} TFLOP/s, β_eff {beta / 1e12:.4g} TB/s "
              f"(profile {b['name']}: {b['pi_eff'] / 1e12:.4g} TFLOP/s, {b['beta_eff'] / 1e12:.4g} TB/s)")
    for title, key in (("error on the fitted timings (%)", "errors_fit"), ("error on held-out timings (%)", "errors_held_out")):
        if report[key]:
            print(f"\n{title}")
            print(table(report[key]))
    for w in report["warnings"]:
        print(f"warning: {w}")
    for kind, path in report["files"].items():
        print(f"wrote {kind}: {path}")
    return 0


def _print_steps(report: dict, args) -> int:
    report.pop("_hardware", None)
    if report.get("kernel_fit"):
        report["kernel_fit"].pop("_hardware", None)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return 0
    print(f"fitted {report['points']} step timings of {report['model']} (tp={report['tp']}) from "
          f"{report['source']} in {report['fit_seconds']:.2f} s, base {report['base']['name']}")
    for what, n in report["skipped"].items():
        print(f"skipped {n} rows: {what}")
    print(table([{"parameter": r["parameter"], "value": r["value"], "unit": r["unit"], "1σ %": 100 * r["rel_sigma"]}
                 for r in report["parameters"]]))
    f = report["fitted"]
    print(f"\nπ_eff {f['pi_eff'] / 1e12:.4g} TFLOP/s, β_eff {f['beta_eff'] / 1e12:.4g} TB/s; host "
          f"{f['host_step_s'] * 1e3:.4g} ms/step + {f['host_per_seq_s'] * 1e6:.4g} µs/sequence + "
          f"{f['host_per_prefill_seq_s'] * 1e6:.4g} µs/prefill sequence")
    for title, key in (("error on the fitted steps (%)", "errors_fit"), ("error on held-out steps (%)", "errors_held_out")):
        if report[key]:
            print(f"\n{title}")
            print(table(report[key]))
    for w in report["warnings"]:
        print(f"warning: {w}")
    for kind, path in report["files"].items():
        print(f"wrote {kind}: {path}")
    return 0
