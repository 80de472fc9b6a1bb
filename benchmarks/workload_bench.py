"""Load the full public traces (../shared/data/traces) and print wall times and what was loaded.

    python benchmarks/workload_bench.py [--traces DIR] [--repeat N]

Each figure is the best of N loads (the first load also pays imports and a cold page cache).
Traces that are absent are listed as skipped; the script needs no other data.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from workloads import lengths, load_trace

DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces"
TRACES = [
    ("azure2023_conv.csv", "azure", {}),
    ("azure2023_code.csv", "azure", {}),
    ("mooncake_conversation.jsonl", "mooncake", {}),
    ("mooncake_conversation.jsonl", "mooncake", {"spread_s": 3.0}),
    ("mooncake_synthetic.jsonl", "mooncake", {}),
]
TABLES = [
    "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
    "bwb_stats_llama2_tokenizer_filtered_v2.csv",
]


def _best_of(repeat: int, load):
    times, out = [], None
    for i in range(repeat):
        t0 = time.perf_counter()
        out = load(i)
        times.append(time.perf_counter() - t0)
    return min(times), times[0], out


def bench(trace_dir: Path, repeat: int = 5) -> pd.DataFrame:
    rows = []
    for name, fmt, opts in TRACES:
        path = trace_dir / name
        if not path.exists():
            rows.append(dict(file=name, options="", skipped="absent"))
            continue
        rng = (lambda i: np.random.default_rng(i)) if "spread_s" in opts else (lambda i: None)
        best, first, w = _best_of(repeat, lambda i: load_trace(path, fmt, rng=rng(i), **opts))  # noqa: B023 -- called within this iteration
        rows.append(
            dict(
                file=name,
                options=str(opts or ""),
                requests=len(w),
                duration_s=round(w.duration_s, 1),
                rate_rps=round((len(w) - 1) / w.duration_s, 3),
                mean_prompt=round(w.prompt_len.mean(), 1),
                mean_output=round(w.output_len.mean(), 1),
                hashed=w.block_hashes is not None,
                first_load_ms=round(first * 1e3, 1),
                best_load_ms=round(best * 1e3, 1),
                notes="; ".join(w.notes),
            )
        )
    for name in TABLES:
        path = trace_dir / name
        if not path.exists():
            rows.append(dict(file=name, options="table", skipped="absent"))
            continue
        best, first, L = _best_of(repeat, lambda i: lengths.table(path, 10_000, np.random.default_rng(i)))  # noqa: B023 -- called within this iteration
        rows.append(
            dict(
                file=name,
                options="table, 10k draws",
                requests=len(L),
                mean_prompt=round(L.prompt_len.mean(), 1),
                mean_output=round(L.output_len.mean(), 1),
                first_load_ms=round(first * 1e3, 1),
                best_load_ms=round(best * 1e3, 1),
            )
        )
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 60):
        print(bench(args.traces, args.repeat).to_string(index=False, na_rep=""))


if __name__ == "__main__":
    main()
