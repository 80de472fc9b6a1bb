"""A synthetic day at Azure-conversation shape: N requests (default 1,000,000) over 24 h, Poisson,
lengths drawn from the Azure 2023 conversation trace (the shipped 120-row fixture if the shared
traces are absent), Llama-3.1-8B on 16 H100 replicas behind least-outstanding routing, vLLM V1.
Prints wall time, simulated requests/s and peak RSS; then checks fast-forward against step mode
on a sample.

    python benchmarks/bench_cluster.py [--num-requests 1000000] [--replicas 16] [--sample 20000] [--repeat 1]

THE MACHINE READING. The day runs for most of a minute, through which a shared machine's speed
drifts; one reading of benchmarks/machine.py beside it swung the scaled figure by a quarter. So
the CPU reference is read several times (each a best of 3): before the day, during it (a
callback at every `--reading-every` simulated hours; its own CPU and wall time are taken off the
day's, and with several replicas no replica looks at the event queue those callbacks sit in, so
the results are the same bits) and after it. The day is scaled by the median of them all, and
the figure is printed with the range the lowest and highest readings would give.

IN A FRESH PROCESS TOO. The issue's reference is what `benchmarks/machine.py` reads on the machine,
a process of its own. Read inside this one, beside a day's million requests and their results,
the same loop has read slower (0.14 s before a day, 0.15-0.24 s during and after it),
so each reading is also taken by a fresh interpreter on the same pinned core (this process
waiting), and the day is printed scaled by the median of those as well, beside the in-process one.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from machine import one_core, reference_s  # beside this script

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from simcore.clock import LATE
from simcore.simulation import Simulation, fixed_workload
from workloads import FIXTURES
from workloads.traces import azure

SHARED = Path(__file__).resolve().parents[2] / "shared/data/traces/azure2023_conv.csv"
AT_REFERENCE = 0.105  # the issues' reference machine (benchmarks/machine.py reading 0.10-0.11 s)


def day(n: int, seed: int = 0):
    src = azure(SHARED if SHARED.is_file() else FIXTURES / "azure_conv_120.csv")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(src), n)
    arrivals = np.cumsum(rng.exponential(86400.0 / n, n))
    return fixed_workload(arrivals, src.prompt_len[idx], src.output_len[idx]), SHARED.is_file()


class Readings:
    """CPU readings of the machine reference, by where they were taken; ``spent``: the CPU and
    wall seconds the ones taken during a run cost (to be taken off that run's)."""

    def __init__(self):
        self.taken: list[tuple[str, float]] = []
        self.fresh: list[tuple[str, float]] = []
        self.spent_cpu = self.spent_wall = 0.0

    def take(self, where: str) -> None:
        self.taken.append((where, reference_s(3, time.process_time)))
        self.fresh.append((where, fresh_reading()))

    def take_during(self, _event=None) -> None:
        """From inside a run, whose cyclic collector is paused: the objects alive now are frozen
        out of its sight and it runs for the reading, as it does for the readings before and after."""
        c0, w0 = time.process_time(), time.perf_counter()
        gc.freeze()
        gc.enable()
        try:
            self.take("during")
        finally:
            gc.disable()
            gc.unfreeze()
        self.spent_cpu += time.process_time() - c0
        self.spent_wall += time.perf_counter() - w0

    def values(self, where: str | None = None, fresh: bool = False) -> list[float]:
        return [r for w, r in (self.fresh if fresh else self.taken) if where is None or w == where]


def fresh_reading() -> float:
    """The CPU reference (best of 3) read by a new interpreter, which inherits this process's core."""
    code = "import time; from machine import reference_s; print(reference_s(3, time.process_time))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def simulate(wl, replicas: int, ff: bool, readings: Readings | None = None, every_h: float = 0.0):
    """(result, wall seconds, CPU seconds), the readings taken during the run not counted."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    engines, route, max_len = build_cluster("vllm", m, hw, 1, {}, replicas, "least_outstanding")
    sim = Simulation(engines, wl, router=route, fast_forward=ff, max_model_len=max_len)
    spent = (readings.spent_cpu, readings.spent_wall) if readings else (0.0, 0.0)
    if (
        readings is not None and every_h > 0 and replicas > 1
    ):  # a sole replica looks at the queue (ExactEnvironment.skip_to)
        end = float(wl.arrival_s[-1])
        for t in np.arange(every_h * 3600.0, end, every_h * 3600.0):
            sim.env.at(float(t), LATE).callbacks.append(readings.take_during)
    c0, t0 = time.process_time(), time.perf_counter()
    res = sim.run()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if readings is not None:
        cpu -= readings.spent_cpu - spent[0]
        wall -= readings.spent_wall - spent[1]
    return res, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-requests", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument(
        "--sample", type=int, default=20_000, help="requests checked fast-forward against step mode (0: none)"
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of the day; the median CPU time is reported (noisy machines)"
    )
    ap.add_argument(
        "--readings", type=int, default=3, help="CPU readings of the machine reference before and after the runs"
    )
    ap.add_argument(
        "--reading-every", type=float, default=4.0, help="simulated hours between readings during a run (0: none)"
    )
    args = ap.parse_args()
    print(f"one core: {one_core()}")
    wl, real = day(args.num_requests)
    wall_before = reference_s()
    readings = Readings()
    for _ in range(args.readings):
        readings.take("before")
    walls, cpus = [], []
    for i in range(max(1, args.repeat)):
        res = None  # one day's results in memory at a time: peak RSS stays that of one run
        res, wall, cpu = simulate(wl, args.replicas, True, readings, args.reading_every)
        walls.append(wall)
        cpus.append(cpu)
        if i + 1 < args.repeat:
            readings.take("between")
    for _ in range(args.readings):
        readings.take("after")
    wall = min(walls)
    if len(walls) > 1:
        print("runs: " + ", ".join(f"{w:.1f} s wall, {c:.1f} s CPU" for w, c in zip(walls, cpus)))
    s = res.summary
    print(
        f"{args.num_requests:,} requests ({'Azure conv lengths' if real else 'fixture lengths'}), {args.replicas} replicas: "
        f"wall {wall:.1f} s, {args.num_requests / wall:,.0f} simulated req/s, {s['num_iterations']:,} iterations, "
        f"completed {s['completed']:,}, p99 TTFT {s['p99_ttft_ms']:.0f} ms, p99 ITL {s['p99_itl_ms']:.1f} ms, "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    print(
        f"machine: reference {wall_before:.2f} s before, {reference_s():.2f} s after (benchmarks/machine.py; wall times scale with it)"
    )
    refs = readings.values()
    ref, lo, hi = statistics.median(refs), min(refs), max(refs)
    cpu = statistics.median(cpus)
    parts = "; ".join(
        f"{w} " + ", ".join(f"{r:.3f}" for r in readings.values(w))
        for w in ("before", "during", "between", "after")
        if readings.values(w)
    )
    print(f"CPU reference readings (best of 3 each): {parts}")
    print(
        f"CPU time (steadier on a shared machine): {cpu:.1f} s{' (median of the runs)' if len(cpus) > 1 else ''}, "
        f"reference {ref:.3f} s CPU (median of {len(refs)} readings, range {lo:.3f}-{hi:.3f}, spread {(hi - lo) / ref:.0%}); "
        f"at reference {AT_REFERENCE} s: {cpu * AT_REFERENCE / ref:.1f} s "
        f"(by the highest and lowest reading: {cpu * AT_REFERENCE / hi:.1f}-{cpu * AT_REFERENCE / lo:.1f} s)"
    )
    fresh = readings.values(fresh=True)
    fref, flo, fhi = statistics.median(fresh), min(fresh), max(fresh)
    parts = "; ".join(
        f"{w} " + ", ".join(f"{r:.3f}" for r in readings.values(w, fresh=True))
        for w in ("before", "during", "between", "after")
        if readings.values(w, fresh=True)
    )
    print(f"the same readings by a fresh process (benchmarks/machine.py's own reading): {parts}")
    print(
        f"at reference {AT_REFERENCE} s by the fresh-process median {fref:.3f} s: {cpu * AT_REFERENCE / fref:.1f} s "
        f"(by the highest and lowest: {cpu * AT_REFERENCE / fhi:.1f}-{cpu * AT_REFERENCE / flo:.1f} s)"
    )
    if args.sample <= 0:
        return
    sample, _ = day(args.sample, seed=1)
    a, ta, _ = simulate(sample, args.replicas, True)
    b, tb, _ = simulate(sample, args.replicas, False)
    worst = max(
        float(np.nanmax(np.abs(a.requests[c] - b.requests[c]) / np.abs(b.requests[c]).clip(1e-12)))
        for c in ("first_token_s", "finish_s", "max_itl_s")
    )
    print(
        f"exactness on {args.sample:,} requests: worst relative difference fast-forward vs step {worst:.2e} "
        f"(fast-forward {ta:.1f} s, step mode {tb:.1f} s)"
    )


if __name__ == "__main__":
    main()
