"""The SGLang speculative-decoding conformance table: per configuration ({sync, overlap} x page
{1, 16} x (steps, topk, draft) {(3, 1, 4), (5, 4, 8)} x KV {ample, tight}), how many random
scenarios chunksim's policy schedules exactly as SGLang's own spec-v2 functions at every step;
with --ablations, how many scenarios each rule broken in chunksim makes diverge.

    python -m benchmarks.conformance_sglang_spec [--count 1000] [--config NAME] [--ablations] [--quiet]

Needs SGLang (pip install 'chunksim[conformance]'); run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.conformance.sglang_engine import SGLANG_VERSION
from tests.conformance.sglang_spec import CONFIGS, ablations, compare_spec, random_spec_scenario, run_spec_engine


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000, help="random scenarios per configuration")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS), help="only these configurations")
    ap.add_argument("--ablations", action="store_true", help="also count the scenarios each broken rule diverges on")
    ap.add_argument("--quiet", action="store_true", help="no divergence lines")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    failures = []
    names = (None,) + (ablations.NAMES if a.ablations else ())
    print(f"SGLang {SGLANG_VERSION} speculative decoding (EAGLE, spec v2) conformance")
    head = "".join(f" {n or 'match':>26s}" for n in names)
    print(f"{'configuration':28s} {head} {'retracting':>11s}")
    for c in a.config or CONFIGS:
        counts = dict.fromkeys(names, 0)
        n = retracting = 0
        for seed in range(a.start, a.start + a.count):
            sc = random_spec_scenario(c, seed)
            try:
                steps = run_spec_engine(sc)
                v = compare_spec(sc, steps)
                counts[None] += v.match
                retracting += v.retractions > 0
                if not v.match:
                    failures.append(f"{sc.name}: {v.divergence}")
            except Exception as e:  # a crash on either side is a failed scenario, reported
                failures.append(f"{sc.name}: {type(e).__name__}: {e}")
                steps = None
            for name in names[1:]:
                counts[name] += steps is not None and diverges(sc, steps, name)
            n += 1
        cells = "".join(f" {counts[k]:>19d}/{n:<6d}" for k in names)
        print(f"{c:28s} {cells} {retracting:>11d}", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s; ablation columns count the scenarios that diverge)")
    if failures and not a.quiet:
        print("\nfirst divergence of each failing scenario:")
        for f in failures:
            print(" ", f)
    return 0 if not failures else 1


def diverges(sc, steps, name: str) -> bool:
    """The ablated policy schedules differently, or trips one of chunksim's own invariants."""
    try:
        return not compare_spec(sc, steps, ablate=name).match
    except AssertionError:
        return True


if __name__ == "__main__":
    sys.exit(main())
