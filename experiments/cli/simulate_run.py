"""`chunksim simulate` from parsed flags: everything checked first, then one run, then its files."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel import load_hardware, load_model
from costmodel.errors import InputError, require
from costmodel.expected_error import ExpectedError, expected_error
from simcore.simulation import Simulation

from .. import bench_result as br, engine_defaults, experiment_file, expert_flags, model_error
from ..engine_cmd import DP_ROUTER, parse_engine_cmd, shipped_model
from ..engines import build_cluster
from ..model_error import run_at_scale
from ..pricing import COST_KEYS, cost_per_million, gpu_hourly_price
from ..report import table
from .common import check_hardware_file, read_text

BAND_METRICS = ("p99_itl_ms", "p99_ttft_ms", "output_throughput")
BANDS = (5, 50, 95)
UNCERTAINTY_STREAM = 1000  # spawn key of the parameter draws; the workload's streams use 0, 1, 2
BYTES_PER_REQUEST = 1500  # simulator + tables, measured: ~1 KB a request at a million requests
TRACE_BYTES_PER_STEP, TRACE_BYTES_PER_REQUEST = 450, 600  # measured on chrome_trace output
PROGRESS_DELAY_S = 2.0  # the bar shows only on runs longer than this
ENGINE_KEYS = experiment_file.ENGINE_FLAGS


def _ep_note(flags: dict, gpus: int) -> str:
    """SGLang's expert-parallel layout as the note states it."""
    if flags.get("moe_a2a_backend") == "deepep":
        return f"; experts over all {gpus} GPUs, tokens by DeepEP ({flags.get('deepep_mode') or 'auto'} mode)"
    if (flags.get("ep_size") or 1) > 1:
        return f"; experts split {flags['ep_size']} ways, tokens all-gathered"
    return " (no expert parallelism)"


