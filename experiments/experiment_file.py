"""A YAML experiment file: model, hardware, engine flags and workload in one place.

The effective configuration is built in one order, defaults <- file <- explicit CLI flags, and
is a plain dict in the file's own schema, so writing it next to the results (``config.yaml``)
and passing that back with ``-f`` reruns the same experiment. Relative paths in a file resolve
against the file's folder and are stored absolute. Every key must be known; an unknown one is an
``InputError`` that names it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import yaml

from costmodel.errors import InputError, require
from simcore.metrics import parse_goodput
from workloads.config import workload_from_config

from . import datasets, engine_flags
from .engines import POLICIES
from .scenarios import stall_scene

KEYS = (
    "model",
    "hardware",
    "tp",
    "policy",
    "engine",
    "workload",
    "seed",
    "goodput",
    "fast_forward",
    "replicas",
    "router",
)
ENGINE_FLAGS = engine_flags.ALL
SCENARIOS = {
    "stall": {"prompt_len", "num_decodes", "decode_context", "long_arrival_s", "decode_output_len", "stagger_s"}
}
DEFAULT_WORKLOAD = {
    "kind": "poisson",
    "request_rate": "inf",
    "num_prompts": 1000,
    "lengths": {"kind": "fixed", "input_len": 1024, "output_len": 128},
}
DEFAULTS = {
    "model": "llama-3.1-8b",
    "hardware": "h100",
    "tp": 1,
    "policy": "vllm",
    "engine": {},
    "workload": DEFAULT_WORKLOAD,
    "seed": 0,
    "fast_forward": True,
    "replicas": 1,
    "router": "round_robin",
}
TRACE_SUFFIX_FORMAT = {".csv": "azure", ".jsonl": "mooncake"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _known(d, allowed, where: str) -> None:
    require(isinstance(d, dict), where, d, "must be a mapping")
    unknown = sorted(set(d) - set(allowed))
    require(not unknown, where, unknown, f"unknown keys; allowed: {', '.join(sorted(allowed))}")


def _engine(d) -> dict:
    require(isinstance(d, dict), "engine", d, "must be a mapping of engine flags")
    flags = {str(k).replace("-", "_"): v for k, v in d.items()}
    require(len(flags) == len(d), "engine", sorted(d), "a flag is given twice (once with '-', once with '_')")
    _known(flags, ENGINE_FLAGS, "engine")
    for k, v in flags.items():
        engine_flags.typed(k, v, f"engine:{k}")
    return flags


def _goodput(v) -> dict | None:
    if v is None:
        return None
    if isinstance(v, dict):
        v = [f"{k}:{ms}" for k, ms in v.items()]
    require(isinstance(v, list), "goodput", v, "must be a mapping {ttft: MS, tpot: MS, e2el: MS} or a list of KEY:MS")
    return parse_slos([str(x) for x in v])


def parse_slos(items: list[str]) -> dict:
    """``--goodput ttft:MS ...`` as vllm bench serve reads it, NaN refused (it would meet no SLO, silently)."""
    out = parse_goodput(items)
    for key, ms in out.items():
        require(ms == ms, "goodput", f"{key}:{ms}", "must be a number of milliseconds, not NaN")
    return out


def _finite(d):
    """inf as the string 'inf', which the workload reader takes and JSON can write."""
    if isinstance(d, dict):
        return {k: _finite(v) for k, v in d.items()}
    return "inf" if isinstance(d, float) and math.isinf(d) and d > 0 else d


def validate(cfg: dict) -> dict:
    """Check keys and types of a (partial) configuration; returns it with engine flags normalized."""
    _known(cfg, KEYS, "experiment")
    out = dict(cfg)
    for key in ("model", "hardware", "policy", "router"):
        if key in out:
            require(isinstance(out[key], str) and out[key], key, out[key], "must be a non-empty string")
    if "policy" in out:
        require(out["policy"] in POLICIES, "policy", out["policy"], f"must be one of {', '.join(POLICIES)}")
    if "tp" in out:
        require(_is_int(out["tp"]) and out["tp"] >= 1, "tp", out["tp"], "must be an integer >= 1")
    if "replicas" in out:
        require(
            _is_int(out["replicas"]) and out["replicas"] >= 1, "replicas", out["replicas"], "must be an integer >= 1"
        )
    if "seed" in out:
        require(_is_int(out["seed"]) and out["seed"] >= 0, "seed", out["seed"], "must be an integer >= 0")
    if "fast_forward" in out:
        require(isinstance(out["fast_forward"], bool), "fast_forward", out["fast_forward"], "must be true or false")
    if "engine" in out:
        out["engine"] = _engine(out["engine"])
    if "workload" in out:
        require(isinstance(out["workload"], dict), "workload", out["workload"], "must be a mapping")
        out["workload"] = _finite(out["workload"])
    if "goodput" in out:
        out["goodput"] = _goodput(out["goodput"])
        if out["goodput"] is None:
            del out["goodput"]
    return out


def _resolve(p, base: Path) -> str:
    p = Path(p).expanduser()
    return os.path.normpath(p if p.is_absolute() else (base / p).absolute())


def _resolve_paths(cfg: dict, base: Path) -> dict:
    for key in ("model", "hardware"):
        if isinstance(cfg.get(key), str) and not Path(cfg[key]).is_absolute() and (base / cfg[key]).exists():
            cfg[key] = _resolve(cfg[key], base)
    w = cfg.get("workload")
    for section in ("trace", "lengths"):
        sub = w.get(section) if isinstance(w, dict) else None
        if isinstance(sub, dict) and isinstance(sub.get("path"), (str, Path)):
            w[section] = {**sub, "path": _resolve(sub["path"], base)}
    return cfg


def in_file(path, e: InputError, section: str = "") -> InputError:
    """The same error, its field prefixed by the file it came from (``exp.yaml:engine:max_num_seqs``)."""
    field = str(e.field)
    if field.startswith(str(path)):
        return e
    return InputError(
        f"{path}:{section + ':' if section and not field.startswith(section) else ''}{field}", e.value, e.reason
    )


def load_experiment(path) -> dict:
    """The file's (partial) configuration, validated, with relative paths made absolute; an error
    in it names the file and the key."""
    try:
        return _load_experiment(path)
    except InputError as e:
        raise in_file(path, e) from None


def _load_experiment(path) -> dict:
    path = Path(path)
    require(path.is_file(), "file", str(path), "no such experiment file")
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise InputError("file", str(path), f"not valid YAML ({' '.join(str(e).split())})") from None
    d = {} if d is None else d
    require(isinstance(d, dict), "file", str(path), "must be a YAML mapping of experiment keys")
    if isinstance(d.get("workload"), dict):
        d["workload"] = {**d["workload"]}
    return validate(_resolve_paths(d, path.parent))


def _workload_overrides(w: dict, o: dict) -> dict:
    """CLI workload flags (argparse names) applied on top of a workload section."""
    for k in ("num_prompts", "input_len", "output_len", "max_concurrency"):
        require(k not in o or (_is_int(o[k]) and o[k] >= 1), k.replace("_", "-"), o.get(k), "must be an integer >= 1")
    for k in ("request_rate", "burstiness"):
        require(k not in o or o[k] > 0, k.replace("_", "-"), o.get(k), "must be > 0 (inf allowed)")
    require(
        not ("scenario" in o and "workload_file" in o),
        "--scenario",
        o.get("scenario"),
        "not with --workload-file (the scenario is its own workload)",
    )
    w = dict(w)
    if "scenario" in o and w.get("scenario") != o["scenario"]:
        w = {"scenario": o["scenario"]}
    if "workload_file" in o:
        trace = dict(w["trace"]) if w.get("kind") == "trace" and isinstance(w.get("trace"), dict) else {}
        path = Path(o["workload_file"])
        fmt = o.get("trace_format") or TRACE_SUFFIX_FORMAT.get(path.suffix.lower())
        require(fmt is not None, "trace-format", None, f"cannot tell the format of {path.name}; give --trace-format")
        trace.update(path=os.path.normpath(path.expanduser().absolute()), format=fmt)
        trace.update({k: o[k] for k in ("columns", "time_unit") if k in o})
        w = {"kind": "trace", "trace": trace, **{k: w[k] for k in ("max_concurrency",) if k in w}}
        if "num_prompts" in o:
            w["trace"]["max_requests"] = o["num_prompts"]
    elif "columns" in o or "time_unit" in o:
        key = "columns" if "columns" in o else "time_unit"
        require(False, f"--{'trace-columns' if key == 'columns' else 'time-unit'}", o[key], "needs --workload-file")
    elif "trace_format" in o:
        require(
            w.get("kind") == "trace" and isinstance(w.get("trace"), dict),
            "trace-format",
            o["trace_format"],
            "needs --workload-file or a trace workload in the experiment file",
        )
        w["trace"] = {**w["trace"], "format": o["trace_format"]}
    w = _trace_rate(w, o)
    for k in ("request_rate", "num_prompts", "max_concurrency", "burstiness"):
        if k in o and not (k == "num_prompts" and w.get("kind") == "trace"):
            w[k] = o[k]
    if "burstiness" in o and w.get("kind", "poisson") == "poisson":
        w["kind"] = "gamma"
    if "scenario" in w and ("input_len" in o or "output_len" in o):
        require(
            "output_len" not in o,
            "output-len",
            o.get("output_len"),
            "the stall scenario's outputs are decode_output_len (decoders) and 16 (the long prompt): set "
            "decode_output_len in the experiment file",
        )
        w["prompt_len"] = o["input_len"]  # the long prompt's length
    elif "input_len" in o or "output_len" in o:
        lengths = dict(w.get("lengths") or {"kind": "random"})
        lengths.update({k: o[k] for k in ("input_len", "output_len") if k in o})
        w["lengths"] = lengths
    return _finite(datasets.apply(w, o))


def _trace_rate(w: dict, o: dict) -> dict:
    """--time-scale F (every arrival time × F) or --target-rate R (arrivals rescaled to R requests/s
    on average) on a trace workload: workloads.traces.load_trace's time_scale / target_rate."""
    given = [k for k in ("time_scale", "target_rate") if k in o]
    if not given:
        return w
    require(len(given) == 1, "--time-scale", o.get("time_scale"), "give --time-scale or --target-rate, not both")
    k = given[0]
    require(
        w.get("kind") == "trace" and isinstance(w.get("trace"), dict),
        f"--{k.replace('_', '-')}",
        o[k],
        "needs --workload-file or a trace workload in the experiment file",
    )
    require(
        "request_rate" not in o,
        f"--{k.replace('_', '-')}",
        o[k],
        "not with --request-rate (a trace keeps its own arrivals; rescale them with this flag)",
    )
    trace = {kk: v for kk, v in w["trace"].items() if kk not in ("time_scale", "target_rate")}
    return {**w, "trace": {**trace, k: o[k]}}


