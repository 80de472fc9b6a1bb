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
from costmodel.calibration.holdout import error_table, split_by_shape
from costmodel.calibration.importers import (
    FORMATS as KERNEL_FORMATS,
    load_source,
    read_llmservingsim,
    skew_alpha,
    spec_hardware,
)
from costmodel.calibration.microbench import DEVICES, cpu_plan, measure, model_plan, split_holdout
from costmodel.calibration.plot import residual_plot
from costmodel.calibration.profile import cpu_base
from costmodel.calibration.step_timings import STEP_FORMATS
from costmodel.calibration.timings import load_timings, write_timings_csv
from costmodel.errors import require

from ..bench_result import writable_dir
from ..report import table
from . import calibrate_steps
from .common import positive_int

FORMATS = KERNEL_FORMATS + STEP_FORMATS


def add_parser(p):
    p.add_argument(
        "--from",
        dest="sources",
        nargs=2,
        action="append",
        metavar=("FORMAT", "PATH"),
        help="fit existing timings: 'vidur DIR|CSV' (mlp.csv, all_reduce.csv), 'timings CSV', "
        "'aiconfigurator DIR' (<gpu>[/<framework>/<version>]) or 'llmservingsim DIR' "
        "(a profile folder: tp<N>/attention.csv, dense.csv, per_sequence.csv), or step timings "
        "'steps CSV', 'splitwise CSV', 'vllm-log LOG' (π, β scales and host terms on top of the "
        "kernel fit); repeatable, one fit",
    )
    p.add_argument("--measure", action="store_true", help="run the microbenchmark here, then fit")
    p.add_argument("--device", choices=DEVICES, default="cpu", help="microbenchmark back end (cuda needs torch)")
    p.add_argument(
        "--model",
        help="the model whose shapes the timings are of: --from llmservingsim (default: the "
        "profile's meta.yaml), step timings and --measure --device cuda (default "
        "llama-3.1-8b); a short name, Hugging Face id or config.json",
    )
    p.add_argument(
        "--tp",
        type=positive_int,
        default=1,
        help="tensor-parallel shard for the cuda microbenchmark, and the tp whose decode skew an llmservingsim folder gives",
    )
    p.add_argument(
        "--holdout",
        metavar="PATH",
        action="append",
        default=[],
        help="timings to predict, not fit (same formats as --from); repeatable",
    )
    p.add_argument(
        "--holdout-steps",
        nargs=2,
        action="append",
        metavar=("FORMAT", "PATH"),
        default=[],
        help="step timings to predict, not fit (steps, splitwise, vllm-log); repeatable",
    )
    p.add_argument(
        "--holdout-shapes",
        type=float,
        metavar="FRACTION",
        help="hold out this fraction of whole shapes (GEMM (n, k), attention head configurations, "
        "all-reduce sizes) of the --from data and report the error on them",
    )
    p.add_argument(
        "--base",
        help="profile whose spec fields the fitted one keeps and whose spec sheet caps π and β "
        "(default: the AIConfigurator folder's spec sheet, else h100; cpu: this machine)",
    )
    p.add_argument(
        "--form",
        choices=FORMS,
        default=None,
        help=f"smooth: √((F'/π)² + (B/β)²) + floor, GEMM rows padded to 128 (default, {DEFAULT_FORM}); "
        "physical: the same with the 16-row MMA tile (default for aiconfigurator and llmservingsim); "
        "offset: max(F/π, B/β) + floor; max: max(F/π, B/β, floor)",
    )
    p.add_argument("--name", help="name of the written profile")
    p.add_argument("--out", help="folder for fitted.yaml, timings.csv, residuals.png, report.json")
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    calibrate_steps.add_arguments(p)


def _timings(args) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    if args.measure:
        require(not args.sources, "from", args.sources, "give --from or --measure, not both")
        plan = model_plan(load_model(args.model or DEFAULT_MODEL), args.tp) if args.device == "cuda" else cpu_plan()
        train, held = split_holdout(measure(plan, args.device))
        return train, held, f"microbench:{args.device}"
    require(bool(args.sources), "from", None, "give --from FORMAT PATH or --measure")
    for fmt, _ in args.sources:
        require(fmt in FORMATS, "from", fmt, f"unknown format; known: {', '.join(FORMATS)}")
    loaded = [
        read_llmservingsim(llmservingsim_dir(path), model=args.model)
        if fmt == "llmservingsim"
        else load_source(fmt, path)
        for fmt, path in args.sources
    ]
    args.notes = [n for _, notes in loaded for n in notes]
    train = pd.concat([df for df, _ in loaded], ignore_index=True)
    held = None
    if args.holdout_shapes:
        require(0 < args.holdout_shapes < 1, "holdout-shapes", args.holdout_shapes, "must be between 0 and 1")
        train, held = split_by_shape(train, args.holdout_shapes)
    return train, held, ", ".join(path for _, path in args.sources)


