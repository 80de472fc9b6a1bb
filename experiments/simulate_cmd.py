"""Simulate a workload through vLLM V1, SGLang or no-chunking scheduling, in simulated time."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from simcore.metrics import parse_goodput
from simcore.simulation import Simulation

from .common_args import add_model_hardware, model_and_hardware
from .engines import build_engine
from .report import table
from .scenarios import poisson_fixed, stall_scene

ENGINE_FLAGS = ("max_num_batched_tokens", "long_prefill_token_threshold", "max_num_seqs", "enable_chunked_prefill",
                "chunked_prefill_size", "max_prefill_tokens", "enable_mixed_chunk", "page_size",
                "gpu_memory_utilization", "max_model_len", "num_gpu_blocks_override", "max_total_tokens",
                "mem_fraction_static", "max_running_requests", "block_size")


def add_parser(p):
    add_model_hardware(p)
    p.add_argument("--policy", choices=["vllm", "sglang", "nochunk"], default="vllm")
    g = p.add_argument_group("engine flags (as vllm serve / sglang.launch_server spell them)")
    for flag in ("max-num-batched-tokens", "long-prefill-token-threshold", "max-num-seqs", "chunked-prefill-size",
                 "max-prefill-tokens", "page-size", "max-model-len", "num-gpu-blocks-override", "max-total-tokens",
                 "max-running-requests", "block-size"):
        g.add_argument(f"--{flag}", type=int)
    g.add_argument("--gpu-memory-utilization", type=float)
    g.add_argument("--mem-fraction-static", type=float)
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-mixed-chunk", action="store_true", default=None)
    w = p.add_argument_group("workload")
    w.add_argument("--scenario", choices=["stall"], help="seed 000's scene: decoders running, one long prompt arrives")
    w.add_argument("--request-rate", type=float, default=float("inf"))
    w.add_argument("--num-prompts", type=int, default=1000)
    w.add_argument("--input-len", type=int, default=1024)
    w.add_argument("--output-len", type=int, default=128)
    w.add_argument("--seed", type=int, default=0)
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs as in vllm bench serve: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--no-fast-forward", action="store_true", help="one event per iteration (proves fast-forward exact)")
    p.add_argument("--out", help="folder for requests.parquet, requests.csv and summary.json")


def engine_flags(args) -> dict:
    return {k: getattr(args, k) for k in ENGINE_FLAGS if getattr(args, k, None) is not None}


def run(args) -> int:
    model, hw = model_and_hardware(args)
    sched, pool, cm, max_len = build_engine(args.policy, model, hw, args.tp, engine_flags(args))
    if args.scenario == "stall":
        workload = stall_scene()
    else:
        workload = poisson_fixed(args.request_rate, args.num_prompts, args.input_len, args.output_len, args.seed)
    goodput = parse_goodput(args.goodput) if args.goodput else None
    sim = Simulation([(sched, pool, cm)], workload, fast_forward=not args.no_fast_forward, max_model_len=max_len)
    res = sim.run(goodput=goodput)
    s = res.summary
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        res.requests.to_parquet(out / "requests.parquet")
        res.requests.to_csv(out / "requests.csv", index=False)
        (out / "summary.json").write_text(json.dumps({**s, "config": {"policy": args.policy, "model": model.name,
                                                      "hardware": hw.name, "tp": args.tp, **engine_flags(args)}}, indent=2))
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{args.policy} · {model.name} on {hw.name} (tp={args.tp}) · KV pool {pool.total * pool.block_size:,} tokens")
    keys = ["completed", "num_rejected", "request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "max_itl_ms", "num_iterations", "num_preemptions"]
    print(table([{"metric": k, "value": s[k]} for k in keys]))
    return 0
