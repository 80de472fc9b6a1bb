"""Vidur's own speed workload through chunksim: the 10,000-request stream Vidur generates (Poisson
at QPS 2, splitwise-conversation lengths; ../shared/data/traces/PROVENANCE.md), CodeLlama-34B on
one A100 replica of tp 2, vLLM V1 with max_num_batched_tokens 512 and max_num_seqs 128 (Vidur's
Sarathi chunk 512 and batch cap 128), block size 16. Prints wall time, simulated requests/s,
SimPy events, plans (runs), iterations and peak RSS on one pinned core, and the machine
reference (best of readings taken between the runs, as the best wall time is: shared machines
drift by 2x within minutes).

    python benchmarks/bench_vidur_workload.py [--repeat 3] [--policy vllm] [--no-fast-forward]
                                              [--compare] [--profile N]

--compare also steps the run (--no-fast-forward) and checks every request's timestamps agree
to the bit. --profile prints the N hottest functions of one fast-forward run (cProfile).
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

TRACES = Path(__file__).resolve().parents[2] / "shared/data/traces"
TRACE, CONFIG = TRACES / "vidur_splitwise_conv_10k_qps2.csv", TRACES / "codellama-34b-instruct.config.json"
FLAGS = {"vllm": {"max_num_batched_tokens": 512, "max_num_seqs": 128, "block_size": 16},
         "sglang": {"chunked_prefill_size": 512, "max_prefill_tokens": 512, "max_running_requests": 128, "page_size": 16},
         "nochunk": {"max_num_seqs": 128, "block_size": 16}}
COLUMNS = ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s")


def workload():
    t = pd.read_csv(TRACE)
    return fixed_workload(t.arrived_at.to_numpy(), t.num_prefill_tokens.to_numpy(), t.num_decode_tokens.to_numpy())


class CountingSim(Simulation):
    """Counts the SimPy events the run processes (one Environment.step each) and the replica's
    runs (one plan each: a step, or a fast-forwarded run of steps; a sole fast-forwarding replica
    takes most runs without an event, see Replica._skip_to)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        env, self.events, self.runs = self.env, 0, 0
        step = env.step

        def counted():
            self.events += 1
            step()
        env.step = counted
        for rep in self.replicas:
            schedule = rep.policy.schedule

            def planned(state, schedule=schedule):
                self.runs += 1
                return schedule(state)
            rep.policy.schedule = planned


def simulate(policy: str, wl, ff: bool, count: bool = False):
    sched, pool, cm, max_len = build_engine(policy, load_model(str(CONFIG)), load_hardware("a100-80gb"), 2, FLAGS[policy])
    sim = (CountingSim if count else Simulation)([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=max_len)
    t0, c0 = time.perf_counter(), time.process_time()
    res = sim.run()
    sim_time = (time.perf_counter() - t0, time.process_time() - c0)
    return res, sim_time, (sim.events, sim.runs) if count else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="vllm", choices=sorted(FLAGS))
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best wall time is reported (noisy machines)")
    ap.add_argument("--no-fast-forward", action="store_true")
    ap.add_argument("--compare", action="store_true", help="also step the run and check the two agree to the bit")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args()
    if not TRACE.is_file() or not CONFIG.is_file():
        raise SystemExit(f"needs {TRACE} and {CONFIG} (the shared data folder)")
    print(f"one core: {one_core()}")
    wl = workload()
    ff = not args.no_fast_forward
    walls, cpus, refs, cpu_refs = [], [], [reference_s()], [reference_s(3, time.process_time)]
    for _ in range(max(1, args.repeat)):   # the reference between runs: both best-of over the same minutes
        res = None
        res, (wall, cpu), _ = simulate(args.policy, wl, ff)
        walls.append(wall)
        cpus.append(cpu)
        refs.append(reference_s(3))
        cpu_refs.append(reference_s(3, time.process_time))
    _, _, (events, runs) = simulate(args.policy, wl, ff, count=True)
    wall, cpu, s, n = min(walls), min(cpus), res.summary, len(wl)
    print(f"{n:,} requests, CodeLlama-34B, A100 tp 2, {args.policy} {FLAGS[args.policy]}, fast_forward={ff}")
    print(f"wall {wall:.3f} s (runs: {', '.join(f'{w:.3f}' for w in walls)})  {n / wall:,.0f} simulated req/s  "
          f"{events:,} SimPy events  {runs:,} plans  {s['num_iterations']:,} iterations  completed {s['completed']:,}  "
          f"p99 TTFT {s['p99_ttft_ms']:.0f} ms  p99 ITL {s['p99_itl_ms']:.1f} ms")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    ref, cpu_ref = min(refs), min(cpu_refs)
    print(f"machine: reference {ref:.3f} s (benchmarks/machine.py, best of {len(refs)} readings between the runs: "
          f"{', '.join(f'{r:.3f}' for r in refs)}); at reference 0.105 s: {n / wall * ref / 0.105:,.0f} simulated req/s")
    print(f"CPU time (steadier on a shared machine): {cpu:.3f} s, reference {cpu_ref:.3f} s CPU; "
          f"at reference 0.105 s: {n / cpu * cpu_ref / 0.105:,.0f} simulated req/s")
    if args.compare:
        a = res.requests
        b, (tb, _), (ev, pl) = simulate(args.policy, wl, not ff, count=True)
        b = b.requests
        same = all(np.array_equal(a[c].to_numpy(), b[c].to_numpy(), equal_nan=True) for c in COLUMNS)
        print(f"{'stepping' if ff else 'fast-forward'}: wall {tb:.2f} s, {ev:,} SimPy events, {pl:,} plans; "
              f"every request's {', '.join(COLUMNS)} bit-identical: {same}")
    if args.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        simulate(args.policy, wl, ff)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
