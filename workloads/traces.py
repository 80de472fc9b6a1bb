"""Trace replay: Azure LLM inference 2023 CSV, Mooncake JSONL, or any CSV/JSONL with a column mapping.

Arrival times are seconds since the trace's earliest request. The pipeline, in order:
read -> sort (noted) -> spread same-timestamp groups (optional, seeded) -> window [start_s, end_s),
shifted so start_s is 0 -> first ``max_requests`` -> ``time_scale`` or ``target_rate``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from costmodel.errors import InputError, require

from . import readers
from .workload import Workload

FIELDS = ("arrival", "prompt_len", "output_len", "block_hashes")
FORMATS = {
    "azure": dict(
        reader="csv",
        time_unit="datetime",
        block_tokens=16,
        columns={"arrival": "TIMESTAMP", "prompt_len": "ContextTokens", "output_len": "GeneratedTokens"},
    ),
    "mooncake": dict(
        reader="jsonl",
        time_unit="ms",
        block_tokens=512,
        columns={
            "arrival": "timestamp",
            "prompt_len": "input_length",
            "output_len": "output_length",
            "block_hashes": "hash_ids",
        },
    ),
    "csv": dict(reader="csv", time_unit="s", block_tokens=16, columns=None),
    "jsonl": dict(reader="jsonl", time_unit="s", block_tokens=16, columns=None),
}
MOONCAKE_GROUP_S = 3.0


def load_trace(
    path,
    format: str = "csv",
    *,
    columns: dict | None = None,
    time_unit: str | None = None,
    block_tokens: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    max_requests: int | None = None,
    time_scale: float | None = None,
    target_rate: float | None = None,
    spread_s: float | None = None,
    rng: np.random.Generator | None = None,
    max_concurrency: int | None = None,
) -> Workload:
    """Replay a trace file.

    ``columns`` maps ``arrival``, ``prompt_len``, ``output_len`` and optionally ``block_hashes`` to
    the file's column names (required for ``csv``/``jsonl``; overrides a preset's names).
    ``time_scale`` multiplies every arrival time (2 = half the rate); ``target_rate`` picks the
    scale that makes the mean rate (n-1)/span equal to it. ``spread_s`` moves each request to a
    uniform point in [t, t + spread_s), keeping the order within a timestamp: Mooncake logs
    arrivals in 3 s steps (``MOONCAKE_GROUP_S``). Needs ``rng``; off by default.
    """
    require(format in FORMATS, "trace:format", format, f"must be one of {list(FORMATS)}")
    preset = FORMATS[format]
    mapping = {**(preset["columns"] or {}), **(columns or {})}
    unknown = sorted(set(mapping) - set(FIELDS))
    require(not unknown, "trace:columns", unknown, f"unknown keys; allowed: {list(FIELDS)}")
    missing = [f for f in FIELDS[:3] if f not in mapping]
    require(not missing, "trace:columns", missing, f"format {format!r} needs a column for each of these")
    time_unit = time_unit or preset["time_unit"]
    block_tokens = int(block_tokens or preset["block_tokens"])
    require(time_unit in readers.TIME_UNITS, "trace:time_unit", time_unit, f"must be one of {list(readers.TIME_UNITS)}")
    require(block_tokens > 0, "trace:block_tokens", block_tokens, "must be > 0")

    def convert(cols: readers.Columns):
        t = readers.seconds(cols, "arrival", time_unit)
        p = readers.positive_ints(cols, "prompt_len")
        o = readers.positive_ints(cols, "output_len")
        h = readers.int_tuples(cols, "block_hashes") if "block_hashes" in mapping else None
        if h is not None and format == "mooncake":
            _check_block_count(cols, p, h, block_tokens)
        return t, p, o, h

    if preset["reader"] == "csv":
        require(
            "block_hashes" not in mapping,
            "trace:columns:block_hashes",
            mapping.get("block_hashes"),
            "block hashes are read from JSONL traces only",
        )
        t, p, o, h = convert(readers.read_csv(path, mapping))
    else:
        t, p, o, h = readers.read_jsonl(path, mapping, convert)
    return replay(
        t,
        p,
        o,
        h,
        block_tokens=block_tokens,
        start_s=start_s,
        end_s=end_s,
        max_requests=max_requests,
        time_scale=time_scale,
        target_rate=target_rate,
        spread_s=spread_s,
        rng=rng,
        max_concurrency=max_concurrency,
        source=Path(path).name,
    )


def azure(path, **options) -> Workload:
    return load_trace(path, "azure", **options)


def mooncake(path, **options) -> Workload:
    return load_trace(path, "mooncake", **options)


def replay(
    arrival_s,
    prompt_len,
    output_len,
    block_hashes=None,
    *,
    block_tokens: int = 16,
    start_s=None,
    end_s=None,
    max_requests=None,
    time_scale=None,
    target_rate=None,
    spread_s=None,
    rng=None,
    max_concurrency=None,
    source: str = "trace",
) -> Workload:
    """The replay pipeline on arrays already read (see the module docstring for the order)."""
    t = np.asarray(arrival_s, dtype=np.float64)
    idx = np.arange(len(t))
    notes = []
    out_of_order = int(np.count_nonzero(np.diff(t) < 0))
    if out_of_order:
        idx = np.argsort(t, kind="stable")
        t = t[idx]
        notes.append(f"{source}: sorted {out_of_order} out-of-order timestamps")
    if spread_s is not None:
        require(spread_s > 0 and math.isfinite(spread_s), "trace:spread_s", spread_s, "must be > 0")
        require(rng is not None, "trace:spread_s", spread_s, "spreading needs a seeded rng")
        groups = np.concatenate(([0], np.cumsum(np.diff(t) != 0)))
        u = rng.uniform(0.0, spread_s, len(t))
        t = t + u[np.lexsort((u, groups))]
        order = np.argsort(t, kind="stable")
        t, idx = t[order], idx[order]
        notes.append(
            f"{source}: spread {len(t)} arrivals in {groups[-1] + 1} timestamp groups "
            f"uniformly over {spread_s:g} s each"
        )
    lo = -np.inf if start_s is None else float(start_s)
    hi = np.inf if end_s is None else float(end_s)
    require(lo < hi, "trace:end_s", end_s, f"must be > start_s ({start_s})")
    keep = (t >= lo) & (t < hi)
    require(
        bool(keep.any()),
        "trace:window",
        (start_s, end_s),
        f"no requests in the window; {source} spans 0 to {t[-1]:.3f} s",
    )
    t, idx = t[keep] - (lo if start_s is not None else 0.0), idx[keep]
    if max_requests is not None:
        require(int(max_requests) >= 1, "trace:max_requests", max_requests, "must be >= 1")
        t, idx = t[:max_requests], idx[:max_requests]
    scale = _scale(t, time_scale, target_rate)
    if scale != 1.0:
        t = t * scale
        notes.append(f"{source}: arrival times scaled by {scale:.6g}")
    hashes = None if block_hashes is None else [block_hashes[i] for i in idx]
    return Workload(
        t, np.asarray(prompt_len)[idx], np.asarray(output_len)[idx], hashes, block_tokens, max_concurrency, tuple(notes)
    )


def _scale(t: np.ndarray, time_scale, target_rate) -> float:
    require(
        time_scale is None or target_rate is None,
        "trace:time_scale",
        time_scale,
        "give time_scale or target_rate, not both",
    )
    if time_scale is not None:
        require(time_scale > 0 and math.isfinite(time_scale), "trace:time_scale", time_scale, "must be > 0")
        return float(time_scale)
    if target_rate is not None:
        require(target_rate > 0 and math.isfinite(target_rate), "trace:target_rate", target_rate, "must be > 0")
        span = float(t[-1] - t[0])
        require(len(t) >= 2 and span > 0, "trace:target_rate", target_rate, "needs at least two distinct arrival times")
        return ((len(t) - 1) / span) / target_rate
    return 1.0


def _check_block_count(cols, prompt_len: np.ndarray, hashes: list, block_tokens: int) -> None:
    counts = np.fromiter((len(h) for h in hashes), dtype=np.int64, count=len(hashes))
    bad = np.flatnonzero(counts != -(-prompt_len // block_tokens))
    if len(bad):
        i = bad[0]
        raise InputError(
            cols.where(i, "block_hashes"),
            int(counts[i]),
            f"expected ceil({prompt_len[i]}/{block_tokens}) = {-(-prompt_len[i] // block_tokens)} hash ids",
        )
