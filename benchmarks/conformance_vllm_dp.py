"""vLLM 0.33's data-parallel engine (DP ranks in lockstep, expert parallel on) against chunksim, group step by group step.

Per configuration, how many random scenarios match vLLM's own DPEngineCoreProc ranks and front
end at every group step and on every request's rank (tests/conformance/vllm_dp_group.py), how
many saw a preemption and how many ran a dummy batch; with ``--ablation RULE`` chunksim runs with
that rule broken and the table counts the scenarios that catch it. Needs vLLM installed (see
docs/conformance.md). Run: python -m benchmarks.conformance_vllm_dp [--count 500] [--config NAME ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "conformance"), os.path.join(HERE, "..")]

from vllm_dp_group import ABLATIONS, CONFIGS, DUMMY, compare_dp, random_dp_scenario, run_vllm_dp  # noqa: E402
from vllm_driver import vllm_available  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=500, help="random scenarios per configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--ablation", choices=ABLATIONS, help="break this rule in chunksim")
    ap.add_argument("--show", type=int, default=3, help="failing scenarios printed per configuration")
    args = ap.parse_args(argv)
    why = vllm_available()
    if why:
        print(why)
        return 2
    rows = []
    for name in args.config:
        t = time.perf_counter()
        ok = preempting = dummies = 0
        failures = []
        for i in range(args.count):
            d = random_dp_scenario(name, i, args.seed)
            try:
                theirs = run_vllm_dp(d)
                steps = theirs[0]
                preempting += any(isinstance(x, tuple) and x[1] for row in steps.values() for x in row)
                dummies += any(x == DUMMY for row in steps.values() for x in row)
                diff = compare_dp(d, args.ablation, theirs)
            except Exception as e:  # a crash on either side is a failing scenario, shown like one
                diff = f"{d.sc.name}: {type(e).__name__}: {e}"
            ok += diff is None
            if diff:
                failures.append(diff)
        rows.append((name, ok, preempting, dummies, time.perf_counter() - t))
        print(f"{name}: {ok}/{args.count} match ({rows[-1][4]:.0f} s)", flush=True)
        for f in failures[: args.show]:
            print(f"  FAIL {f[:400]}")
    head = "chunksim with " + args.ablation + " broken" if args.ablation else "chunksim"
    print(f"\nvLLM DP + EP ranks vs {head}: {args.count} scenarios per configuration")
    print(f"{'configuration':<20}{'match':>8}{'preempt':>9}{'dummy':>8}{'seconds':>9}")
    for name, ok, pre, dum, s in rows:
        print(f"{name:<20}{ok:>8}{pre:>9}{dum:>8}{s:>9.0f}")
    return 0 if all(ok == args.count for _, ok, *_ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