DEFAULT_MODEL = "llama-3.1-8b"
MODEL_READERS = ("llmservingsim", *STEP_FORMATS)


def check_model_used(args) -> None:
    """--model changes only what reads shapes from a model; anywhere else it is refused, not dropped."""
    if args.model is None:
        return
    used = (args.measure and args.device == "cuda") or any(f in MODEL_READERS for f, _ in args.sources or [])
    require(
        used,
        "--model",
        args.model,
        "read only by --from llmservingsim, step timings (steps, splitwise, "
        "vllm-log) and --measure --device cuda; kernel tables (vidur, timings, aiconfigurator) carry their "
        "own shapes",
    )


def llmservingsim_dir(path) -> Path:
    """LLMServingSim's profile folders nest <gpu>/<org>/<model>/<variant>/tp<N>: a model folder holding
    one variant (bf16) is read as that variant; several are refused by name."""
    p = Path(path)
    if not p.is_dir() or (p.name.startswith("tp") and p.name[2:].isdigit()) or any(p.glob("tp*/attention.csv")):
        return p
    variants = sorted(d for d in p.iterdir() if d.is_dir() and any(d.glob("tp*/attention.csv")))
    require(
        len(variants) <= 1,
        "from",
        str(p),
        f"holds several profile variants ({', '.join(d.name for d in variants)}); give one of them",
    )
    return variants[0] if variants else p


def _base(args):
    if args.base:
        return load_hardware(args.base)
    if args.measure and args.device == "cpu":
        return cpu_base()
    spec = next((spec_hardware(p) for f, p in args.sources or [] if f == "aiconfigurator" and spec_hardware(p)), None)
    return spec or load_hardware("h100")


def calibrate(args) -> dict:
    check_model_used(args)
    if args.out:
        writable_dir(Path(args.out), "--out")
    args.notes = []
    kernel_sources, step_sources = calibrate_steps.split_sources(args.sources)
    if step_sources:
        return _calibrate_steps(args, kernel_sources, step_sources)
    train, held, source = _timings(args)
    if args.holdout:
        held = pd.concat([load_timings(p) for p in args.holdout], ignore_index=True)
    new = any(f in ("aiconfigurator", "llmservingsim") for f, _ in args.sources or [])
    form = args.form or ("physical" if new else DEFAULT_FORM)
    base = _base(args)
    result = fit(train, form=form, spec=None if base.name == "cpu" else base)
    if base.name == "cpu":
        base = base.replace(peak_flops=result.value("gemm.pi"), peak_bandwidth=result.value("gemm.beta"))
    hw = profile_from_fit(result, base, source, args.name)
    folders = [llmservingsim_dir(p) for f, p in args.sources or [] if f == "llmservingsim"]
    if folders and hw.attn_form != "roofline":  # the profiler's ragged-batch skew at the run's tp
        hw = hw.replace(attn_decode_skew=skew_alpha(folders[0], args.tp))
    report = {
        "source": source,
        "fit_seconds": result.seconds,
        "points": len(train),
        "parameters": result.table().to_dict("records"),
        "errors_fit": error_table(result, train).to_dict("records"),
        "errors_held_out": error_table(result, held).to_dict("records") if held is not None else [],
        "skipped": args.notes,
        "warnings": hw.calibration["warnings"],
        "base": {"name": base.name, "pi_eff": base.pi_eff, "beta_eff": base.beta_eff},
        "files": {},
    }
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        files = {
            "profile": out / "fitted.yaml",
            "timings": out / "timings.csv",
            "plot": out / "residuals.png",
            "report": out / "report.json",
        }
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
    report["fitted"] = {
        "pi_eff": hw.pi_eff,
        "beta_eff": hw.beta_eff,
        "host_step_s": hw.host_step_s,
        "host_per_seq_s": hw.host_per_seq_s,
        "host_per_prefill_seq_s": hw.host_per_prefill_seq_s,
        "host_prefill_step_s": hw.host_prefill_step_s,
        "host_per_launch_s": hw.host_per_launch_s,
        "gemm_rows_break": hw.gemm_rows_break,
        "gemm_rows_budget": hw.gemm_rows_budget,
        "gemm_rows_pi_scale": hw.gemm_rows_pi_scale,
    }
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
    report.pop("_hardware", None)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return 0
    print(f"fitted {report['points']} timings from {report['source']} in {report['fit_seconds']:.2f} s")
    print(
        table(
            [
                {
                    "parameter": r["parameter"],
                    "value": r["value"],
                    "unit": r["unit"],
                    "1σ %": 100 * r["rel_sigma"],
                    "points": r["active_points"],
                }
                for r in report["parameters"]
            ]
        )
    )
    b = report["base"]
    pi = next((r["value"] for r in report["parameters"] if r["parameter"] == "gemm.pi"), None)
    beta = next((r["value"] for r in report["parameters"] if r["parameter"] == "gemm.beta"), None)
    if pi and beta:
        print(
            f"\nπ_eff {pi / 1e12:.4g} TFLOP/s, β_eff {beta / 1e12:.4g} TB/s "
            f"(profile {b['name']}: {b['pi_eff'] / 1e12:.4g} TFLOP/s, {b['beta_eff'] / 1e12:.4g} TB/s)"
        )
    _print_errors(report, "timings")
    for n in report["skipped"]:
        print(f"note: {n}")
    return _print_warnings_and_files(report)


