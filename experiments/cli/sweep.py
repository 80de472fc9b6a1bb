"""Sweep chunk sizes / token budgets × request rates × policies against ITL (and TTFT) SLOs, and
recommend, per engine, the setting with the highest throughput that meets them.

Flags override a YAML experiment file (--config) key by key. An overloaded point (its queue grows:
experiments/overload.py) never meets the SLOs; when every point is, no setting is recommended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from costmodel import load_hardware
from costmodel.errors import InputError, require
from costmodel.expected_error import expected_error
from simcore.router import ROUTERS
from workloads.traffic import DEFAULTS as TRAFFIC

from .. import datasets
from ..bench_result import writable_dir
from ..executors import EXECUTORS, executor_for
from ..experiment_file import in_file, parse_slos
from ..pricing import require_price
from ..report import table
from ..sweep import (
    KNOBS,
    MINIMIZED,
    OBJECTIVES,
    SLO_PERCENTILES,
    SweepSpec,
    all_overloaded,
    analytic_budget,
    overload_message,
    recommend,
    run_sweep,
)
from .common import (
    add_dataset_flags,
    check_hardware_file,
    engine_type,
    nonneg_int,
    positive_float,
    positive_int,
    read_text,
)

DEFAULT_GRID = {
    "vllm": {"max_num_batched_tokens": [512, 768, 1024, 1536, 2048, 4096, 8192]},
    "sglang": {"chunked_prefill_size": [512, 1024, 2048, 4096], "enable_mixed_chunk": [False, True]},
}
DEFAULT_RATES = [4, 8, 12, 16]
MIXED = {"off": [False], "on": [True], "both": [False, True]}


def add_parser(p):
    p.add_argument(
        "--config",
        help="YAML experiment file: model, hardware, tp, seed, grid, flags, request_rates, "
        "workload, slo {itl_ms, ttft_ms, percentile, objective}, goodput",
    )
    p.add_argument("--model", help="short name from costmodel/models/, or a Hugging Face config.json")
    p.add_argument("--hardware", nargs="+", help="GPU profile names or YAML paths (several: a sweep axis)")
    p.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        type=positive_int,
        nargs="+",
        help="tensor-parallel degrees (several: a sweep axis)",
    )
    p.add_argument("--replicas", type=positive_int, nargs="+", help="replicas behind the router (default 1)")
    p.add_argument("--router", nargs="+", choices=ROUTERS, help="routers to sweep (default round_robin)")
    p.add_argument(
        "--gpu-hourly-price",
        nargs="+",
        metavar="USD|HW=USD",
        help="USD per GPU-hour (one number, or HW=USD per --hardware) for the cost per million tokens "
        "columns and --objective usd_per_million_*; default for some GPUs: `chunksim list hardware`",
    )
    p.add_argument("--seed", type=nonneg_int, help="random seed (default 0)")
    p.add_argument("--policies", nargs="+", choices=list(KNOBS), help="engines to sweep (default vllm sglang)")
    g = p.add_argument_group("grid (engine knobs, as the engines spell them)")
    g.add_argument(
        "--max-num-batched-tokens",
        type=engine_type("max_num_batched_tokens"),
        nargs="+",
        help="vLLM token budgets to try",
    )
    g.add_argument(
        "--long-prefill-token-threshold",
        type=engine_type("long_prefill_token_threshold"),
        nargs="+",
        help="vLLM thresholds (0 = none)",
    )
    g.add_argument(
        "--chunked-prefill-size",
        type=engine_type("chunked_prefill_size"),
        nargs="+",
        help="SGLang chunk sizes (0 or -1 = off)",
    )
    g.add_argument("--enable-mixed-chunk", choices=list(MIXED), help="SGLang mixing: off, on or both (default both)")
    g.add_argument("--request-rates", type=positive_float, nargs="+", metavar="RPS", help="request rates to sweep")
    w = p.add_argument_group("workload (default: chat requests with a long prompt every --long-every)")
    w.add_argument("--workload-file", help="YAML file holding a workloads section (its request_rate is swept)")
    for key in TRAFFIC:
        w.add_argument(
            f"--{key.replace('_', '-')}",
            type=positive_int,
            help=f"chat traffic: {key} (default {TRAFFIC[key]}); with --dataset-name, num_prompts only",
        )
    add_dataset_flags(w)
    s = p.add_argument_group("SLOs")
    s.add_argument("--itl-slo-ms", type=positive_float, help="p-th percentile ITL must be at most this (required)")
    s.add_argument("--ttft-slo-ms", type=positive_float, help="and p-th percentile TTFT at most this")
    s.add_argument("--percentile", type=int, choices=SLO_PERCENTILES, help="the SLOs' percentile (default 99)")
    s.add_argument("--objective", choices=OBJECTIVES, help="what the recommendation maximizes (output_throughput)")
    s.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="vllm bench serve SLOs, for request_goodput")
    r = p.add_argument_group("results (vllm bench serve's flags, per point)")
    r.add_argument("--percentile-metrics", help="add mean/median/std/p{N} keys of ttft,tpot,itl,e2el to each point")
    r.add_argument("--metric-percentiles", help="comma-separated percentiles for --percentile-metrics (default 99)")
    r.add_argument("--save-result", action="store_true", help="write each point's vllm bench serve result JSON")
    r.add_argument("--save-detailed", action="store_true", help="with per-request lists")
    r.add_argument("--result-dir", help="folder of the result files (default: --out, else here)")
    x = p.add_argument_group("execution")
    x.add_argument("--jobs", type=positive_int, default=1, help="local processes, or LocalCluster workers")
    x.add_argument("--executor", choices=EXECUTORS, default="local", help="local (default) or dask")
    x.add_argument("--scheduler-address", help="tcp://HOST:PORT of a Dask scheduler (default: a LocalCluster)")
    x.add_argument("--out", help="folder for results.jsonl, sweep.parquet, sweep.csv, recommendation.csv, PNGs")
    x.add_argument("--resume", action="store_true", help="skip the points already finished in --out")
    x.add_argument("--no-progress", action="store_true", help="no progress bar")
    x.add_argument("--no-plots", action="store_true", help="no PNGs in --out")
    x.add_argument("--report", metavar="FILE.html", help="write one self-contained HTML report (works offline)")
    p.add_argument("--json", action="store_true", help="print a machine-readable result")


def _bench(args) -> dict | None:
    from ..bench_result import parse_metric_percentiles, parse_percentile_metrics

    for flag, given in (("--save-detailed", args.save_detailed), ("--result-dir", args.result_dir)):
        require(not given or args.save_result, flag, given, "needs --save-result")
    if not (args.percentile_metrics or args.metric_percentiles or args.save_result):
        return None
    out = {
        "metrics": parse_percentile_metrics(args.percentile_metrics or "ttft,tpot,itl"),
        "percentiles": parse_metric_percentiles(args.metric_percentiles or "99"),
    }
    if args.save_result:
        folder = Path(args.result_dir or args.out or ".")
        writable_dir(folder, "--result-dir")
        out.update(result_dir=str(folder.absolute()), detailed=bool(args.save_detailed))
    return out


DATASET_FLAGS = ("dataset_name", "dataset_path", *datasets.RANDOM_KEYS, *datasets.PREFIX_KEYS, "sharegpt_output_len")


CONFIG_KEYS = {
    "model",
    "hardware",
    "tp",
    "replicas",
    "router",
    "gpu_hourly_price",
    "seed",
    "grid",
    "flags",
    "request_rates",
    "workload",
    "slo",
    "goodput",
}
SLO_KEYS = {"itl_ms", "ttft_ms", "percentile", "objective"}


def _load_config(path, field: str = "--config") -> dict:
    if not path:
        return {}
    text = read_text(path, field)
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(field, where, f"not valid YAML ({getattr(e, 'problem', None) or 'parse error'})") from None
    cfg = {} if cfg is None else cfg
    require(isinstance(cfg, dict), field, str(path), "must be a YAML mapping")
    return cfg


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_config(cfg: dict, path) -> dict:
    """A sweep file checked as experiment files are: known keys, and each value's type."""
    unknown = sorted(set(map(str, cfg)) - CONFIG_KEYS)
    require(not unknown, f"{path}", unknown, f"unknown keys; allowed: {', '.join(sorted(CONFIG_KEYS))}")
    require(
        "model" not in cfg or (isinstance(cfg["model"], str) and cfg["model"]),
        f"{path}:model",
        cfg.get("model"),
        "must be a non-empty string",
    )
    for key in ("hardware", "router"):
        vals = _listed(cfg, key)
        require(
            all(isinstance(v, str) and v for v in vals),
            f"{path}:{key}",
            cfg.get(key),
            "must be a non-empty string or a list of them",
        )
    bad = [r for r in _listed(cfg, "router") if r not in ROUTERS]
    require(not bad, f"{path}:router", cfg.get("router"), f"must be among {', '.join(ROUTERS)}")
    for key, low in (("tp", 1), ("replicas", 1), ("seed", 0)):
        for v in _listed(cfg, key) if key != "seed" else [cfg.get(key, low)]:
            require(
                isinstance(v, int) and not isinstance(v, bool) and v >= low,
                f"{path}:{key}",
                cfg.get(key),
                f"must be an integer >= {low}" + (" or a list of them" if key != "seed" else ""),
            )
    price = cfg.get("gpu_hourly_price")
    prices = price.values() if isinstance(price, dict) else [] if price is None else [price]
    require(
        all(_number(v) and 0 < v < float("inf") for v in prices),
        f"{path}:gpu_hourly_price",
        price,
        "must be USD per GPU-hour (a positive number) or a mapping of hardware to one",
    )
    for key in ("grid", "flags", "workload", "slo"):
        require(cfg.get(key) is None or isinstance(cfg[key], dict), f"{path}:{key}", cfg.get(key), "must be a mapping")
    for policy, knobs in (cfg.get("grid") or {}).items():
        require(isinstance(knobs, dict), f"{path}:grid:{policy}", knobs, "must map knob names to lists of values")
        for k, vals in knobs.items():
            require(
                isinstance(vals, list) and vals and all(_number(x) or isinstance(x, bool) for x in vals),
                f"{path}:grid:{policy}:{k}",
                vals,
                "must be a non-empty list of numbers or booleans",
            )
    for policy, flags in (cfg.get("flags") or {}).items():
        require(isinstance(flags, dict), f"{path}:flags:{policy}", flags, "must be a mapping of engine flags")
    rates = cfg.get("request_rates")
    require(
        rates is None or (isinstance(rates, list) and rates and all(_number(r) and r > 0 for r in rates)),
        f"{path}:request_rates",
        rates,
        "must be a non-empty list of positive numbers",
    )
    slo = cfg.get("slo") or {}
    unknown = sorted(set(map(str, slo)) - SLO_KEYS)
    require(not unknown, f"{path}:slo", unknown, f"unknown keys; allowed: {', '.join(sorted(SLO_KEYS))}")
    for key in ("itl_ms", "ttft_ms"):
        require(
            slo.get(key) is None or (_number(slo[key]) and slo[key] > 0),
            f"{path}:slo:{key}",
            slo.get(key),
            "must be a positive number of milliseconds",
        )
    return cfg


