"""The SGLang PD decode-server conformance table: per configuration, how many random scenarios
chunksim's decode-server model (policies/sglang_pd.py) runs exactly as SGLang 0.5.23's own
decode queues and loop (tests/conformance/sglang_pd_decode.py) at every step (each request's
tokens, retractions, finishes, and the prealloc / transfer / waiting / running / retracted queues),
how many retract or block preallocation, and the first divergence of each failing scenario.

    python -m benchmarks.conformance_sglang_pd [--count 500] [--config NAME] [--ablation]

Needs SGLang (pip install 'chunksim[conformance]'); run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.conformance.sglang_engine import SGLANG_VERSION
from tests.conformance.sglang_pd_decode import CONFIGS, ablations, compare_pd, random_scenario


def table(configs, count: int, ablation=None) -> tuple[list, list]:
    rows, failures = [], []
    for c in configs:
        ok = retracting = blocked = 0
        t0 = time.perf_counter()
        for seed in range(count):
            sc = random_scenario(c, seed)
            try:
                why, ref = compare_pd(sc, ablation)
            except Exception as e:  # a crash on either side is a failed scenario, reported
                why, ref = f"{type(e).__name__}: {e}", {}
            ok += why is None
            retracting += any(r[1] for r in ref.values())
            blocked += any(r[3] and r[3][0] for r in ref.values())
            if why:
                failures.append(f"{sc.name}: {why}")
        rows.append((c, ok, count, retracting, blocked, time.perf_counter() - t0))
    return rows, failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=500, help="random scenarios per configuration")
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS), help="only these configurations")
    ap.add_argument("--ablation", action="store_true", help="break one rule in chunksim at a time")
    ap.add_argument("--quiet", action="store_true", help="no divergence lines")
    a = ap.parse_args(argv)
    configs = a.config or list(CONFIGS)
    if a.ablation:
        for name, cls in ablations().items():
            rows, _ = table(configs, a.count, cls)
            caught = sum(n - ok for _, ok, n, *_ in rows)
            print(f"ablation {name:22s} diverging {caught:>5d} / {sum(n for _, _, n, *_ in rows)}")
        return 0
    rows, failures = table(configs, a.count)
    print(f"SGLang {SGLANG_VERSION} PD decode server conformance")
    print(f"{'configuration':18s} {'match':>11s} {'retracting':>11s} {'prealloc blocked':>17s} {'s':>6s}")
    for c, ok, n, r, b, s in rows:
        print(f"{c:18s} {ok:>5d}/{n:<5d} {r:>11d} {b:>17d} {s:>6.0f}")
    if failures and not a.quiet:
        print("\nfirst divergence of each failing scenario:")
        for f in failures:
            print(" ", f)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