def _print_steps(report: dict, args) -> int:
    report.pop("_hardware", None)
    if report.get("kernel_fit"):
        report["kernel_fit"].pop("_hardware", None)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return 0
    print(
        f"fitted {report['points']} step timings of {report['model']} (tp={report['tp']}) from "
        f"{report['source']} in {report['fit_seconds']:.2f} s, base {report['base']['name']}"
    )
    for what, n in report["skipped"].items():
        print(f"skipped {n} rows: {what}")
    print(
        table(
            [
                {"parameter": r["parameter"], "value": r["value"], "unit": r["unit"], "1σ %": 100 * r["rel_sigma"]}
                for r in report["parameters"]
            ]
        )
    )
    f = report["fitted"]
    print(
        f"\nπ_eff {f['pi_eff'] / 1e12:.4g} TFLOP/s, β_eff {f['beta_eff'] / 1e12:.4g} TB/s; host "
        f"{f['host_step_s'] * 1e3:.4g} ms/step + {f['host_per_seq_s'] * 1e6:.4g} µs/sequence + "
        f"{f['host_per_prefill_seq_s'] * 1e6:.4g} µs/prefill sequence + "
        f"{f['host_prefill_step_s'] * 1e3:.4g} ms/prefill step"
        + (f" + {f['host_per_launch_s'] * 1e6:.4g} µs per eager kernel launch" if f.get("host_per_launch_s") else "")
        + (
            f"; GEMMs above {f['gemm_rows_break']} rows at x{f['gemm_rows_pi_scale']:.3g} π"
            if f["gemm_rows_break"]
            else ""
        )
        + (
            f"; a step's GEMM rows past {f['gemm_rows_budget']} at x{f['gemm_rows_pi_scale']:.3g} π"
            if f["gemm_rows_budget"]
            else ""
        )
    )
    _print_errors(report, "steps")
    if len(report.get("errors_by_group") or []) > len(report["errors_fit"]):
        print("\nerror on the fitted steps by model and tp (%)")
        print(table(report["errors_by_group"]))
    if report.get("errors_leave_one_model_out"):
        print("\nerror on each model's steps, fitted without that model (leave one model out, %)")
        print(table(report["errors_leave_one_model_out"]))
    return _print_warnings_and_files(report)


def _print_errors(report: dict, what: str) -> None:
    for title, key in (
        (f"error on the fitted {what} (%)", "errors_fit"),
        (f"error on held-out {what} (%)", "errors_held_out"),
    ):
        if report[key]:
            print(f"\n{title}")
            print(table(report[key]))


def _print_warnings_and_files(report: dict) -> int:
    for w in report["warnings"]:
        print(f"warning: {w}")
    for kind, path in report["files"].items():
        print(f"wrote {kind}: {path}")
    return 0