def _listed(cfg: dict, key: str) -> list:
    """A config value that may be one value or a list of them (a sweep axis)."""
    v = cfg.get(key)
    if v is None:
        return []
    if isinstance(v, list):
        return v or [None]  # an empty list is refused by the caller's check
    return [v]


def _prices(args, cfg: dict, hardware: list) -> dict:
    """hardware name -> USD per GPU-hour, from --gpu-hourly-price (USD, or HW=USD ...) or the config."""
    given = args.gpu_hourly_price
    if not given:
        v = cfg.get("gpu_hourly_price")
        return (
            {str(k): float(p) for k, p in v.items()}
            if isinstance(v, dict)
            else {str(h): float(v) for h in hardware}
            if v is not None
            else {}
        )
    out = {}
    for item in given:
        hw, eq, text = item.rpartition("=") if "=" in item else ("", "", item)
        try:
            price = float(text)
        except ValueError:
            raise InputError("--gpu-hourly-price", item, "must be USD per GPU-hour, or HW=USD") from None
        require(0 < price < float("inf"), "--gpu-hourly-price", item, "must be a positive number of USD per GPU-hour")
        if not eq:
            require(
                len(given) == 1 and len(hardware) == 1,
                "--gpu-hourly-price",
                item,
                f"give HW=USD for each of the {len(hardware)} --hardware values",
            )
            hw = hardware[0]
        require(hw in hardware, "--gpu-hourly-price", item, f"{hw!r} is not among --hardware {' '.join(hardware)}")
        out[hw] = price
    return out


