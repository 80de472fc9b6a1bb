"""The SGLang conformance table: per configuration, how many random scenarios chunksim's SGLang
policy schedules exactly as SGLang's own scheduler at every step (tokens per request, retractions,
finishes; then fast-forward against stepping), how many of them retract, and the first divergence
of each failing scenario.

    python -m benchmarks.conformance_sglang [--n 1000] [--config NAME] [--quiet]
    python -m benchmarks.conformance_sglang --dp [--n 500]   # DP attention across ranks (sglang_dp.py)

Needs SGLang (pip install 'chunksim[conformance]'); run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.conformance.sglang_driver import compare
from tests.conformance.sglang_engine import SGLANG_VERSION, run_engine
from tests.conformance.sglang_scenarios import CONFIGS, random_scenario, seed_scenes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="random scenarios per configuration")
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS), help="only these configurations")
    ap.add_argument("--quiet", action="store_true", help="no divergence lines")
    ap.add_argument("--dp", action="store_true", help="DP attention across ranks (tests/conformance/sglang_dp.py)")
    a = ap.parse_args(argv)
    if a.dp:
        return dp_table(a.n, a.quiet)
    t0 = time.perf_counter()
    rows, failures = [], []
    groups = [("seed scenes", seed_scenes())] + [
        (c, [random_scenario(c, s) for s in range(a.n)]) for c in (a.config or CONFIGS)
    ]
    for name, scenes in groups:
        ok = n = retracting = retractions = 0
        for sc in scenes:
            try:
                v = compare(sc, run_engine(sc))
            except Exception as e:  # a crash on either side is a failed scenario, reported
                failures.append(f"{sc.name}: {type(e).__name__}: {e}")
                n += 1
                continue
            n += 1
            ok += v.match
            retracting += v.retractions > 0
            retractions += v.retractions
            if not v.match:
                failures.append(f"{sc.name}: {v.divergence}")
        rows.append((name, ok, n, retracting, retractions))
    print(f"SGLang {SGLANG_VERSION} conformance ({time.perf_counter() - t0:.0f} s)")
    print(f"{'configuration':30s} {'match':>12s} {'retracting':>11s} {'retractions':>12s}")
    for name, ok, n, r, rr in rows:
        print(f"{name:30s} {ok:>5d}/{n:<6d} {r:>11d} {rr:>12d}")
    if failures and not a.quiet:
        print("\nfirst divergence of each failing scenario:")
        for f in failures:
            print(" ", f)
    return 0 if not failures else 1


def dp_table(n: int, quiet: bool) -> int:
    """Per configuration: random multi-rank scenarios whose group steps (which ranks run a forward,
    which an idle batch, each request's tokens) and ranks all match SGLang's own code."""
    from tests.conformance.sglang_dp import CONFIGS as DP_CONFIGS, compare_dp, random_dp_scenario

    t0 = time.perf_counter()
    rows, failures = [], []
    for c in DP_CONFIGS:
        ok = 0
        for seed in range(n):
            sc = random_dp_scenario(c, seed)
            try:
                why = compare_dp(sc)
            except Exception as e:  # a crash on either side is a failed scenario, reported
                why = f"{sc.name}: {type(e).__name__}: {e}"
            ok += why is None
            if why:
                failures.append(why)
        rows.append((c, ok))
    print(f"SGLang {SGLANG_VERSION} DP attention across ranks ({time.perf_counter() - t0:.0f} s)")
    for c, ok in rows:
        print(f"{c:45s} {ok:>5d}/{n}")
    if failures and not quiet:
        print("\nfirst divergence of each failing scenario:")
        for f in failures:
            print(" ", f)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
