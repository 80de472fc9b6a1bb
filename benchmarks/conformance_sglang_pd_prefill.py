"""The SGLang PD prefill-server conformance table: per configuration, how many random scenarios
chunksim's prefill-server model (policies/sglang_pd_prefill.py) runs exactly as SGLang 0.5.23's own
bootstrap queue, prefill batches and inflight queue (tests/conformance/sglang_pd_prefill.py) at
every step (each request's tokens; the bootstrap, waiting and inflight queues; every KV send's
range; every transfer seen complete), how many send a prompt in chunks, keep a bootstrapped
request waiting for a metadata buffer (2 × max_running_requests), or hit the radix cache, and
the first divergence of each failing scenario.

    python -m benchmarks.conformance_sglang_pd_prefill [--count 500] [--config NAME] [--ablation]

Needs SGLang (pip install 'chunksim[conformance]'); run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.conformance.sglang_engine import SGLANG_VERSION
from tests.conformance.sglang_pd_prefill import CONFIGS, ablations, compare_prefill, random_scenario


def table(configs, count: int, ablation=None) -> tuple[list, list]:
    rows, failures = [], []
    for c in configs:
        ok = chunked = blocked = cached = 0
        t0 = time.perf_counter()
        for seed in range(count):
            sc = random_scenario(c, seed)
            stats: dict = {}
            try:
                why, _ = compare_prefill(sc, ablation, stats)
            except Exception as e:  # a crash on either side is a failed scenario, reported
                why = f"{type(e).__name__}: {e}"
            ok += why is None
            chunked += stats.get("chunked", False)
            blocked += stats.get("meta_blocked", False)
            cached += stats.get("cache_hit", False)
            if why:
                failures.append(f"{sc.name}: {why}")
        rows.append((c, ok, count, chunked, blocked, cached, time.perf_counter() - t0))
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
    print(f"SGLang {SGLANG_VERSION} PD prefill server conformance")
    print(f"{'configuration':30s} {'match':>11s} {'chunked':>8s} {'meta-full':>10s} {'cache-hit':>10s} {'s':>6s}")
    for c, ok, n, ch, bl, ca, s in rows:
        print(f"{c + ':':30s} {ok:>5d}/{n:<5d} {ch:>8d} {bl:>10d} {ca:>10d} {s:>6.0f}")
    if failures and not a.quiet:
        print("\nfirst divergence of each failing scenario:")
        for f in failures:
            print(" ", f)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