def check_scheduler(address: str | None) -> None:
    """An unreachable Dask scheduler fails in seconds with one line, not after Dask's 30 s timeout."""
    if not address:
        return
    import socket
    from urllib.parse import urlparse

    u = urlparse(address if "://" in address else f"tcp://{address}")
    require(u.hostname is not None and u.port is not None, "--scheduler-address", address, "must be tcp://HOST:PORT")
    try:
        socket.create_connection((u.hostname, u.port), timeout=3).close()
    except OSError as e:
        raise InputError("--scheduler-address", address, f"cannot connect ({e.strerror or e})") from None


def spec_from_args(args) -> tuple[SweepSpec, dict]:
    cfg = validate_config(_load_config(args.config), args.config)
    grid = {k: dict(v) for k, v in (cfg.get("grid") or DEFAULT_GRID).items()}
    if args.policies:
        grid = {p: grid.get(p, DEFAULT_GRID.get(p, {})) for p in args.policies}
    for flag in ("max_num_batched_tokens", "long_prefill_token_threshold", "chunked_prefill_size"):
        if getattr(args, flag):
            policy = "vllm" if flag in KNOBS["vllm"] else "sglang"
            require(policy in grid, flag.replace("_", "-"), getattr(args, flag), f"needs {policy} among --policies")
            grid[policy][flag] = getattr(args, flag)
    if args.enable_mixed_chunk and "sglang" in grid:
        grid["sglang"]["enable_mixed_chunk"] = MIXED[args.enable_mixed_chunk]
    workload = cfg.get("workload") or {"kind": "chat_with_long_prompts"}
    if args.workload_file:
        workload = _load_config(args.workload_file, "--workload-file")
        workload = workload.get("workload", workload)
        require(isinstance(workload, dict), "--workload-file", args.workload_file, "workload: must be a mapping")
    given = {k: getattr(args, k) for k in DATASET_FLAGS if getattr(args, k) is not None}
    if given:
        require(not args.workload_file, "--dataset-name", args.dataset_name, "not with --workload-file")
        n = args.num_prompts or 1000
        workload = datasets.apply({"kind": "poisson", "num_prompts": n}, given)
    elif workload.get("kind") == "chat_with_long_prompts":
        workload = {**workload, **{k: getattr(args, k) for k in TRAFFIC if getattr(args, k) is not None}}
    slo = cfg.get("slo") or {}
    goodput = parse_slos(args.goodput) if args.goodput else cfg.get("goodput")
    axes = {
        "hardware": args.hardware or _listed(cfg, "hardware") or ["h100"],
        "tp": args.tp or _listed(cfg, "tp") or [1],
        "replicas": args.replicas or _listed(cfg, "replicas") or [1],
        "router": args.router or _listed(cfg, "router") or ["round_robin"],
    }
    for k, vals in axes.items():
        require(len(set(vals)) == len(vals), f"--{k}", " ".join(map(str, vals)), "names a value twice")
    spec = SweepSpec(
        bench=_bench(args),
        grid=grid,
        request_rates=tuple(args.request_rates or cfg.get("request_rates") or DEFAULT_RATES),
        workload=workload,
        model=args.model or cfg.get("model", "llama-3.1-8b"),
        hardware=axes["hardware"][0],
        tp=axes["tp"][0],
        seed=args.seed if args.seed is not None else cfg.get("seed", 0),
        flags=cfg.get("flags") or {},
        goodput=goodput,
        axes=axes,
        prices=_prices(args, cfg, axes["hardware"]),
    )
    slos = {
        "itl_slo_ms": args.itl_slo_ms or slo.get("itl_ms"),
        "ttft_slo_ms": args.ttft_slo_ms or slo.get("ttft_ms"),
        "percentile": args.percentile or slo.get("percentile", 99),
        "objective": args.objective or slo.get("objective", "output_throughput"),
    }
    require(slos["itl_slo_ms"] is not None, "--itl-slo-ms", None, "give --itl-slo-ms (or slo: itl_ms: in --config)")
    require(
        slos["percentile"] in SLO_PERCENTILES, "slo:percentile", slos["percentile"], f"must be one of {SLO_PERCENTILES}"
    )
    require(
        slos["objective"] in OBJECTIVES, "slo:objective", slos["objective"], f"must be one of {', '.join(OBJECTIVES)}"
    )
    require(
        slos["objective"] != "request_goodput" or spec.goodput,
        "--objective",
        slos["objective"],
        "needs goodput SLOs (--goodput ttft:MS ...)",
    )
    if slos["objective"] in MINIMIZED:
        for hw in axes["hardware"]:
            require_price(hw, spec.prices.get(hw), f"--objective {slos['objective']} on {hw}")
    return spec, slos


