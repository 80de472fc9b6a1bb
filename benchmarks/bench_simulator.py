"""Simulated requests per second and peak RSS: Poisson arrivals with ShareGPT-like lengths,
Llama-3.1-8B on one H100, vLLM V1 policy. Fast-forward and step mode are timed in one run.

    python benchmarks/bench_simulator.py [--num-prompts 10000] [--request-rate 4] [--repeat 1]
        [--speculative-config '{"method": "eagle3", "num_speculative_tokens": 3}']

With --speculative-config the same workload is also run with drafts (vLLM only), which takes the
reference loop (policies/vllm_spec.py), under sync and async scheduling.

The default rate keeps the replica below saturation (these prompts average 2,340 tokens); at 6/s
and above one H100 cannot keep up and the queue grows for the whole run.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
from machine import one_core, reference_s  # beside this script

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation, fixed_workload

SHAREGPT = Path(__file__).resolve().parents[2] / "shared/data/traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


def lengths(n: int, rng: np.random.Generator):
    if SHAREGPT.is_file():
        t = pd.read_csv(SHAREGPT)
        idx = rng.integers(0, len(t), n)
        return t.num_prefill_tokens.to_numpy()[idx], t.num_decode_tokens.to_numpy()[idx].clip(1), "ShareGPT table"
    return (
        rng.lognormal(6.0, 1.0, n).astype(int).clip(4, 8000),
        rng.lognormal(5.3, 1.0, n).astype(int).clip(1, 2000),
        "lognormal stand-in",
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-prompts", type=int, default=10000)
    ap.add_argument("--request-rate", type=float, default=4.0)
    ap.add_argument("--policy", default="vllm")
    ap.add_argument(
        "--repeat", type=int, default=1, help="fast-forward runs; the best wall time is reported (noisy machines)"
    )
    ap.add_argument("--speculative-config", default="", help="vLLM's JSON; adds spec runs (reference loop)")
    args = ap.parse_args()
    print(f"one core: {one_core()}")
    rng = np.random.default_rng(0)
    prompts, outputs, source = lengths(args.num_prompts, rng)
    arrivals = np.cumsum(rng.exponential(1 / args.request_rate, args.num_prompts))
    wl = fixed_workload(arrivals, prompts, outputs)
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    print(f"{args.num_prompts} requests, {source}, rate {args.request_rate}/s, policy {args.policy}")
    walls = {}
    for ff in (True, False):
        dt = float("inf")
        for _ in range(max(1, args.repeat) if ff else 1):
            res = None  # one run's results in memory at a time
            sched, pool, cm, max_len = build_engine(args.policy, model, hw, 1, {})
            t0 = time.perf_counter()
            res = Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=max_len).run()
            dt = walls[ff] = min(dt, time.perf_counter() - t0)
        s = res.summary
        print(
            f"fast_forward={ff!s:5}  wall {dt:6.2f} s  {args.num_prompts / dt:9,.0f} simulated req/s  "
            f"{s['num_iterations']:,} iterations  p99 ITL {s['p99_itl_ms']:.1f} ms  p99 TTFT {s['p99_ttft_ms']:.0f} ms"
        )
    print(f"fast-forward speed-up over stepping, same run: {walls[False] / walls[True]:.1f}x")
    for async_ in (False, True) if args.speculative_config else ():
        flags = {"speculative_config": args.speculative_config, "async_scheduling": async_}
        sched, pool, cm, max_len = build_engine(args.policy, model, hw, 1, flags)
        t0 = time.perf_counter()
        s = Simulation([(sched, pool, cm)], wl, max_model_len=max_len).run().summary
        dt = time.perf_counter() - t0
        print(
            f"spec async={async_!s:5}   wall {dt:6.2f} s  {args.num_prompts / dt:9,.0f} simulated req/s  "
            f"{s['num_iterations']:,} iterations  p99 ITL {s['p99_itl_ms']:.1f} ms  p99 TTFT {s['p99_ttft_ms']:.0f} ms"
        )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"machine now: reference {reference_s():.2f} s (benchmarks/machine.py; wall times scale with it)")


if __name__ == "__main__":
    main()
