"""Chunk or disaggregate: colocated chunked prefill at each token budget against the xPyD splits
that fit a GPU budget, ranked by goodput per GPU (DistServe's metric), with a recommendation.

Each candidate's goodput is the highest request rate at which --attainment percent of requests
meet both --ttft-slo-ms and --itl-slo-ms (a request's TPOT, or with --itl-per-request max its
worst gap), found by searching the rate; the recommendation names the SLO that binds.
"""

from __future__ import annotations

import json
import sys

from costmodel.errors import require
from simcore.kv_transfer import LATENCY_S, RDMA_BYTES_PER_S
from workloads.traffic import DEFAULTS as TRAFFIC

from .. import datasets
from ..disagg_study import DEFAULT_WORKLOAD
from ..executors import executor_for
from ..report import table
from .common import add_dataset_flags, model_and_hardware, nonneg_int, positive_float, positive_int

DATASET_FLAGS = ("dataset_name", "dataset_path", *datasets.RANDOM_KEYS, *datasets.PREFIX_KEYS, "sharegpt_output_len")
NUM_PROMPTS = 300
COLUMNS = ["candidate", "gpus", "goodput", "goodput_per_gpu", "binds", "p99_itl_ms", "p90_ttft_ms", "mean_tpot_ms"]


def add_parser(p):
    p.add_argument("--model", default="llama-3.1-8b", help="short name from costmodel/models/, or a config.json")
    p.add_argument("--hardware", default="h100", help="GPU profile name or a YAML path")
    p.add_argument("--gpus", type=positive_int, required=True, help="the GPU budget a candidate must fit")
    p.add_argument("--ttft-slo-ms", type=positive_float, required=True, help="a request's TTFT must be at most this")
    p.add_argument("--itl-slo-ms", type=positive_float, required=True, help="a request's TPOT (or worst gap) too")
    p.add_argument(
        "--attainment", type=positive_float, default=90.0, metavar="PCT", help="percent of requests within both (90)"
    )
    p.add_argument(
        "--itl-per-request",
        choices=["mean", "max"],
        default="mean",
        help="mean: a request's TPOT (DistServe's); max: its worst inter-token gap",
    )
    p.add_argument(
        "--budgets",
        type=positive_int,
        nargs="+",
        help="colocated token budgets: vLLM max_num_batched_tokens, SGLang chunked_prefill_size (512 ... 8192)",
    )
    p.add_argument("--engine", choices=["vllm", "sglang"], default="vllm", help="every candidate's engine (vllm)")
    p.add_argument("--tp", type=positive_int, nargs="+", default=[1], help="TP degrees of every pool (1)")
    p.add_argument(
        "--colocated-policy",
        choices=["vllm", "sglang", "nochunk"],
        help="the engine (default): chunked prefill at each --budgets value; nochunk: whole prompts (no budget)",
    )
    p.add_argument("--only", choices=["colocated", "disaggregated"], help="one kind of candidate only")
    p.add_argument("--max-split", type=nonneg_int, default=0, help="most replicas in one pool (0: the budget's)")
    w = p.add_argument_group("workload (default: 512-token chats with 128-token answers, a 32k prompt every 100th)")
    w.add_argument("--num-prompts", type=positive_int, help=f"requests per simulation (default {NUM_PROMPTS})")
    for key in TRAFFIC:
        if key != "num_prompts":
            w.add_argument(f"--{key.replace('_', '-')}", type=positive_int, help=f"chat traffic: {key}")
    add_dataset_flags(w)
    w.add_argument("--seed", type=nonneg_int, default=0, help="the workload's seed (one for every rate)")
    k = p.add_argument_group("KV link (as simulate's PD flags)")
    k.add_argument(
        "--kv-link-bandwidth", type=positive_float, metavar="GB/s", help=f"RDMA per GPU ({RDMA_BYTES_PER_S / 1e9:g})"
    )
    k.add_argument("--kv-link-latency-us", type=float, metavar="US", help=f"per transfer ({LATENCY_S * 1e6:g})")
    k.add_argument("--kv-link", choices=["auto", "rdma", "nvlink"], help="auto: NVLink within a node")
    k.add_argument("--gpus-per-node", type=positive_int, help="GPUs per node for placement (8)")
    s = p.add_argument_group("search and execution")
    s.add_argument("--start-rate", type=positive_float, help="req/s per GPU the search starts at (1)")
    s.add_argument(
        "--min-duration", type=float, default=10.0, metavar="S", help="each probe spans at least S s of arrivals (10)"
    )
    s.add_argument("--rel-tol", type=positive_float, default=0.05, help="the goodput's relative precision (0.05)")
    s.add_argument("--jobs", type=positive_int, default=1, help="local processes (candidates in parallel)")
    s.add_argument("--plot", metavar="FILE.png", help="write the Pareto plot")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a machine-readable result")