def preflight(args, spec: SweepSpec) -> None:
    """What would otherwise fail only after the whole grid ran: model, hardware, output folder, executor."""
    from costmodel import load_hardware, load_model

    load_model(spec.model)
    for name in spec.axis("hardware"):
        check_hardware_file(name)
        hw = load_hardware(name)
        for tp in spec.axis("tp"):
            require(tp <= hw.gpus_per_node, "--tp", tp, f"exceeds the {hw.gpus_per_node} GPUs per node of {hw.name}")
    if args.out:
        writable_dir(Path(args.out), "--out")
    if getattr(args, "report", None):
        from ..bench_result import writable_file

        writable_file(Path(args.report), "--report")
    check_scheduler(args.scheduler_address)
    from ..sweep import build_workload

    rate = spec.request_rates[0] if spec.request_rates else None
    try:
        build_workload(spec.workload, rate, spec.seed)
    except InputError as e:  # a workload section from a YAML file: the error names the file and key
        source = args.workload_file or (
            args.config if _load_config(args.config).get("workload") == spec.workload else None
        )
        if source:
            raise in_file(source, e, "workload") from None
        raise


def run(args) -> int:
    spec, slos = spec_from_args(args)
    require(not args.resume or args.out, "--resume", True, "needs --out (the folder of the interrupted sweep)")
    preflight(args, spec)
    out = Path(args.out) if args.out else None
    with executor_for(args.executor, args.jobs, args.scheduler_address) as ex:
        df = run_sweep(spec, out / "results.jsonl" if out else None, ex, args.resume, progress=not args.no_progress)
    errors = df[df.error.notna()]
    if len(errors) == len(df):
        for e in errors.itertuples():
            print(f"point {e.point_id} ({e.engine}, rate {e.request_rate}) failed: {e.error}", file=sys.stderr)
        return _failed(errors, len(df))
    analytic = analytic_budget(spec.model, spec.hardware, spec.tp, slos["itl_slo_ms"])
    rec = recommend(df, analytic_tokens=analytic, **slos)
    files = {}
    if out:
        files = {"table": out / "sweep.parquet", "csv": out / "sweep.csv", "recommendation": out / "recommendation.csv"}
        df.to_parquet(files["table"])
        df.to_csv(files["csv"], index=False)
        rec.to_csv(files["recommendation"], index=False)
        if not args.no_plots and df.error.isna().any():
            from ..plots import itl_vs_throughput, save, ttft_vs_rate

            files["itl_vs_throughput"], files["ttft_vs_rate"] = out / "itl_vs_throughput.png", out / "ttft_vs_rate.png"
            save(
                itl_vs_throughput(
                    df, slos["itl_slo_ms"], slos["percentile"], rec, slos["objective"], slos["ttft_slo_ms"]
                ),
                files["itl_vs_throughput"],
            )
            save(ttft_vs_rate(df, slos["ttft_slo_ms"], slos["percentile"]), files["ttft_vs_rate"])
    if getattr(args, "report", None) and df.error.isna().any():
        from ..html_report import sweep_report

        files["report"] = sweep_report(
            df,
            rec,
            args.report,
            slos,
            {"model": spec.model, "hardware": spec.hardware, "tp": spec.tp, "seed": spec.seed},
        )
    errors = df[df.error.notna()]
    overloaded = all_overloaded(df)
    if args.json:
        print(
            json.dumps(
                {
                    "slo": slos,
                    "points": len(df),
                    "errors": errors[["point_id", "error"]].to_dict("records"),
                    "all_overloaded": overloaded,
                    **({"message": overload_message(df)} if overloaded else {}),
                    "recommendation": rec.to_dict("records"),
                    "files": {k: str(v) for k, v in files.items()},
                },
                indent=2,
                default=float,
            )
        )
        return _failed(errors, len(df))
    pct = slos["percentile"]
    print(
        f"{len(df)} points · {spec.model} on {'/'.join(map(str, spec.axis('hardware')))} "
        f"(tp={'/'.join(map(str, spec.axis('tp')))}, replicas={'/'.join(map(str, spec.axis('replicas')))}, "
        f"router {'/'.join(spec.axis('router'))}) · SLO p{pct} ITL ≤ "
        f"{slos['itl_slo_ms']:g} ms" + (f", p{pct} TTFT ≤ {slos['ttft_slo_ms']:g} ms" if slos["ttft_slo_ms"] else "")
    )
    shown = rec.drop(columns=["point_id"], errors="ignore").dropna(axis=1, how="all")
    rows = [
        {k: (None if isinstance(v, float) and v != v else str(v) if isinstance(v, bool) else v) for k, v in r.items()}
        for r in shown.astype(object).to_dict("records")
    ]
    print(table(rows, list(shown.columns)))
    if overloaded:
        print(f"NO RECOMMENDATION: {overload_message(df)}")
    print(
        f"analytic bound (seed 000's single-GPU formula: weight GEMMs only, no attention or all-reduce, "
        f"32 decoders at 2k context, {spec.hardware} tp={spec.tp}; chunksim stall prices the step): {analytic} tokens"
    )
    for name in dict.fromkeys(map(str, spec.axis("hardware"))):
        print(expected_error(load_hardware(name)).line(name))
    for e in errors.itertuples():
        print(f"point {e.point_id} ({e.engine}, rate {e.request_rate}) failed: {e.error}")
    for kind, path in files.items():
        print(f"wrote {kind}: {path}")
    return _failed(errors, len(df))


def _failed(errors, points: int) -> int:
    """Exit 1 when points failed (each failure is in the table and printed above)."""
    if len(errors):
        print(f"chunksim sweep: {len(errors)} of {points} points failed", file=sys.stderr)
        return 1
    return 0
