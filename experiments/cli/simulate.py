"""Simulate a workload through vLLM V1, SGLang or no-chunking scheduling, in simulated time.

Workload and result flags are `vllm bench serve`'s (--dataset-name, --random-*, --ramp-up-*,
--percentile-metrics, --save-result, ...); engine flags are the engines' own, or a whole pasted
command line with --engine-cmd. Flags given explicitly override an experiment file (-f).
"""

from __future__ import annotations

import json
import sys

from .. import bench_result
from .common import (
    add_dataset_flags,
    add_engine_flags,
    add_model_hardware,
    finite_float,
    nonneg_int,
    positive_float,
    positive_int,
)
from .simulate_pd import add_pd_flags, run_pd, wants_pd
from .simulate_run import run_simulation

TIME_UNITS = ("s", "ms", "us")


def trace_columns(text: str) -> dict:
    import argparse

    out = {}
    for item in text.split(","):
        key, eq, col = item.partition("=")
        if not eq or not key.strip() or not col.strip():
            raise argparse.ArgumentTypeError(f"{item!r} is not FIELD=COLUMN")
        if key.strip() not in ("arrival", "prompt_len", "output_len", "block_hashes"):
            raise argparse.ArgumentTypeError(
                f"{key.strip()!r} is not one of arrival, prompt_len, output_len, block_hashes"
            )
        out[key.strip()] = col.strip()
    return out


def add_parser(p):
    add_model_hardware(p)
    p.set_defaults(model=None, hardware=None, tp=None)
    p.add_argument("-f", "--file", metavar="EXP.yaml", help="experiment file; flags given explicitly override it")
    p.add_argument("--policy", choices=["vllm", "sglang", "nochunk"], help="scheduler (default vllm)")
    p.add_argument("--replicas", type=positive_int, help="replicas behind the router (default 1), each of --tp GPUs")
    p.add_argument("--router", help="round_robin (default), least_outstanding, least_kv, prefix_affinity")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no notes on stderr")
    p.add_argument(
        "--gpu-hourly-price",
        type=finite_float,
        metavar="USD",
        help="USD per GPU-hour, for cost per million tokens (default for some GPUs: `chunksim list hardware`)",
    )
    add_engine_flags(p)
    add_pd_flags(p)
    w = p.add_argument_group("workload (vllm bench serve's flags)")
    add_dataset_flags(w)
    w.add_argument("--num-prompts", type=positive_int, help="requests (default 1000)")
    w.add_argument("--input-len", type=positive_int, help="input tokens per request (default 1024)")
    w.add_argument("--output-len", type=positive_int, help="output tokens per request (default 128)")
    w.add_argument("--request-rate", type=positive_float, help="requests/s (default inf: all at t=0)")
    w.add_argument("--burstiness", type=positive_float, help="gamma arrivals: shape = burstiness (1 = Poisson)")
    w.add_argument("--max-concurrency", type=positive_int, help="closed loop: at most this many requests in flight")
    w.add_argument("--ramp-up-strategy", choices=["linear", "exponential"], help="ramp the rate over the requests")
    w.add_argument("--ramp-up-start-rps", type=finite_float, help="ramp's first rate (requests/s)")
    w.add_argument("--ramp-up-end-rps", type=finite_float, help="ramp's last rate (requests/s)")
    w.add_argument("--scenario", choices=["stall"], help="seed 000's scene: decoders running, one long prompt arrives")
    w.add_argument("--workload-file", metavar="TRACE", help="replay a trace file instead of generating requests")
    w.add_argument(
        "--trace-format",
        choices=["azure", "mooncake", "csv", "jsonl"],
        help="format of --workload-file (default by suffix: .csv azure, .jsonl mooncake)",
    )
    w.add_argument(
        "--trace-columns",
        dest="columns",
        type=trace_columns,
        metavar="arrival=COL,prompt_len=COL,...",
        help="a csv/jsonl trace's columns: arrival, prompt_len, output_len[, block_hashes]",
    )
    w.add_argument("--time-unit", choices=TIME_UNITS, help="unit of the trace's arrival column")
    w.add_argument(
        "--time-scale",
        type=finite_float,
        metavar="F",
        help="trace: multiply every arrival time by F (2 = half the rate, 0.5 = twice)",
    )
    w.add_argument(
        "--target-rate",
        type=finite_float,
        metavar="RPS",
        help="trace: rescale arrival times to this mean request rate (requests/s)",
    )
    w.add_argument("--seed", type=nonneg_int, help="random seed (default 0)")
    r = p.add_argument_group("results (vllm bench serve's flags)")
    r.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs: ttft:MS tpot:MS e2el:MS")
    r.add_argument("--percentile-metrics", help="comma-separated: ttft,tpot,itl,e2el (default ttft,tpot,itl)")
    r.add_argument("--metric-percentiles", help="comma-separated percentiles (default 99)")
    r.add_argument("--save-result", action="store_true", help="write the benchmark client's result JSON")
    r.add_argument("--save-detailed", action="store_true", help="also per-request input_lens, output_lens, ttfts, itls")
    r.add_argument("--append-result", action="store_true", help="append to the result file instead of replacing it")
    r.add_argument("--result-dir", help="folder of the result file (default: here)")
    r.add_argument("--result-filename", help="result file name (default as vllm bench serve names it)")
    r.add_argument("--label", help="result label (default chunksim-POLICY)")
    r.add_argument("--metadata", nargs="*", metavar="KEY=VALUE", help="extra keys for the result JSON")
    r.add_argument(
        "--result-format",
        choices=bench_result.FORMATS,
        default="vllm",
        help="vllm: vllm bench serve's keys; sglang: sglang.bench_serving's JSON line",
    )
    o = p.add_argument_group("outputs")
    o.add_argument(
        "--no-fast-forward",
        action="store_true",
        default=None,
        help="one event per iteration (proves fast-forward exact)",
    )
    o.add_argument(
        "--uncertainty",
        type=positive_int,
        metavar="N",
        help="rerun N times, each with a draw of the profile kind's expected error (and of a calibrated profile's covariance); report p5/p50/p95",
    )
    o.add_argument("--out", help="folder for requests.parquet, requests.csv, summary.json and config.yaml")
    o.add_argument(
        "--trace",
        metavar="RUN.json",
        help="write a Chrome/Perfetto trace (open in ui.perfetto.dev); its size is printed on stderr",
    )
    o.add_argument(
        "--trace-max-mb",
        type=positive_float,
        metavar="MB",
        help="the trace's size budget (default 100): past it requests are sampled, then passes merged",
    )
    o.add_argument("--plots", metavar="DIR", help="write itl_timeline.png, iteration_composition.png, latency_cdfs.png")
    o.add_argument("--report", metavar="FILE.html", help="write one self-contained HTML report (works offline)")


def run(args) -> int:
    out = run_pd(args) if wants_pd(args) else run_simulation(args)
    if args.json:
        print(json.dumps(out["summary"], indent=2, default=str))
        return 0
    print(out["text"])
    for note in out["files"]:
        if note.startswith("wrote trace"):  # announced already
            continue
        print(note, file=sys.stderr)
    return 0
