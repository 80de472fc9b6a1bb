"""Simulate a workload through vLLM V1, SGLang or no-chunking scheduling, in simulated time."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel import load_hardware, load_model
from costmodel.calibration import sample_hardware
from costmodel.calibration.profile import fitted_parameters
from costmodel.errors import require
from simcore.simulation import Simulation

from . import experiment_file
from .common_args import add_model_hardware, positive_int
from .engines import build_cluster, build_engine
from .report import table

BAND_METRICS = ("p99_itl_ms", "p99_ttft_ms", "output_throughput")
BANDS = (5, 50, 95)
UNCERTAINTY_STREAM = 1000   # spawn key of the parameter draws; the workload's streams use 0, 1, 2


def add_parser(p):
    add_model_hardware(p)
    p.set_defaults(model=None, hardware=None, tp=None)
    p.add_argument("-f", "--file", metavar="EXP.yaml", help="experiment file; flags given explicitly override it")
    p.add_argument("--policy", choices=["vllm", "sglang", "nochunk"])
    p.add_argument("--replicas", type=int, help="replicas behind the router (default 1), each of --tp GPUs")
    p.add_argument("--router", help="round_robin (default), least_outstanding, least_kv, prefix_affinity")
    g = p.add_argument_group("engine flags (as vllm serve / sglang.launch_server spell them)")
    for flag in ("max-num-batched-tokens", "long-prefill-token-threshold", "max-num-seqs", "chunked-prefill-size",
                 "max-prefill-tokens", "page-size", "max-model-len", "num-gpu-blocks-override", "max-total-tokens",
                 "max-running-requests", "block-size"):
        g.add_argument(f"--{flag}", type=int)
    g.add_argument("--gpu-memory-utilization", type=float)
    g.add_argument("--mem-fraction-static", type=float)
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-mixed-chunk", action="store_true", default=None)
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--disable-radix-cache", action="store_true", default=None)
    g.add_argument("--disable-overlap-schedule", action="store_true", default=None)
    w = p.add_argument_group("workload")
    w.add_argument("--scenario", choices=["stall"], help="seed 000's scene: decoders running, one long prompt arrives")
    w.add_argument("--request-rate", type=float, help="requests/s (default inf: all at t=0)")
    w.add_argument("--burstiness", type=float, help="gamma arrivals: shape = burstiness (1 = Poisson)")
    w.add_argument("--max-concurrency", type=int, help="closed loop: at most this many requests in flight")
    w.add_argument("--num-prompts", type=int, help="default 1000")
    w.add_argument("--input-len", type=int, help="default 1024")
    w.add_argument("--output-len", type=int, help="default 128")
    w.add_argument("--workload-file", metavar="TRACE", help="replay a trace file instead of generating requests")
    w.add_argument("--trace-format", choices=["azure", "mooncake", "csv", "jsonl"],
                   help="format of --workload-file (default by suffix: .csv azure, .jsonl mooncake)")
    w.add_argument("--seed", type=int)
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs as in vllm bench serve: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--no-fast-forward", action="store_true", default=None,
                   help="one event per iteration (proves fast-forward exact)")
    p.add_argument("--uncertainty", type=positive_int, metavar="N",
                   help="rerun at N parameter sets drawn from a calibrated profile's covariance; report p5/p50/p95")
    p.add_argument("--out", help="folder for requests.parquet, requests.csv, summary.json and config.yaml")
    p.add_argument("--trace", metavar="RUN.json", help="write a Chrome/Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--plots", metavar="DIR", help="write itl_timeline.png, iteration_composition.png, latency_cdfs.png")


def config(args) -> dict:
    """The effective configuration: defaults <- ``-f`` file <- flags given on the command line."""
    flags = {**vars(args), "fast_forward": False if args.no_fast_forward else None}
    return experiment_file.effective(experiment_file.load_experiment(args.file) if args.file else None, flags)


def uncertainty(cfg: dict, model, hw, draws: list, workload, goodput, point: dict) -> tuple[dict, list[dict]]:
    """The same workload at each drawn parameter set: percentile bands of the key metrics.
    Bands carry the fit's parameter uncertainty only, not its per-kernel residual scatter."""
    drawn = [f.name for f in dataclasses.fields(hw) if any(getattr(d, f.name) != getattr(hw, f.name) for d in draws)]
    rows = []
    for i, d in enumerate(draws):
        sched, pool, cm, max_len = build_engine(cfg["policy"], model, d, cfg["tp"], cfg["engine"])
        s = Simulation([(sched, pool, cm)], workload, fast_forward=cfg["fast_forward"],
                       max_model_len=max_len).run(goodput=goodput).summary
        rows.append({"draw": i, **{f: getattr(d, f) for f in drawn}, **{m: s[m] for m in BAND_METRICS}})
    bands = {m: {"point": point[m], **{f"p{q}": float(np.percentile([r[m] for r in rows], q)) for q in BANDS}}
             for m in BAND_METRICS}
    return {"draws": len(draws), "hardware": hw.name, "drawn_fields": drawn, "metrics": bands}, rows


