"""Full public traces through the simulator (needs ../shared/data/traces): the Azure 2023
conversation hour through vLLM V1, and Mooncake conversation with prefix caching on, for vLLM
(automatic prefix caching) and SGLang (radix cache). Prints wall time, p99 TTFT/ITL, hit rate.

    python benchmarks/bench_traces.py
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation
from workloads.traces import azure, mooncake

TRACES = Path(__file__).resolve().parents[2] / "shared/data/traces"


def run(label, policy, flags, workload, model, hw, tp=1):
    sched, pool, cm, max_len = build_engine(policy, model, hw, tp, flags)
    t0 = time.perf_counter()
    res = Simulation([(sched, pool, cm)], workload, max_model_len=max_len).run()
    wall = time.perf_counter() - t0
    s, df = res.summary, res.requests
    accounted = int(df.finish_s.notna().sum() + df.rejected.notna().sum())
    hit = s.get("prefix_cache_hit_rate")
    print(
        f"{label:44} {len(df):6,} req  accounted {accounted:6,}  completed {s['completed']:6,}  rejected {s['num_rejected']:4}"
        f"  wall {wall:6.2f} s  p99 TTFT {s['p99_ttft_ms']:9.0f} ms  p99 ITL {s['p99_itl_ms']:6.1f} ms"
        f"  preempt {s['num_preemptions']:5}" + (f"  hit rate {hit:.3f}" if hit is not None else "")
    )


def main() -> None:
    if not TRACES.is_dir():
        raise SystemExit(f"traces not found at {TRACES}")
    m8, h100 = load_model("llama-3.1-8b"), load_hardware("h100")
    conv = azure(TRACES / "azure2023_conv.csv")
    run("azure conv 1h, vLLM V1 (defaults)", "vllm", {}, conv, m8, h100)
    run("azure conv 1h, vLLM V1 budget 2048", "vllm", {"max_num_batched_tokens": 2048}, conv, m8, h100)
    moon = mooncake(TRACES / "mooncake_conversation.jsonl", time_scale=4.0)
    print(
        f"mooncake conversation arrivals slowed 4x ({len(moon)} requests over {moon.arrival_s[-1]:.0f} s): "
        "at the logged rate one 8B replica is overloaded several times over"
    )
    for tp in (1, 2):
        run(f"mooncake conv, vLLM APC, tp={tp}", "vllm", {}, moon, m8, h100, tp)
        run(f"mooncake conv, SGLang radix, tp={tp}", "sglang", {}, moon, m8, h100, tp)
    run("mooncake conv, vLLM, no prefix caching, tp=2", "vllm", {"enable_prefix_caching": False}, moon, m8, h100, 2)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
