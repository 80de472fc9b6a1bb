"""Replay a measured serving run (LLMServingSim run folder, or `vllm bench serve --save-detailed`
JSON) with its engine settings and parallelism, and print measured vs simulated latency figures."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from costmodel import load_hardware, load_model
from costmodel.expected_error import expected_error
from costmodel.pcie import PcieNccl, uses_pcie

from ..report import table
from ..validate import figure_bands, hardware_for, load_run, model_for, validate
from .common import fraction, nonneg_int, positive_int


def add_parser(p):
    p.add_argument(
        "run",
        metavar="RUN",
        help="LLMServingSim run folder (meta.json, requests.jsonl) or a "
        "`vllm bench serve --save-result --save-detailed` JSON",
    )
    p.add_argument("--model", help="short name or config.json (default: the run's model, if shipped)")
    p.add_argument(
        "--hardware",
        "--profile",
        dest="hardware",
        help="GPU profile or a calibrated YAML (default: the run's GPU's spec-sheet profile)",
    )
    p.add_argument("--tp", type=positive_int, help="tensor parallel (default: the run's)")
    p.add_argument("--data-parallel-size", type=positive_int, help="data-parallel ranks (default: the run's)")
    for flag in ("max-num-seqs", "max-num-batched-tokens", "max-model-len", "num-gpu-blocks-override", "block-size"):
        p.add_argument(f"--{flag}", type=positive_int, help="vLLM engine flag (default: the run's)")
    p.add_argument("--long-prefill-token-threshold", type=nonneg_int, help="vLLM engine flag (default: the run's)")
    p.add_argument("--gpu-memory-utilization", type=fraction, help="vLLM engine flag (default: the run's)")
    p.add_argument("--plots", metavar="DIR", help="write cdf_<metric>.png: measured and simulated CDFs on one axis")
    p.add_argument("--report", metavar="FILE.html", help="write one self-contained HTML report (works offline)")
    p.add_argument(
        "--uncertainty",
        type=positive_int,
        metavar="N",
        help="rerun N times, each with a draw of the profile kind's expected error (and of a calibrated "
        "profile's covariance): each figure's p5-p95 band, whether it holds the measured figure, and the coverage",
    )
    p.add_argument("--seed", type=nonneg_int, default=0, help="the uncertainty draws' random seed (default 0)")
    p.add_argument("--json", action="store_true", help="print a machine-readable result")


def run(args) -> int:
    t0 = time.perf_counter()
    measured = load_run(args.run)
    if args.tp:
        measured.tp = args.tp
    if args.data_parallel_size:
        measured.dp = args.data_parallel_size
    model = load_model(args.model or model_for(measured))
    hw = load_hardware(args.hardware or hardware_for(measured))
    flags = {
        k: getattr(args, k)
        for k in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "num_gpu_blocks_override",
            "block_size",
            "long_prefill_token_threshold",
            "gpu_memory_utilization",
        )
    }
    figures, overall, result, _ = validate(args.run, model, hw, flags, measured)
    bands = None
    if args.uncertainty:
        bands = figure_bands(measured, model, hw, flags, draws=args.uncertainty, seed=args.seed)
        figures = figures.merge(bands[["metric", "p5", "p95", "inside"]], on="metric", how="left")
    seconds = time.perf_counter() - t0
    tpot = figures.set_index("metric").loc["median_tpot_ms", "rel_error"]
    if args.json:
        print(
            json.dumps(
                {
                    "run": args.run,
                    "model": model.name,
                    "hardware": hw.name,
                    "tp": measured.tp,
                    "data_parallel_size": measured.dp,
                    "requests": len(measured.requests),
                    "figures": figures.to_dict("records"),
                    "mean_abs_rel_error": overall,
                    "uncertainty": None if bands is None else band_summary(bands, args.uncertainty),
                    "expected_error": expected_error(hw).as_dict(),
                    "pcie_allreduce": (
                        PcieNccl.from_hardware(hw, measured.tp).describe() if uses_pcie(hw, measured.tp) else None
                    ),
                    "seconds": seconds,
                },
                indent=2,
            )
        )
    else:
        print(
            f"{args.run}: {len(measured.requests)} requests, {model.name} on {hw.name} (tp={measured.tp}, "
            f"dp={measured.dp}), KV pool {result.replicas[0].state.pool.total:,} blocks"
        )
        print(
            table(
                [
                    {
                        "figure": r.metric,
                        "measured": r.measured,
                        "simulated": r.simulated,
                        "error %": 100 * r.rel_error,
                        **({} if bands is None else {"p5": r.p5, "p95": r.p95, "inside": "yes" if r.inside else "no"}),
                    }
                    for r in figures.itertuples()
                ]
            )
        )
        print(
            f"\nmean |relative error| over {len(figures)} figures: {100 * overall:.1f} %  "
            f"(median TPOT {100 * tpot:+.1f} %; {seconds:.2f} s)"
        )
        print(expected_error(hw).line(hw.name))
        if bands is not None:
            u = band_summary(bands, args.uncertainty)
            print(
                f"{u['draws']} draws: {u['inside']}/{u['figures']} measured figures inside their p5-p95 band "
                f"({100 * u['coverage']:.0f} %), median width (p95 / p5 - 1) {100 * u['median_width']:.0f} %"
            )
        if uses_pcie(hw, measured.tp):
            print(PcieNccl.from_hardware(hw, measured.tp).describe())
    if args.plots:
        from ..validate import cdf_plots

        title = f"{model.name} on {hw.name} (tp={measured.tp}, dp={measured.dp}) · policy vllm"
        for path in cdf_plots(measured, result, args.plots, title).values():
            print(f"wrote plot: {path}", file=sys.stderr if args.json else sys.stdout)
    if args.report:
        from ..html_report import engine_title, validate_report

        config = [
            {"setting": "run", "value": args.run, "source": "RUN"},
            {"setting": "model", "value": model.name, "source": "flag" if args.model else "the run's model"},
            {"setting": "hardware", "value": hw.name, "source": "flag" if args.hardware else "the run's GPU"},
            {"setting": "tp", "value": measured.tp, "source": "flag" if args.tp else "the run's"},
            {
                "setting": "data_parallel_size",
                "value": measured.dp,
                "source": "flag" if args.data_parallel_size else "the run's",
            },
        ]
        config += [{"setting": k, "value": v, "source": "flag"} for k, v in flags.items() if v is not None]
        path = validate_report(
            measured,
            result,
            figures,
            args.report,
            engine_title("vllm", model.name, hw.name, measured.tp, measured.dp),
            config,
        )
        print(f"wrote report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def band_summary(bands, draws: int) -> dict:
    """How many measured figures lie in their p5-p95 band, and the bands' median width (p95 / p5 - 1:
    a band wide enough to hold anything says nothing, so the width goes beside the coverage)."""
    width = (bands.p95 / bands.p5 - 1.0).to_numpy()
    return {
        "draws": draws,
        "figures": len(bands),
        "inside": int(bands.inside.sum()),
        "coverage": float(bands.inside.mean()),
        "median_width": float(np.median(width)),
    }