def run(args) -> int:
    cfg = config(args)
    model, hw = load_model(cfg["model"]), load_hardware(cfg["hardware"])
    engines, router, max_len = build_cluster(cfg["policy"], model, hw, cfg["tp"], cfg["engine"], cfg["replicas"],
                                             cfg["router"])
    pool = engines[0][1]
    workload = experiment_file.build_workload(cfg)
    goodput = cfg.get("goodput")
    draws = None
    if args.uncertainty:
        rng = np.random.default_rng(np.random.SeedSequence(cfg["seed"], spawn_key=(UNCERTAINTY_STREAM,)))
        require(len(fitted_parameters(hw)[0]) > 0, "uncertainty", args.uncertainty,
                f"needs a calibrated hardware profile; {hw.name} has no fitted covariance "
                "(fit one with `chunksim calibrate --out DIR`, then pass --hardware DIR/fitted.yaml)")
        draws = sample_hardware(hw, args.uncertainty, rng)
    sim = Simulation(engines, workload, fast_forward=cfg["fast_forward"], max_model_len=max_len, router=router,
                     record_iterations=bool(args.trace or args.plots))
    res = sim.run(goodput=goodput)
    if args.trace:
        from .perfetto import write_trace
        print(f"wrote trace: {write_trace(res, args.trace)}", file=sys.stderr)
    if args.plots:
        from .run_plots import save_run_plots
        for path in save_run_plots(res, args.plots).values():
            print(f"wrote plot: {path}", file=sys.stderr)
    s = res.summary
    if draws:
        s["uncertainty"], rows = uncertainty(cfg, model, hw, draws, workload, goodput, s)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        res.requests.to_parquet(out / "requests.parquet")
        res.requests.to_csv(out / "requests.csv", index=False)
        (out / "config.yaml").write_text(experiment_file.dump(cfg))
        (out / "summary.json").write_text(json.dumps({**s, "config": cfg}, indent=2))
        if draws:
            pd.DataFrame(rows).to_csv(out / "uncertainty.csv", index=False)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{cfg['policy']} · {model.name} on {hw.name} (tp={cfg['tp']}) · {cfg['replicas']} replica(s), router "
          f"{cfg['router']} · KV pool {pool.total * pool.block_size:,} tokens per replica")
    keys = ["completed", "num_rejected", "request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "max_itl_ms", "num_iterations", "num_preemptions"]
    print(table([{"metric": k, "value": s[k]} for k in keys]))
    if "replicas" in s:
        print()
        print(table([{"replica": i, **{k: r[k] for k in ("completed", "output_throughput", "p99_ttft_ms", "p99_itl_ms")}}
                     for i, r in enumerate(s["replicas"])]))
    if draws:
        print(f"\nuncertainty: {len(draws)} parameter sets drawn from {hw.name}'s fitted covariance")
        print(table([{"metric": m, **b} for m, b in s["uncertainty"]["metrics"].items()]))
    return 0
