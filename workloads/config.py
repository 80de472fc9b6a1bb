"""The YAML/dict front door: one workload section of an experiment file -> a ``Workload``.

Every key must be known and used by the chosen kind; anything else is an ``InputError`` that
names it. Random streams come from ``SeedSequence(seed).spawn(3)`` in a fixed order:
[arrivals, lengths, trace spreading], so adding a stream never changes the others.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from costmodel.errors import InputError, require

from . import arrivals, lengths, traces
from .workload import Workload

ARRIVAL_KEYS = {
    "poisson": {"request_rate", "normalize"},
    "gamma": {"request_rate", "burstiness", "normalize"},
    "constant": {"request_rate"},
    "ramp": {"ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "burstiness"},
    "trace": {"trace"},
}
COMMON_KEYS = {"kind", "num_prompts", "lengths", "max_concurrency"}
LENGTH_KEYS = {
    "fixed": {"input_len", "output_len"},
    "random": {"input_len", "output_len", "range_ratio", "prefix_len", "block_tokens"},
    "table": {"path", "columns", "output_len"},
    "sharegpt": {"path", "columns", "output_len"},
    "shared_prefix": {"num_prefixes", "prefix_len", "suffix_len", "output_len", "block_tokens"},
}
TRACE_KEYS = {
    "format",
    "path",
    "columns",
    "time_unit",
    "block_tokens",
    "start_s",
    "end_s",
    "max_requests",
    "time_scale",
    "target_rate",
    "spread_s",
}


def _known(d: dict, allowed: set, where: str, why: str = "") -> None:
    require(isinstance(d, dict), where, d, "must be a mapping")
    unknown = sorted(set(d) - allowed)
    require(not unknown, where, unknown, f"unknown keys{why}; allowed: {', '.join(sorted(allowed))}")


def _number(d: dict, key: str, where: str, default=None):
    require(key not in d or d[key] is not None, f"{where}:{key}", None, "must be a number")
    v = d.get(key, default)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", ".inf"):
        return math.inf
    require(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)), f"{where}:{key}", v, "must be a number"
    )
    return v


def _count(d: dict, key: str, where: str, default=None):
    v = d.get(key, default)
    require(
        v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
        f"{where}:{key}",
        v,
        "must be an integer >= 1",
    )
    return v


def workload_from_config(d: dict, seed: int, base_dir: str | Path | None = None) -> Workload:
    """``d`` is the ``workload:`` section; relative paths resolve against ``base_dir``."""
    require(isinstance(d, dict), "workload", d, "must be a mapping")
    kind = d.get("kind", "poisson")
    require(
        isinstance(kind, str) and kind in ARRIVAL_KEYS,
        "workload:kind",
        kind,
        f"must be one of {', '.join(ARRIVAL_KEYS)}",
    )
    allowed = COMMON_KEYS | ARRIVAL_KEYS[kind]
    if kind == "trace":
        allowed = allowed - {"num_prompts", "lengths"}
    _known(d, allowed, "workload", f" for kind {kind!r}")
    rng_arrivals, rng_lengths, rng_spread = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    concurrency = _count(d, "max_concurrency", "workload")
    if kind == "trace":
        return _trace(d.get("trace"), rng_spread, concurrency, base_dir)

    n = _count(d, "num_prompts", "workload", 1000)
    try:
        lens = _lengths(d.get("lengths", {"kind": "random"}), n, rng_lengths, base_dir)
    except InputError as e:  # the length generators name their argument; say which section it is in
        if str(e.field).startswith("lengths"):
            raise
        raise InputError(f"lengths:{e.field}", e.value, e.reason) from None
    n = len(lens)
    normalize = d.get("normalize", True)
    require(isinstance(normalize, bool), "workload:normalize", normalize, "must be true or false")
    if kind == "ramp":
        for key in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"):
            require(key in d, f"workload:{key}", None, "required for kind 'ramp'")
        t = arrivals.ramp(
            d["ramp_up_strategy"],
            _number(d, "ramp_up_start_rps", "workload"),
            _number(d, "ramp_up_end_rps", "workload"),
            n,
            rng_arrivals,
            _number(d, "burstiness", "workload", 1.0),
        )
    else:
        rate = _number(d, "request_rate", "workload", math.inf)
        if kind == "constant":
            t = arrivals.constant(rate, n)
        else:
            burstiness = _number(d, "burstiness", "workload", 1.0) if kind == "gamma" else 1.0
            t = arrivals.gamma(rate, burstiness, n, rng_arrivals, normalize)
    return Workload(t, lens.prompt_len, lens.output_len, lens.block_hashes, lens.block_tokens, concurrency, lens.notes)


def _path(p, where: str, base_dir) -> Path:
    require(isinstance(p, (str, Path)), where, p, "must be a file path")
    p = Path(p).expanduser()
    return p if p.is_absolute() or base_dir is None else Path(base_dir) / p


def _lengths(d: dict, n: int, rng: np.random.Generator, base_dir) -> lengths.Lengths:
    require(isinstance(d, dict), "lengths", d, "must be a mapping")
    kind = d.get("kind")
    require(
        isinstance(kind, str) and kind in LENGTH_KEYS, "lengths:kind", kind, f"must be one of {', '.join(LENGTH_KEYS)}"
    )
    _known(d, LENGTH_KEYS[kind] | {"kind"}, "lengths", f" for kind {kind!r}")
    args = {k: v for k, v in d.items() if k != "kind"}
    for k, v in args.items():
        if k not in ("path", "columns"):
            require(isinstance(v, (int, float)) and not isinstance(v, bool), f"lengths:{k}", v, "must be a number")
    if kind == "fixed":
        for key in ("input_len", "output_len"):
            require(key in d, f"lengths:{key}", None, "required for kind 'fixed'")
        return lengths.fixed(n, d["input_len"], d["output_len"])
    if kind == "random":
        return lengths.random(n, rng, **args)
    if kind == "shared_prefix":
        return lengths.shared_prefix(n, rng, **args)
    if kind == "sharegpt":
        path = _path(d["path"], "lengths:path", base_dir) if "path" in d else None
        return lengths.sharegpt(n, rng, path, d.get("columns"), d.get("output_len"))
    require("path" in d, "lengths:path", None, "required for kind 'table'")
    return lengths.table(_path(d["path"], "lengths:path", base_dir), n, rng, d.get("columns"), d.get("output_len"))


def _trace(d, rng: np.random.Generator, concurrency, base_dir) -> Workload:
    require(isinstance(d, dict), "workload:trace", d, "kind 'trace' needs a trace: {format, path, ...} mapping")
    _known(d, TRACE_KEYS, "trace")
    require("path" in d, "trace:path", None, "required")
    args = {k: v for k, v in d.items() if k != "path"}
    for k in ("start_s", "end_s", "time_scale", "target_rate", "spread_s"):
        args[k] = _number(d, k, "trace")
    args["max_requests"] = _count(d, "max_requests", "trace")
    if args.get("columns") is not None:
        require(isinstance(args["columns"], dict), "trace:columns", args["columns"], "must be a mapping")
    return traces.load_trace(
        _path(d["path"], "trace:path", base_dir),
        args.pop("format", "csv"),
        rng=rng,
        max_concurrency=concurrency,
        **args,
    )