def effective(file_cfg: dict | None, overrides: dict) -> dict:
    """defaults <- file <- overrides. ``overrides`` holds only flags given on the command line,
    by their argparse names (``request_rate``, ``max_num_seqs``, ``workload_file``, ...)."""
    o = {k: v for k, v in overrides.items() if v is not None}
    cfg = {**DEFAULTS, **(file_cfg or {})}
    cfg.update(
        {k: o[k] for k in ("model", "hardware", "tp", "policy", "seed", "fast_forward", "replicas", "router") if k in o}
    )
    cfg["engine"] = {**cfg["engine"], **{k: v for k, v in o.items() if k in ENGINE_FLAGS}}
    cfg["workload"] = _workload_overrides(cfg["workload"], o)
    if "goodput" in o:
        cfg["goodput"] = o["goodput"]
    return validate({k: cfg[k] for k in KEYS if k in cfg})


def build_workload(cfg: dict):
    w = cfg["workload"]
    if "scenario" not in w:
        return workload_from_config(w, cfg["seed"])
    require(
        isinstance(w["scenario"], str) and w["scenario"] in SCENARIOS,
        "workload:scenario",
        w["scenario"],
        f"must be one of {', '.join(SCENARIOS)}",
    )
    args = {k: v for k, v in w.items() if k != "scenario"}
    _known(args, SCENARIOS[w["scenario"]], "workload")
    for k, v in args.items():
        require(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
            f"workload:{k}",
            v,
            "must be a number >= 0",
        )
    for k, low in (("prompt_len", 1), ("num_decodes", 1), ("decode_output_len", 1), ("decode_context", 129)):
        v = args.get(k, low)
        require(_is_int(v) and v >= low, f"workload:{k}", v, f"must be an integer >= {low}")
    return stall_scene(**args)


def dump(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)