def from_engine_cmd(args) -> tuple[dict, list[str]]:
    """The pasted command line's settings, below any flag given explicitly."""
    if args.engine_cmd is None:
        return {}, []
    cmd = parse_engine_cmd(args.engine_cmd, bool(getattr(args, "allow_unmodeled", None)))
    o = {"policy": cmd.policy, **cmd.flags}
    if cmd.model and args.model is None:
        o["model"] = shipped_model(cmd.model)
    if cmd.tp:
        o["tp"] = cmd.tp
    notes = []
    if cmd.dp and cmd.dp > 1 and cmd.flags.get("enable_dp_attention"):
        tp = cmd.tp or 1
        require(
            tp % cmd.dp == 0,
            "--engine-cmd --tp-size",
            tp,
            f"must be a multiple of --dp-size {cmd.dp} under --enable-dp-attention (SGLang: tp_size % dp_size == 0)",
        )
        o.update(replicas=cmd.dp, router=DP_ROUTER[cmd.policy], tp=tp // cmd.dp)
        notes.append(
            f"note: --engine-cmd --enable-dp-attention --dp-size {cmd.dp} --tp-size {tp} is modelled as {cmd.dp} "
            f"attention ranks of tp={tp // cmd.dp} stepped together, the MoE layers over all {tp} GPUs; "
            "each rank's chunked_prefill_size is the server's // dp" + _ep_note(cmd.flags, tp)
        )
    elif cmd.dp and cmd.dp > 1:
        o["replicas"] = cmd.dp
        o["router"] = DP_ROUTER[cmd.policy]
        notes.append(
            f"note: --engine-cmd data parallel size {cmd.dp} is modelled as {cmd.dp} replicas of tp={cmd.tp or 1} "
            f"behind the {DP_ROUTER[cmd.policy]} router ({cmd.policy}'s own balancer"
            + (
                "; a MoE model's ranks step in lockstep, "
                + (
                    f"experts split whole over all {cmd.dp * (cmd.tp or 1)} GPUs by expert parallel)"
                    if cmd.flags.get("enable_expert_parallel")
                    else "experts sharded over every GPU; no expert parallelism)"
                )
                if cmd.policy == "vllm"
                else "; no DP attention or expert parallelism)"
            )
        )
    if cmd.unmodeled:
        notes.append(
            "warning: --engine-cmd flags that change the answer, not modelled (allowed by --allow-unmodeled): "
            + " ".join(cmd.unmodeled)
        )
    if cmd.ignored or cmd.env:
        notes.append(
            "warning: --engine-cmd flags chunksim does not model (ignored): "
            + " ".join(cmd.ignored + [f"(environment) {e}" for e in cmd.env])
        )
    return o, notes


def config(args) -> tuple[dict, list[str]]:
    """defaults <- ``-f`` file <- ``--engine-cmd`` <- flags given on the command line."""
    cmd, ignored = from_engine_cmd(args)
    flags = {k: v for k, v in vars(args).items() if v is not None}
    flags["fast_forward"] = False if args.no_fast_forward else None
    flags.pop("no_fast_forward", None)
    flags.pop("allow_unmodeled", None)
    if args.file:
        read_text(args.file, "-f")
    merged = {**cmd, **{k: v for k, v in flags.items() if v is not None}}
    return experiment_file.effective(experiment_file.load_experiment(args.file) if args.file else None, merged), ignored


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**40


def preflight(args, cfg: dict) -> dict:
    """Every check that needs no simulation: output paths, result options, sizes."""
    opts = {
        "metrics": br.parse_percentile_metrics(args.percentile_metrics or "ttft,tpot,itl"),
        "percentiles": br.parse_metric_percentiles(args.metric_percentiles or "99"),
        "metadata": br.parse_metadata(args.metadata),
    }
    for flag, given in (
        ("--save-detailed", args.save_detailed),
        ("--result-dir", args.result_dir),
        ("--result-filename", args.result_filename),
        ("--label", args.label),
        ("--metadata", args.metadata),
        ("--append-result", args.append_result),
    ):
        require(
            not given or args.save_result, flag, given if not isinstance(given, bool) else True, "needs --save-result"
        )
    if args.out:
        br.writable_dir(Path(args.out), "--out")
    if args.plots:
        br.writable_dir(Path(args.plots), "--plots")
    if args.trace:
        br.writable_file(Path(args.trace), "--trace")
    if getattr(args, "report", None):
        br.writable_file(Path(args.report), "--report")
    require(
        not getattr(args, "trace_max_mb", None) or args.trace,
        "--trace-max-mb",
        getattr(args, "trace_max_mb", None),
        "needs --trace",
    )
    if args.result_dir:
        br.writable_dir(Path(args.result_dir), "--result-dir")
    if args.result_filename:
        require(
            Path(args.result_filename).name == args.result_filename or not args.result_dir,
            "--result-filename",
            args.result_filename,
            "give a file name when --result-dir is given",
        )
    check_hardware_file(cfg["hardware"])
    n = cfg["workload"].get("num_prompts")
    if isinstance(n, int):
        need = n * BYTES_PER_REQUEST
        require(
            need < _physical_memory(),
            "--num-prompts",
            n,
            f"needs about {need / 2**30:,.0f} GiB; this machine has {_physical_memory() / 2**30:,.0f} GiB",
        )
    return opts


class ProgressSimulation(Simulation):
    """A Simulation that ticks a tqdm bar every 256 finished requests (no events of its own)."""

    bar = None

    def finished(self, req) -> None:
        super().finished(req)
        self._done = getattr(self, "_done", 0) + 1
        if self.bar is not None and not self._done & 255:
            self.bar.update(self._done - self.bar.n)


def _bar(n: int, quiet: bool):
    from tqdm import tqdm

    return tqdm(
        total=n, unit="req", desc="simulate", delay=PROGRESS_DELAY_S, disable=quiet, file=sys.stderr, leave=False
    )


def run_info(args, cfg: dict, model, hw, workload) -> dict:
    w = cfg["workload"]
    lengths = w.get("lengths") or {}
    ramp = (
        tuple(w[k] for k in ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"))
        if w.get("kind") == "ramp"
        else None
    )
    rate = w.get("request_rate", "inf")
    backend = f"chunksim-{cfg['policy']}"
    dataset = {
        "fixed": "random",
        "random": "random",
        "sharegpt": "sharegpt",
        "table": "custom",
        "shared_prefix": "prefix_repetition",
    }
    return {
        "date": br.now_stamp(),
        "backend": backend,
        "label": args.label or backend,
        "model_id": getattr(model, "source", None) or _model_id(model),
        "num_prompts": len(workload),
        "request_rate": float(rate) if rate is not None else math.inf,
        "burstiness": float(w.get("burstiness", 1.0)),
        "max_concurrency": w.get("max_concurrency"),
        "ramp": ramp,
        "planned_arrival_s": workload.arrival_s,
        "dataset_name": dataset.get(lengths.get("kind"), "trace"),
        "sharegpt_output_len": lengths.get("output_len") if lengths.get("kind") == "sharegpt" else None,
        "random_input_len": lengths.get("input_len"),
        "random_output_len": lengths.get("output_len"),
        "random_range_ratio": lengths.get("range_ratio", 0.0),
        "tag": args.label,
    }


def _model_id(model) -> str:
    from costmodel.model import MODELS_DIR

    p = MODELS_DIR / f"{model.name}.json"
    if p.is_file():
        return json.loads(p.read_text()).get("_source", model.name)
    return model.name


def uncertainty(cfg: dict, model, hw, draws: list, scales, workload, goodput, point: dict) -> tuple[dict, list[dict]]:
    """The same workload at each draw: a parameter set (the fit's covariance, where the profile has
    one) and a factor on every step's time (the profile kind's expected error,
    costmodel/expected_error.py, run by a change of time unit: experiments/model_error.py);
    percentile bands of the key metrics."""
    drawn = [f.name for f in dataclasses.fields(hw) if any(getattr(d, f.name) != getattr(hw, f.name) for d in draws)]
    rows = []
    for i, (d, scale) in enumerate(zip(draws, scales)):
        engines, router, max_len = build_cluster(
            cfg["policy"], model, d, cfg["tp"], cfg["engine"], cfg["replicas"], cfg["router"]
        )
        res = run_at_scale(
            engines,
            workload,
            float(scale),
            router=router if cfg["replicas"] > 1 else None,
            max_model_len=max_len,
            goodput=goodput,
            fast_forward=cfg["fast_forward"],
        )
        rows.append(
            {
                "draw": i,
                "time_scale": float(scale),
                **{f: getattr(d, f) for f in drawn},
                **{m: res.summary[m] for m in BAND_METRICS},
            }
        )
    bands = {
        m: {"point": point[m], **{f"p{q}": float(np.percentile([r[m] for r in rows], q)) for q in BANDS}}
        for m in BAND_METRICS
    }
    return {"draws": len(draws), "hardware": hw.name, "drawn_fields": drawn, "metrics": bands}, rows


def _trace_bytes(res) -> int:
    steps = sum(e[3] for e in res.iterations or [])
    return steps * TRACE_BYTES_PER_STEP + len(res.requests) * TRACE_BYTES_PER_REQUEST


def run_simulation(args) -> dict:
    cfg, ignored = config(args)
    opts = preflight(args, cfg)
    model, hw = load_model(cfg["model"]), load_hardware(cfg["hardware"])
    engines, router, max_len = build_cluster(
        cfg["policy"], model, hw, cfg["tp"], cfg["engine"], cfg["replicas"], cfg["router"]
    )
    sched, pool = engines[0][0], engines[0][1]
    resolved = engine_defaults.resolved(
        cfg["policy"], model, hw, sched, pool, cfg["engine"], max_len, cfg["tp"], engines[0][2]
    ) + expert_flags.rows(getattr(router, "lockstep", None))
    try:
        workload = experiment_file.build_workload(cfg)
    except InputError as e:  # a workload section read from -f as written: the error names the file
        if args.file and cfg["workload"] == experiment_file.load_experiment(args.file).get("workload"):
            raise experiment_file.in_file(args.file, e, "workload") from None
        raise
    goodput = cfg.get("goodput")
    notes = []
    quiet = args.quiet or args.json
    notes += ignored  # the pasted line's unmodelled flags and data-parallel reading, even with --quiet
    draws = scales = None
    expected = expected_error(hw)
    if args.uncertainty:
        rng = np.random.default_rng(np.random.SeedSequence(cfg["seed"], spawn_key=(UNCERTAINTY_STREAM,)))
        draws, scales = model_error.draws(hw, args.uncertainty, rng, expected.sigma_log)
    for n in notes:
        print(n, file=sys.stderr)
    sim = ProgressSimulation(
        engines,
        workload,
        fast_forward=cfg["fast_forward"],
        max_model_len=max_len,
        router=router,
        record_iterations=bool(args.trace or args.plots or args.save_result),
    )
    if sim.forced_reference and not quiet:
        print(
            "note: this run steps every iteration (simcore/stepping.py): speculative decoding, DP ranks, "
            "a decode skew or a PD server have no fast path; expect it to run slower than fast-forward",
            file=sys.stderr,
        )
    with _bar(len(workload), quiet) as bar:
        sim.bar = bar
        res = sim.run(goodput=goodput)
    files = []
    passes = None
    title = None
    if args.trace or args.plots or getattr(args, "report", None):
        from ..run_plots import pass_table, run_title, stalled_requests

        title = run_title(cfg["policy"], model.name, hw.name, cfg["tp"], cfg["replicas"], cfg["router"])
        if args.trace or args.plots:
            rids = stalled_requests(res)
            passes, times = pass_table(res, rids, progress=not quiet)
    if args.trace:
        from ..perfetto import MAX_BYTES, write_trace

        budget = int(args.trace_max_mb * 2**20) if getattr(args, "trace_max_mb", None) else MAX_BYTES
        path, info = write_trace(res, args.trace, budget, passes)
        shown = (
            ""
            if info["requests_shown"] == info["requests"]
            else f"; {info['requests_shown']:,} of {info['requests']:,} requests shown ({info['request_sampling']})"
        )
        merged = "" if info["entries_per_slice"] == 1 else f"; {info['entries_per_slice']} log entries per slice"
        note = f"wrote trace: {path} ({info['bytes'] / 2**20:,.1f} MB{shown}{merged})"
        print(note, file=sys.stderr)  # the size always shows, --quiet and --json included
        files.append(note)
    if args.plots:
        from ..run_plots import save_run_plots

        files += [
            f"wrote plot: {p}"
            for p in save_run_plots(
                res, args.plots, title=title, progress=not quiet, passes=passes, times=times
            ).values()
        ]
    s = res.summary
    if args.percentile_metrics or args.metric_percentiles:
        s.update(br.percentile_keys(res, opts["metrics"], opts["percentiles"]))
    s["engine_config"] = engine_defaults.as_mapping(resolved)
    s.update(_cost(cfg, hw, s, args.gpu_hourly_price))
    s["expected_error"] = {"hardware": hw.name, **expected.as_dict()}
    if draws:
        s["uncertainty"], rows = uncertainty(cfg, model, hw, draws, scales, workload, goodput, s)
    if args.save_result:
        info = {
            **run_info(args, cfg, model, hw, workload),
            "metadata": opts["metadata"],
            "config": {**cfg, "engine_config": s["engine_config"]},
        }
        if args.result_format == "sglang":
            result = br.sglang_result(res, info, args.save_detailed)
        else:
            result = br.vllm_result(res, info, opts["metrics"], opts["percentiles"], args.save_detailed, goodput)
        path = br.result_path(args.result_format, args.result_dir, args.result_filename, info)
        append = args.append_result or args.result_format == "sglang"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            if append and f.tell() and args.result_format == "vllm":
                f.write("\n")
            f.write(json.dumps(result, default=_plain) + ("\n" if args.result_format == "sglang" else ""))
        files.append(f"wrote result: {path}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        res.requests.to_parquet(out / "requests.parquet")
        res.requests.to_csv(out / "requests.csv", index=False)
        (out / "config.yaml").write_text(experiment_file.dump(cfg) + engine_defaults.yaml_comment(resolved, hw.name))
        (out / "summary.json").write_text(json.dumps({**s, "config": cfg}, indent=2, default=_plain))
        if draws:
            pd.DataFrame(rows).to_csv(out / "uncertainty.csv", index=False)
        files.append(f"wrote run: {out}")
    if getattr(args, "report", None):
        from ..html_report import engine_title, simulate_report

        path = simulate_report(
            res,
            args.report,
            title=engine_title(cfg["policy"], model.name, hw.name, cfg["tp"], cfg["replicas"], cfg["router"]),
            config=config_rows(args, cfg, resolved),
            summary=s,
        )
        files.append(f"wrote report: {path}")
    return {"summary": s, "text": _text(cfg, model, hw, pool, s, resolved, draws), "files": files}


def _cost(cfg: dict, hw, s: dict, given) -> dict:
    """USD per million tokens at the run's throughput on tp × replicas GPUs, when a price is known."""
    price, source = gpu_hourly_price(hw.name, given)
    out = {"usd_per_gpu_hour": price, "price_source": source, "gpus": cfg["tp"] * cfg["replicas"]}
    if price is not None:
        out.update(cost_per_million(s, out["gpus"], price))
    return out


def config_rows(args, cfg: dict, resolved: list[dict]) -> list[dict]:
    """The configuration in force, each value with where it came from: the run's settings (a flag,
    the -f file, --engine-cmd, or chunksim's default), then the engine's (``engine_defaults.resolved``)."""
    given = {k for k, v in vars(args).items() if v is not None and v is not False}
    cmd = from_engine_cmd(args)[0] if getattr(args, "engine_cmd", None) else {}
    in_file = experiment_file.load_experiment(args.file) if getattr(args, "file", None) else {}
    rows = []
    for key in ("model", "hardware", "tp", "policy", "replicas", "router", "seed", "fast_forward"):
        if key not in cfg:
            continue
        why = (
            "flag"
            if key in given
            else "--engine-cmd"
            if key in cmd
            else f"-f {args.file}"
            if key in in_file
            else "chunksim default"
        )
        rows.append({"setting": key, "value": cfg[key], "source": why})
    for key, v in (cfg.get("workload") or {}).items():
        why = (
            "flag"
            if key in given
            else f"-f {args.file}"
            if key in (in_file.get("workload") or {})
            else "from the workload flags or chunksim default"
        )
        rows.append({"setting": f"workload.{key}", "value": v, "source": why})
    rows += [{"setting": f"engine.{r['flag']}", "value": r["value"], "source": r["why"]} for r in resolved]
    return rows


def _plain(x):
    return x.item() if isinstance(x, np.generic) else str(x)


def _text(cfg, model, hw, pool, s, resolved, draws) -> str:
    lines = [
        f"{cfg['policy']} · {model.name} on {hw.name} (tp={cfg['tp']}) · {cfg['replicas']} replica(s), router "
        f"{cfg['router']} · KV pool {pool.total * pool.block_size:,} tokens per replica"
    ]
    lines.append(
        table(
            [
                {"engine flag": r["flag"], "value": "-" if r["value"] is None else str(r["value"]), "why": r["why"]}
                for r in resolved
            ]
        )
    )
    lines.append("")
    keys = [
        "completed",
        "num_rejected",
        "request_throughput",
        "output_throughput",
        "mean_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p99_tpot_ms",
        "p99_itl_ms",
        "max_itl_ms",
        "num_iterations",
        "num_preemptions",
    ]
    lines.append(table([{"metric": k, "value": s[k]} for k in keys + [k for k in COST_KEYS if k in s]]))
    lines.append(
        f"GPU price: {s['usd_per_gpu_hour']} USD per GPU-hour × {s['gpus']} GPUs ({s['price_source']})"
        if s["usd_per_gpu_hour"] is not None
        else f"cost: {s['price_source']}"
    )
    if "replicas" in s:
        lines.append("")
        lines.append(
            table(
                [
                    {
                        "replica": i,
                        **{
                            k: r[k]
                            for k in (
                                "routed",
                                "mean_load",
                                "completed",
                                "output_throughput",
                                "p99_ttft_ms",
                                "p99_itl_ms",
                            )
                        },
                    }
                    for i, r in enumerate(s["replicas"])
                ]
            )
        )
        lines.append(
            "routed: requests sent to the replica; mean_load: requests in it on average over the run "
            "(Little's law: their time in the system over the run's span)"
        )
    e = s["expected_error"]
    lines.append(ExpectedError(**{k: v for k, v in e.items() if k != "hardware"}).line(hw.name))
    if draws:
        u = s["uncertainty"]
        fit = f"{hw.name}'s fitted covariance and " if u["drawn_fields"] else ""
        lines.append(
            f"\nuncertainty: {len(draws)} draws of {fit}the {e['kind']} expected error (1σ {e['sigma_log']:.2f} in ln)"
        )
        lines.append(table([{"metric": m, **b} for m, b in s["uncertainty"]["metrics"].items()]))
    return "\n".join(lines)
