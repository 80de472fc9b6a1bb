"""Sweep chunk sizes / token budgets × request rates × policies against ITL (and TTFT) SLOs, and
recommend, per engine, the setting with the highest throughput that meets them.

Flags override a YAML experiment file (--config) key by key. Without --ttft-slo-ms an overloaded
point (queues growing without bound) can still win on throughput; give one to rule those out.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from costmodel.errors import InputError, require
from simcore.metrics import parse_goodput

from .common import positive_int
from ..executors import EXECUTORS, executor_for
from ..report import table
from ..sweep import KNOBS, OBJECTIVES, SLO_PERCENTILES, SweepSpec, analytic_budget, recommend, run_sweep
from workloads.traffic import DEFAULTS as TRAFFIC

DEFAULT_GRID = {"vllm": {"max_num_batched_tokens": [512, 768, 1024, 1536, 2048, 4096, 8192]},
                "sglang": {"chunked_prefill_size": [512, 1024, 2048, 4096], "enable_mixed_chunk": [False, True]}}
DEFAULT_RATES = [4, 8, 12, 16]
MIXED = {"off": [False], "on": [True], "both": [False, True]}


def add_parser(p):
    p.add_argument("--config", help="YAML experiment file: model, hardware, tp, seed, grid, flags, request_rates, "
                                    "workload, slo {itl_ms, ttft_ms, percentile, objective}, goodput")
    p.add_argument("--model")
    p.add_argument("--hardware")
    p.add_argument("--tp", type=positive_int)
    p.add_argument("--seed", type=int)
    p.add_argument("--policies", nargs="+", choices=list(KNOBS))
    g = p.add_argument_group("grid (engine knobs, as the engines spell them)")
    for flag in ("max-num-batched-tokens", "long-prefill-token-threshold", "chunked-prefill-size"):
        g.add_argument(f"--{flag}", type=int, nargs="+")
    g.add_argument("--enable-mixed-chunk", choices=list(MIXED), help="SGLang mixing: off, on or both (default both)")
    g.add_argument("--request-rates", type=float, nargs="+", metavar="RPS")
    w = p.add_argument_group("workload (default: chat requests with a long prompt every --long-every)")
    w.add_argument("--workload-file", help="YAML file holding a workloads section (its request_rate is swept)")
    for key in TRAFFIC:
        w.add_argument(f"--{key.replace('_', '-')}", type=positive_int)
    s = p.add_argument_group("SLOs")
    s.add_argument("--itl-slo-ms", type=float)
    s.add_argument("--ttft-slo-ms", type=float)
    s.add_argument("--percentile", type=int, choices=SLO_PERCENTILES)
    s.add_argument("--objective", choices=OBJECTIVES)
    s.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="vllm bench serve SLOs, for request_goodput")
    x = p.add_argument_group("execution")
    x.add_argument("--jobs", type=positive_int, default=1, help="local processes, or LocalCluster workers")
    x.add_argument("--executor", choices=EXECUTORS, default="local")
    x.add_argument("--scheduler-address", help="tcp://HOST:PORT of a Dask scheduler (default: a LocalCluster)")
    x.add_argument("--out", help="folder for results.jsonl, sweep.parquet, sweep.csv, recommendation.csv, PNGs")
    x.add_argument("--resume", action="store_true", help="skip the points already finished in --out")
    x.add_argument("--no-progress", action="store_true")
    x.add_argument("--no-plots", action="store_true")
    p.add_argument("--json", action="store_true", help="print a machine-readable result")


def _load_config(path) -> dict:
    if not path:
        return {}
    try:
        cfg = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise InputError("config", str(path), f"cannot read: {e}") from None
    require(isinstance(cfg, dict), "config", path, "must be a YAML mapping")
    return cfg


def spec_from_args(args) -> tuple[SweepSpec, dict]:
    cfg = _load_config(args.config)
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
        workload = _load_config(args.workload_file)
        workload = workload.get("workload", workload)
    if workload.get("kind") == "chat_with_long_prompts":
        workload = {**workload, **{k: getattr(args, k) for k in TRAFFIC if getattr(args, k) is not None}}
    slo = cfg.get("slo") or {}
    goodput = parse_goodput(args.goodput) if args.goodput else cfg.get("goodput")
    spec = SweepSpec(grid=grid, request_rates=tuple(args.request_rates or cfg.get("request_rates") or DEFAULT_RATES),
                     workload=workload, model=args.model or cfg.get("model", "llama-3.1-8b"),
                     hardware=args.hardware or cfg.get("hardware", "h100"), tp=args.tp or cfg.get("tp", 1),
                     seed=args.seed if args.seed is not None else cfg.get("seed", 0), flags=cfg.get("flags") or {},
                     goodput=goodput)
    slos = {"itl_slo_ms": args.itl_slo_ms or slo.get("itl_ms"), "ttft_slo_ms": args.ttft_slo_ms or slo.get("ttft_ms"),
            "percentile": args.percentile or slo.get("percentile", 99),
            "objective": args.objective or slo.get("objective", "output_throughput")}
    require(slos["itl_slo_ms"] is not None, "itl-slo-ms", None, "give --itl-slo-ms (or slo: itl_ms: in --config)")
    return spec, slos


def run(args) -> int:
    spec, slos = spec_from_args(args)
    require(not args.resume or args.out, "resume", True, "needs --out (the folder of the interrupted sweep)")
    out = Path(args.out) if args.out else None
    with executor_for(args.executor, args.jobs, args.scheduler_address) as ex:
        df = run_sweep(spec, out / "results.jsonl" if out else None, ex, args.resume, progress=not args.no_progress)
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
            save(itl_vs_throughput(df, slos["itl_slo_ms"], slos["percentile"], rec, slos["objective"],
                                   slos["ttft_slo_ms"]), files["itl_vs_throughput"])
            save(ttft_vs_rate(df, slos["ttft_slo_ms"], slos["percentile"]), files["ttft_vs_rate"])
    errors = df[df.error.notna()]
    if args.json:
        print(json.dumps({"slo": slos, "points": len(df), "errors": errors[["point_id", "error"]].to_dict("records"),
                          "recommendation": rec.to_dict("records"), "files": {k: str(v) for k, v in files.items()}},
                         indent=2, default=float))
        return 0
    pct = slos["percentile"]
    print(f"{len(df)} points · {spec.model} on {spec.hardware} (tp={spec.tp}) · SLO p{pct} ITL ≤ "
          f"{slos['itl_slo_ms']:g} ms" + (f", p{pct} TTFT ≤ {slos['ttft_slo_ms']:g} ms" if slos["ttft_slo_ms"] else ""))
    shown = rec.drop(columns=["point_id"], errors="ignore").dropna(axis=1, how="all")
    rows = [{k: (None if isinstance(v, float) and v != v else str(v) if isinstance(v, bool) else v) for k, v in r.items()}
            for r in shown.astype(object).to_dict("records")]
    print(table(rows, list(shown.columns)))
    print(f"analytic bound (seed 000, weight GEMMs only, 32 decoders at 2k context): {analytic} tokens")
    for e in errors.itertuples():
        print(f"point {e.point_id} ({e.engine}, rate {e.request_rate}) failed: {e.error}")
    for kind, path in files.items():
        print(f"wrote {kind}: {path}")
    return 0
