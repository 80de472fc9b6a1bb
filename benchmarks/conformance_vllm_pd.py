"""Step-for-step conformance of chunksim's vLLM policy with a KV connector (PD disaggregation)
against vLLM 0.33.0's own Scheduler / AsyncScheduler driven with a stand-in NIXL connector.

Prints, per configuration, how many random scenarios match at every step, how many saw a
preemption in vLLM, how many requests loaded remote KV, and the first divergence of each
failing scenario. Needs vLLM installed (see docs/conformance.md).
Run: python benchmarks/conformance_vllm_pd.py [--count 500] [--config NAME ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "conformance"), os.path.join(HERE, "..")]

from vllm_driver import vllm_available  # noqa: E402
from vllm_pd_driver import compare_pd  # noqa: E402
from vllm_pd_scenarios import CONFIGS, random_pd_scenarios  # noqa: E402


def run(scenarios, show: int) -> dict:
    ok = preempting = 0
    failures = []
    for sc in scenarios:
        try:
            why, ref = compare_pd(sc)
        except Exception as e:  # a crash on either side is a failing scenario, shown like one
            why, ref = f"{type(e).__name__}: {e}", {}
        preempting += any(rec[1] for rec in ref.values())
        ok += why is None
        if why is not None:
            failures.append((sc, why))
    for sc, why in failures[:show]:
        print(f"  FAIL {sc.label[:600]}\n       {why[:400]}")
    return {"n": len(scenarios), "ok": ok, "preempting": preempting}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=500, help="random scenarios per configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--show", type=int, default=5, help="failing scenarios printed per configuration")
    args = ap.parse_args(argv)
    why = vllm_available()
    if why:
        print(why)
        return 2
    rows = []
    for name in args.config:
        t = time.perf_counter()
        scenarios = random_pd_scenarios(name, args.count, args.seed)
        r = run(scenarios, args.show)
        r["remote"] = sum(role != "L" for sc in scenarios for role in sc.roles)
        rows.append((name, r, time.perf_counter() - t))
        print(
            f"{name}: {r['ok']}/{r['n']} match ({r['preempting']} with preemptions) in {rows[-1][2]:.0f} s", flush=True
        )
    print()
    print(f"{'configuration':<20}{'scenarios':>10}{'match':>8}{'preempt':>9}{'PD requests':>13}")
    for name, r, _ in rows:
        print(f"{name:<20}{r['n']:>10}{r['ok']:>8}{r['preempting']:>9}{r['remote']:>13}")
    return 0 if all(r["ok"] == r["n"] for _, r, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
