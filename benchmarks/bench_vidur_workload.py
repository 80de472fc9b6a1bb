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
--data DIR reads the trace, the model config and Vidur's tables from DIR instead of
../shared/data beside the repository (a git worktree elsewhere: --data /path/to/shared/data).

Against Vidur itself (--vidur PYTHON)
-------------------------------------
    benchmarks/vidur_setup.sh /path/to/microsoft/vidur/git ../venvs/vidur     # once, ~2 min
    python benchmarks/bench_vidur_workload.py --vidur ../venvs/vidur/bin/python --repeat 3

PYTHON is the Python of a venv of Vidur's own, made by `benchmarks/vidur_setup.sh` from a git
repository of microsoft/vidur at the pinned commit VIDUR_COMMIT (below); chunksim never imports
Vidur. The benchmark then runs, on the one core this process is pinned to, `--repeat` rounds of:
chunksim's run of the workload (in this process), then Vidur's own simulator on the same
workload in a subprocess under `taskset -c CPU` (`benchmarks/vidur_driver.py`, run by PYTHON:
Vidur's `Simulator` with its CLI configuration, the `trace_replay` generator reading the same
trace CSV, the Sarathi scheduler at chunk 512 / batch cap 128 / block 16, one A100 replica at
tp 2, and its random-forest predictor trained on ../shared/data/kernels/vidur, the tables that
../shared/data/kernels/PROVENANCE.md lists under "Vidur's own A100 tables"). Before the rounds one untimed Vidur run builds its simulator
and so trains its predictor into `--vidur-workdir` (cached there: 1-3 minutes the first time).

