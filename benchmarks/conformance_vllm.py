"""Step-for-step conformance of chunksim's vLLM policy against vLLM's own Scheduler / AsyncScheduler.

Prints, per configuration, how many random scenarios match at every step (stepping,
fast-forward and the decode cohort), how many saw a preemption in vLLM, and the first
divergence of each failing scenario; then the seed scenes. Needs vLLM installed (see
docs/conformance.md). Run: python benchmarks/conformance_vllm.py [--count 1000] [--config NAME ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "conformance"), os.path.join(HERE, "..")]

from vllm_driver import compare, vllm_available  # noqa: E402
from vllm_scenarios import CONFIGS, SPEC_CONFIGS, random_scenarios, seed_scenes  # noqa: E402

ALL_CONFIGS = [*CONFIGS, *SPEC_CONFIGS]  # spec-*: speculative decoding (policies/vllm_spec.py)

MODES = ("step", "fast", "cohort")


def run(scenarios, show: int, modes=MODES) -> dict:
    ok = {m: 0 for m in modes}
    ok_all = preempting = 0
    failures = []
    for sc in scenarios:
        try:
            res = compare(sc, modes)
        except Exception as e:  # a crash on either side is a failing scenario, shown like one
            res = {"vllm": {}, **{m: f"{type(e).__name__}: {e}" for m in modes}}
        preempting += any(rec[1] for rec in res["vllm"].values())
        bad = {m: res[m] for m in modes if res[m] is not None}
        for m in modes:
            ok[m] += m not in bad
        ok_all += not bad
        if bad:
            failures.append((sc, bad))
    for sc, bad in failures[:show]:
        print(f"  FAIL {sc.label}")
        for m, why in bad.items():
            print(f"       {m}: {why[:400]}")
    return {"n": len(scenarios), "ok": ok, "all": ok_all, "preempting": preempting}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="random scenarios per configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", nargs="*", default=ALL_CONFIGS, choices=ALL_CONFIGS)
    ap.add_argument("--show", type=int, default=5, help="failing scenarios printed per configuration")
    args = ap.parse_args(argv)
    why = vllm_available()
    if why:
        print(why)
        return 2
    rows = []
    for name in args.config:
        t = time.perf_counter()
        r = run(random_scenarios(name, args.count, args.seed), args.show)
        rows.append((name, r, time.perf_counter() - t))
        print(
            f"{name}: {r['all']}/{r['n']} match in every mode ({r['preempting']} with preemptions) "
            f"in {rows[-1][2]:.0f} s",
            flush=True,
        )
    for async_ in (False, True):
        scenes = seed_scenes(async_)
        r = run(scenes, len(scenes))
        rows.append(("seed scenes" + (" async" if async_ else ""), r, 0.0))
    print()
    print(f"{'configuration':<22}{'scenarios':>10}{'step':>8}{'fast':>8}{'cohort':>8}{'all':>8}{'preempt':>9}")
    for name, r, _ in rows:
        print(
            f"{name:<22}{r['n']:>10}"
            + "".join(f"{r['ok'][m]:>8}" for m in MODES)
            + f"{r['all']:>8}{r['preempting']:>9}"
        )
    return 0 if all(r["all"] == r["n"] for _, r, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
