"""Per-request records and the run summary, with `vllm bench serve`'s result keys and semantics.

TTFT = first token − arrival; TPOT = (E2EL − TTFT)/(output − 1) for outputs > 1; ITL = every gap
between consecutive tokens of a request; E2EL = last token − arrival. Goodput counts requests
meeting every given SLO (inclusive), per second (vllm/benchmarks/serve.py, calculate_metrics).
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pandas as pd

from .histogram import LogHistogram

PERCENTILES = (50, 90, 99)


COLUMNS = {
    "rid": np.int64,
    "replica": np.int64,
    "arrival_s": np.float64,
    "prompt_len": np.int64,
    "output_len": np.int64,
    "num_output_tokens": np.int64,
    "first_scheduled_s": np.float64,
    "first_token_s": np.float64,
    "finish_s": np.float64,
    "max_itl_s": np.float64,
    "num_preemptions": np.int64,
    "num_cached_tokens": np.int64,
    "rejected": object,
}  # None in a float column is NaN: not reached (np.fromiter reads it so)


def requests_frame(requests, known: dict | None = None) -> pd.DataFrame:
    """One row per request, built column by column (a million requests in well under a second),
    in rid order (the order requests arrive in, so usually no sort is needed). `known`: columns
    the caller already holds, in list order (a run's inputs: rid, lengths, send times), not read
    from a million objects again. `rejected` is read only where a request did not finish (one
    that finished was never rejected: rejection is at arrival)."""
    n, cols, known = len(requests), {}, known or {}
    for name, dtype in COLUMNS.items():
        if name in known:
            cols[name] = np.asarray(known[name], dtype=dtype)
        elif dtype is not object:
            cols[name] = np.fromiter(map(attrgetter(name), requests), dtype, n)
        else:
            cols[name] = column = np.full(n, None, dtype=object)
            for i in np.flatnonzero(np.isnan(cols["finish_s"])).tolist():
                column[i] = getattr(requests[i], name)
    arrival, first, finish, out = cols["arrival_s"], cols["first_token_s"], cols["finish_s"], cols["output_len"]
    cols["ttft_s"] = ttft = first - arrival
    cols["e2el_s"] = e2el = finish - arrival
    cols["queue_s"] = cols["first_scheduled_s"] - arrival
    with np.errstate(invalid="ignore"):
        cols["tpot_s"] = np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
    rid = cols["rid"]
    if n > 1 and not (rid[1:] >= rid[:-1]).all():
        order = np.argsort(rid, kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
    return pd.DataFrame(cols)


def _stats(name: str, values_s: np.ndarray, out: dict) -> None:
    v = values_s[~np.isnan(values_s)] * 1e3
    out[f"mean_{name}_ms"] = float(v.mean()) if len(v) else 0.0
    out[f"median_{name}_ms"] = float(np.median(v)) if len(v) else 0.0
    out[f"std_{name}_ms"] = float(v.std()) if len(v) else 0.0
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(v, p)) if len(v) else 0.0


def summarize(df: pd.DataFrame, itl: LogHistogram, num_iterations: int, goodput: dict | None = None) -> dict:
    done = df[df.finish_s.notna()]
    duration = float(done.finish_s.max() - df.arrival_s.min()) if len(done) else 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out = {
        "duration": duration,
        "completed": int(len(done)),
        "num_rejected": int(df.rejected.notna().sum()),
        "total_input_tokens": int(done.prompt_len.sum()),
        "total_output_tokens": int(done.num_output_tokens.sum()),
        "request_throughput": per_s(len(done)),
        "output_throughput": per_s(float(done.num_output_tokens.sum())),
        "total_token_throughput": per_s(float(done.prompt_len.sum() + done.num_output_tokens.sum())),
    }
    for name in ("ttft", "tpot", "e2el"):
        _stats(name, done[f"{name}_s"].to_numpy(dtype=float), out)
    out["mean_itl_ms"] = itl.mean * 1e3
    out["median_itl_ms"] = itl.quantile(0.5) * 1e3
    for p in PERCENTILES:
        out[f"p{p}_itl_ms"] = itl.quantile(p / 100) * 1e3
    out["max_itl_ms"] = itl.max * 1e3
    out["num_iterations"] = int(num_iterations)
    out["num_preemptions"] = int(df.num_preemptions.sum())
    if goodput:
        out["request_goodput"] = per_s(int(good_mask(done, goodput).sum()))
    return out


def good_mask(df: pd.DataFrame, slos_ms: dict) -> np.ndarray:
    ok = np.ones(len(df), dtype=bool)
    for key, ms in slos_ms.items():
        col = df[f"{key}_s"].fillna(0.0).to_numpy()
        ok &= col <= ms / 1e3
    return ok


def parse_goodput(items: list[str]) -> dict:
    """`ttft:MS tpot:MS e2el:MS` as `vllm bench serve --goodput` takes them."""
    from costmodel.errors import InputError

    out = {}
    for item in items:
        key, _, val = item.partition(":")
        if key not in ("ttft", "tpot", "e2el"):
            raise InputError("goodput", item, "keys are ttft, tpot, e2el")
        try:
            ms = float(val)
        except ValueError:
            raise InputError("goodput", item, "value must be a number of milliseconds") from None
        if ms < 0:
            raise InputError("goodput", item, "must be non-negative")
        out[key] = ms
    return out