def spec_from_args(args):
    from ..disagg_study import StudySpec

    model_and_hardware(args)  # an unknown model or GPU fails here, before any simulation
    given = {k: getattr(args, k) for k in DATASET_FLAGS if getattr(args, k) is not None}
    n = args.num_prompts or NUM_PROMPTS
    if given:
        workload = datasets.apply({"kind": "poisson", "num_prompts": n}, given)
    else:
        traffic = {k: getattr(args, k) for k in TRAFFIC if k != "num_prompts" and getattr(args, k) is not None}
        workload = {**DEFAULT_WORKLOAD, "num_prompts": n, **traffic}
    us = args.kv_link_latency_us
    require(us is None or us >= 0, "--kv-link-latency-us", us, "must be >= 0")
    link = {
        k: v
        for k, v in {
            "rdma_bandwidth": args.kv_link_bandwidth * 1e9 if args.kv_link_bandwidth else None,
            "latency_s": us * 1e-6 if us is not None else None,
            "medium": args.kv_link,
            "gpus_per_node": args.gpus_per_node,
        }.items()
        if v is not None
    }
    require(
        args.budgets is None or args.colocated_policy != "nochunk",
        "--budgets",
        args.budgets,
        "budgets are the engine's chunked prefill; --colocated-policy nochunk runs whole prompts",
    )
    require(args.attainment <= 100, "--attainment", args.attainment, "must be a percentage in (0, 100]")
    return StudySpec(
        gpus=args.gpus,
        ttft_slo_ms=args.ttft_slo_ms,
        itl_slo_ms=args.itl_slo_ms,
        workload=workload,
        model=args.model,
        hardware=args.hardware,
        budgets=tuple(args.budgets or (512, 1024, 2048, 4096, 8192)),
        tps=tuple(args.tp),
        attainment=args.attainment / 100,
        itl_per_request=args.itl_per_request,
        seed=args.seed,
        engine=args.engine,
        colocated_policy=args.colocated_policy or "",
        link=link,
        max_split=args.max_split,
        start_rate=args.start_rate or 0.0,
        rel_tol=args.rel_tol,
        min_duration_s=args.min_duration,
        colocated=args.only != "disaggregated",
        disaggregated=args.only != "colocated",
    )


def run(args) -> int:
    import time

    from ..disagg_study import recommend, run_study

    spec = spec_from_args(args)
    from ..sweep import build_workload

    build_workload(spec.workload, 1.0, spec.seed)  # a bad workload fails here, once
    t0 = time.perf_counter()
    with executor_for("local", args.jobs) as ex:
        df = run_study(spec, executor=ex, progress=not (args.no_progress or args.json))
    wall = time.perf_counter() - t0
    rec = recommend(df, spec)
    if args.plot:
        from ..disagg_plot import goodput_pareto

        goodput_pareto(df, rec).savefig(args.plot, dpi=110)
    errors = df[df.error.notna()]
    if args.json:
        rows = json.loads(df.drop(columns=["wall_s"], errors="ignore").to_json(orient="records"))
        print(json.dumps({"candidates": rows, "recommendation": rec, "wall_s": wall}, indent=2))
        return 0
    print(
        f"{spec.model} on {spec.hardware}, {spec.gpus} GPUs: {len(df)} candidates, goodput = highest rate with "
        f"{spec.attainment:.0%} of requests within TTFT {spec.ttft_slo_ms:g} ms and ITL {spec.itl_slo_ms:g} ms "
        f"({'TPOT' if spec.itl_per_request == 'mean' else 'worst gap'} per request); {wall:.1f} s"
    )
    ok = df[df.error.isna()].sort_values("goodput_per_gpu", ascending=False, kind="stable")
    print(table(ok[[c for c in COLUMNS if c in ok]].to_dict("records")))
    for _, r in errors.iterrows():
        print(f"{r.candidate}: {r.error}", file=sys.stderr)
    print()
    print(rec["text"])
    if args.plot:
        print(f"plot: {args.plot}")
    return 0
