"""A DP 8 + EP 8 group of DeepSeek-V3 on H200 through the reference loop: how long a run of N requests
takes (issue #30's bar: 100,000 requests in 30 s at reference 0.105 s).

vLLM ``-dp 8 --enable-expert-parallel`` (``--all2all-backend`` as given; default
allgather_reducescatter), the ranks stepped in lockstep (simcore/data_parallel.py; no fast path),
Poisson arrivals at ``--rate`` req/s, prompts uniform in [512, 1536), outputs in [64, 192).
Prints CPU and wall time, the reference read before and after (CPU clock), and the CPU time scaled
to reference 0.105 s.

    python -m benchmarks.bench_dp_ep [--num-requests 100000] [--rate 40] [--all2all-backend NAME] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np

from benchmarks.machine import one_core, reference_s
from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from simcore.simulation import Simulation
from workloads.workload import Workload

REFERENCE = 0.105


def run(n: int, rate: float, backend: str, seed: int = 0):
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    rng = np.random.default_rng(seed)
    wl = Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(512, 1536, n), rng.integers(64, 192, n))
    flags = {"enable_expert_parallel": True, "all2all_backend": backend}
    engines, router, max_len = build_cluster("vllm", m, hw, 1, flags, 8, "vllm_dp")
    return Simulation(engines, wl, max_model_len=max_len, router=router).run()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--all2all-backend", default="allgather_reducescatter")
    ap.add_argument("--profile", action="store_true", help="print the 15 functions with the most own time")
    a = ap.parse_args(argv)
    print(one_core())
    refs = [reference_s(3, time.process_time) for _ in range(3)]
    prof = cProfile.Profile() if a.profile else None
    c0, w0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    res = run(a.num_requests, a.rate, a.all2all_backend)
    if prof:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    refs += [reference_s(3, time.process_time) for _ in range(3)]
    ref = statistics.median(refs)
    s = res.summary
    print(
        f"{a.num_requests:,} requests ({s['completed']:,} completed, {s['duration']:,.0f} s simulated): "
        f"{cpu:.1f} s CPU, {wall:.1f} s wall; reference {ref:.3f} s ({min(refs):.3f}-{max(refs):.3f}); "
        f"{cpu * REFERENCE / ref:.1f} s at reference {REFERENCE} s"
    )
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
