"""How fast this machine runs the simulator right now: shared cloud machines drift by a third or
more between minutes, so the benchmarks print this beside their wall times. It times a small
fixed simulation stepped one event per iteration (the same kind of Python work as a benchmark,
none of its fast paths); compare wall times across runs in units of it."""
from __future__ import annotations

import os
import time

import numpy as np

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation, fixed_workload


def reference_s(repeats: int = 5, clock=time.perf_counter) -> float:
    """Best of `repeats` wall times of 300 fixed Poisson requests through one vLLM H100 replica,
    stepped (0.10 s on the fastest machine seen here, 0.18-0.29 s on slower ones). `clock`:
    time.process_time reads this process's CPU time instead (steadier when others share the core)."""
    rng = np.random.default_rng(0)
    wl = fixed_workload(np.cumsum(rng.exponential(0.25, 300)), rng.integers(100, 4000, 300), rng.integers(10, 400, 300))
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    best = float("inf")
    for _ in range(repeats):
        sched, pool, cm, max_len = build_engine("vllm", model, hw, 1, {})
        t0 = clock()
        Simulation([(sched, pool, cm)], wl, fast_forward=False, max_model_len=max_len).run()
        best = min(best, clock() - t0)
    return best


def one_core() -> str:
    """Pin this process to one CPU, so that a figure "on one core" is measured on one core: a second
    core would otherwise take numpy's helper threads. Returns what was done, for the report."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (this OS has no sched_setaffinity)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"