Both sides are timed the same way: wall (`time.perf_counter`) and CPU (`time.process_time`)
around the simulator's run call alone, `Simulation.run()` for chunksim and `Simulator.run()`
(Vidur's event loop, with its default metrics collection) for Vidur; imports, predictor
training or loading, and workload set-up are outside both. Simulated req/s = requests / that
wall time. It prints each side's req/s (min / median / max over the rounds, wall and CPU), the
ratio chunksim / Vidur per round (paired, same minute) with its min / median / max, and checks
that Vidur completed every request of the trace (its count, simulated end and mean E2E are
printed beside chunksim's; the two cost models differ, so those are not expected to agree).
Vidur runs with its defaults otherwise, its metrics collection inside the loop included, except
its Chrome trace, which is on by default and built inside the loop: off here, so that the ratio
is taken against the faster Vidur (the trace took about a seventh of Vidur's loop: CPU 516
against 603 req/s). `--vidur-flag=FLAG` (repeatable) adds one of Vidur's own CLI flags after the
benchmark's: `--vidur-flag=--metrics_config_enable_chrome_trace` brings the trace back.

Measured 2026-12-05 on the shared 2-core VM (Intel Xeon; load 4-7 from other work, so the core
was shared: wall times ran 1.5-2.5x the CPU times; CPU reference 0.140-0.146 s), --repeat 3,
default flags: by CPU time chunksim 41.2k / 44.9k / 46.4k simulated req/s, Vidur 580 / 588 /
592, ratio 70.0 / 77.4 / 78.3 (min / median / max); by wall time 14.8k / 22.6k / 22.7k against
295 / 296 / 300, ratio 49.1 / 76.4 / 77.1. With Vidur's Chrome trace on (its default): Vidur
506 / 520 / 539 req/s by CPU time, ratio 84.7 / 89.9 / 90.6. Vidur completed all 10,000
requests (simulated end 4,752 s against chunksim's 4,749 s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
from machine import one_core, reference_s  # beside this script

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation, fixed_workload

DATA = Path(__file__).resolve().parents[2] / "shared/data"
TRACE, CONFIG = DATA / "traces/vidur_splitwise_conv_10k_qps2.csv", DATA / "traces/codellama-34b-instruct.config.json"
KERNELS = DATA / "kernels/vidur"  # Vidur's own profiling tables, in its data/profiling layout
# microsoft/vidur at this commit (2024-11-19), the one the shared data's PROVENANCE files name;
# benchmarks/vidur_setup.sh installs it and must name the same commit.
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
DRIVER = Path(__file__).resolve().parent / "vidur_driver.py"
FLAGS = {
    "vllm": {"max_num_batched_tokens": 512, "max_num_seqs": 128, "block_size": 16},
    "sglang": {"chunked_prefill_size": 512, "max_prefill_tokens": 512, "max_running_requests": 128, "page_size": 16},
    "nochunk": {"max_num_seqs": 128, "block_size": 16},
}
COLUMNS = ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s")


def workload():
    t = pd.read_csv(TRACE)
    return fixed_workload(t.arrived_at.to_numpy(), t.num_prefill_tokens.to_numpy(), t.num_decode_tokens.to_numpy())


class CountingSim(Simulation):
    """Counts the SimPy events the run processes (one Environment.step each) and the replica's
    runs (one plan each: a step, or a fast-forwarded run of steps; a sole fast-forwarding replica
    takes most runs without an event, see ExactEnvironment.skip_to)."""

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
    sched, pool, cm, max_len = build_engine(
        policy, load_model(str(CONFIG)), load_hardware("a100-80gb"), 2, FLAGS[policy]
    )
    sim = (CountingSim if count else Simulation)([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=max_len)
    t0, c0 = time.perf_counter(), time.process_time()
    res = sim.run()
    sim_time = (time.perf_counter() - t0, time.process_time() - c0)
    return res, sim_time, (sim.events, sim.runs) if count else None


def set_data(data: Path) -> None:
    global TRACE, CONFIG, KERNELS
    data = Path(data)
    TRACE, CONFIG = data / "traces" / TRACE.name, data / "traces" / CONFIG.name
    KERNELS = data / "kernels/vidur"


def vidur_commit(python: str) -> str:
    """The commit vidur_setup.sh wrote beside the venv of this Python, or why it is not known."""
    mark = Path(python).absolute().parents[1] / "vidur-commit"
    return mark.read_text().strip() if mark.is_file() else f"unknown (no {mark}: not made by vidur_setup.sh)"


def run_vidur(python: str, workdir: Path, cpu: int | None, train_only: bool = False, flags=()) -> dict:
    """One run of benchmarks/vidur_driver.py under Vidur's Python, pinned to `cpu` by taskset (a
    child also inherits this process's affinity); `flags`: Vidur CLI flags added to the driver's.
    Returns the driver's JSON result."""
    cmd = [python, str(DRIVER), "--trace", str(TRACE), "--kernels", str(KERNELS), "--workdir", str(workdir)]
    if train_only:
        cmd.append("--train-only")
    cmd += list(flags)
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu), *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("VIDUR_RESULT ")]
    if p.returncode != 0 or not lines:
        raise SystemExit(
            f"Vidur's run failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len("VIDUR_RESULT ") :])


def spread(xs: list[float], fmt: str = ",.0f") -> str:
    """min / median / max of xs."""
    return " / ".join(format(v, fmt) for v in (min(xs), statistics.median(xs), max(xs)))


def versus_report(n: int, chunk: list[tuple[float, float]], vidur: list[tuple[float, float]]) -> list[str]:
    """The figures of `versus`: n requests; chunk and vidur hold each round's (wall s, CPU s)
    of the simulation loop, in round order (round i of each side ran in the same minute)."""
    cw, vw = [n / w for w, _ in chunk], [n / w for w, _ in vidur]
    cc, vc = [n / c for _, c in chunk], [n / c for _, c in vidur]
    ratio = [a / b for a, b in zip(cw, vw)]
    ratio_cpu = [a / b for a, b in zip(cc, vc)]
    k = len(chunk)
    return [
        f"simulated req/s, min / median / max of {k} alternating round{'s' if k > 1 else ''} (wall; CPU):",
        f"  chunksim  {spread(cw)}   CPU {spread(cc)}",
        f"  Vidur     {spread(vw)}   CPU {spread(vc)}",
        f"  ratio chunksim / Vidur, round by round: {spread(ratio, '.1f')}   CPU {spread(ratio_cpu, '.1f')}",
        "  rounds (chunksim wall s, Vidur wall s): "
        + ", ".join(f"({a:.3f}, {b:.2f})" for (a, _), (b, _) in zip(chunk, vidur)),
    ]


def versus(python: str, workdir: Path, policy: str, wl, ff: bool, rounds: int, flags=()) -> None:
    """chunksim and Vidur's own simulator alternately on one core, `rounds` times (the docstring)."""
    if not DRIVER.is_file():
        raise SystemExit(f"missing {DRIVER}")
    if not (KERNELS / "legacy_acb95f6/a100/attention.csv").is_file():
        raise SystemExit(f"needs Vidur's A100 tables under {KERNELS} (the shared data folder; --data DIR)")
    aff = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    cpu = min(aff) if len(aff) == 1 else None
    n = len(wl)
    print(
        f"Vidur: {python}, commit {vidur_commit(python)} (pinned here: {VIDUR_COMMIT[:7]}); "
        f"{'taskset -c ' + str(cpu) if cpu is not None and shutil.which('taskset') else 'not pinned'}; "
        f"work dir {workdir}" + (f"; Vidur flags added: {' '.join(flags)}" if flags else "")
    )
    t0 = time.perf_counter()
    warm = run_vidur(python, workdir, cpu, train_only=True, flags=flags)
    print(
        f"Vidur set-up, untimed (import, predictor training or cache load, {warm['requests']:,} requests "
        f"generated and queued): {time.perf_counter() - t0:.1f} s"
    )
    chunk, vidur, res, out, refs = [], [], None, None, []
    for i in range(rounds):
        refs.append(reference_s(3, time.process_time))
        res, (wall, cpu_s), _ = simulate(policy, wl, ff)
        chunk.append((wall, cpu_s))
        out = run_vidur(python, workdir, cpu, flags=flags)
        if out["requests"] != n or out["completed"] != n:
            raise SystemExit(
                f"Vidur completed {out.get('completed')} of {out['requests']} requests "
                f"(the trace has {n:,}): not the same workload"
            )
        vidur.append((out["loop_wall_s"], out["loop_cpu_s"]))
        print(
            f"round {i + 1}: chunksim {wall:.3f} s ({n / wall:,.0f} req/s), Vidur {out['loop_wall_s']:.2f} s "
            f"({n / out['loop_wall_s']:,.0f} req/s, set-up {out['setup_s']:.1f} s untimed)",
            flush=True,
        )
    r, s = res.requests, res.summary
    e2e = float(r["e2el_s"].mean())
    print(
        f"{n:,} requests, CodeLlama-34B, A100 tp 2; chunksim {policy} {FLAGS[policy]}, fast_forward={ff}; "
        f"Vidur sarathi chunk 512, batch cap 128, block 16"
    )
    print(
        f"completed: chunksim {s['completed']:,}, Vidur {out['completed']:,}; simulated end: chunksim "
        f"{float(r['finish_s'].max()):,.0f} s, Vidur {out['sim_end_s']:,.0f} s; mean E2E: chunksim {e2e:.2f} s, "
        f"Vidur {out['mean_e2e_s']:.2f} s (different cost models)"
    )
    for line in versus_report(n, chunk, vidur):
        print(line)
    print(
        f"machine: CPU reference {min(refs):.3f} s (benchmarks/machine.py, best of {len(refs)} readings, one "
        f"before each round: {', '.join(f'{r:.3f}' for r in refs)}; 0.105 s on the fastest machine seen)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="vllm", choices=sorted(FLAGS))
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best wall time is reported (noisy machines)")
    ap.add_argument("--no-fast-forward", action="store_true")
    ap.add_argument("--compare", action="store_true", help="also step the run and check the two agree to the bit")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument(
        "--data",
        type=Path,
        default=DATA,
        metavar="DIR",
        help="the shared data folder (default ../shared/data beside the repository)",
    )
    ap.add_argument(
        "--vidur",
        metavar="PYTHON",
        help="the Python of Vidur's venv (benchmarks/vidur_setup.sh): "
        "run Vidur's own simulator on the workload alternately with chunksim on the same core "
        "and print both sides' simulated req/s and their ratio (see the module docstring)",
    )
    ap.add_argument(
        "--vidur-workdir",
        type=Path,
        default=Path.home() / ".cache/chunksim" / f"vidur-{VIDUR_COMMIT[:7]}",
        metavar="DIR",
        help="where Vidur caches its trained predictor and writes its output (default %(default)s)",
    )
    ap.add_argument(
        "--vidur-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="a flag of Vidur's own CLI added to the benchmark's (repeatable; use the = form), "
        "e.g. --vidur-flag=--metrics_config_enable_chrome_trace (Vidur's default, off here)",
    )
    args = ap.parse_args()
    set_data(args.data)
    if not TRACE.is_file() or not CONFIG.is_file():
        raise SystemExit(f"needs {TRACE} and {CONFIG} (the shared data folder; --data DIR)")
    print(f"one core: {one_core()}")
    wl = workload()
    ff = not args.no_fast_forward
    if args.vidur:
        versus(args.vidur, args.vidur_workdir, args.policy, wl, ff, max(1, args.repeat), args.vidur_flag)
        return
    walls, cpus, refs, cpu_refs = [], [], [reference_s()], [reference_s(3, time.process_time)]
    for _ in range(max(1, args.repeat)):  # the reference between runs: both best-of over the same minutes
        res = None
        res, (wall, cpu), _ = simulate(args.policy, wl, ff)
        walls.append(wall)
        cpus.append(cpu)
        refs.append(reference_s(3))
        cpu_refs.append(reference_s(3, time.process_time))
    _, _, (events, runs) = simulate(args.policy, wl, ff, count=True)
    wall, cpu, s, n = min(walls), min(cpus), res.summary, len(wl)
    print(f"{n:,} requests, CodeLlama-34B, A100 tp 2, {args.policy} {FLAGS[args.policy]}, fast_forward={ff}")
    print(
        f"wall {wall:.3f} s (runs: {', '.join(f'{w:.3f}' for w in walls)})  {n / wall:,.0f} simulated req/s  "
        f"{events:,} SimPy events  {runs:,} plans  {s['num_iterations']:,} iterations  completed {s['completed']:,}  "
        f"p99 TTFT {s['p99_ttft_ms']:.0f} ms  p99 ITL {s['p99_itl_ms']:.1f} ms"
    )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    ref, cpu_ref = min(refs), min(cpu_refs)
    print(
        f"machine: reference {ref:.3f} s (benchmarks/machine.py, best of {len(refs)} readings between the runs: "
        f"{', '.join(f'{r:.3f}' for r in refs)}); at reference 0.105 s: {n / wall * ref / 0.105:,.0f} simulated req/s"
    )
    print(
        f"CPU time (steadier on a shared machine): {cpu:.3f} s, reference {cpu_ref:.3f} s CPU; "
        f"at reference 0.105 s: {n / cpu * cpu_ref / 0.105:,.0f} simulated req/s"
    )
    if args.compare:
        a = res.requests
        b, (tb, _), (ev, pl) = simulate(args.policy, wl, not ff, count=True)
        b = b.requests
        same = all(np.array_equal(a[c].to_numpy(), b[c].to_numpy(), equal_nan=True) for c in COLUMNS)
        print(
            f"{'stepping' if ff else 'fast-forward'}: wall {tb:.2f} s, {ev:,} SimPy events, {pl:,} plans; "
            f"every request's {', '.join(COLUMNS)} bit-identical: {same}"
        )
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
