"""Sweep engine knobs × request rates × policies against ITL/TTFT SLOs, and recommend a setting.

A point is one simulation, described by a flat, JSON-able dict (its configuration) and named by a
hash of it, so a results file written by an interrupted sweep tells a resumed one what is done.
The table is built in grid order from those records, never in completion order, so local, Dask
and resumed sweeps of one grid give the same table.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import require

from .engines import POLICIES
from .overload import GROWTH_LIMIT, load_figures

KNOBS = {
    "vllm": ("max_num_batched_tokens", "long_prefill_token_threshold"),
    "sglang": ("chunked_prefill_size", "enable_mixed_chunk"),
    "nochunk": (),
}
KNOB_COLUMNS = tuple(dict.fromkeys(k for ks in KNOBS.values() for k in ks))
AXES = ("hardware", "tp", "replicas", "router")
"""Deployment axes swept beside the engine knobs: each point is ``replicas`` replicas of ``tp`` GPUs
of ``hardware`` behind ``router``."""
AXIS_DEFAULTS = {
    "replicas": 1,
    "router": "round_robin",
}  # left out of a point's hash, so ids of sweeps without them stay
CONFIG_COLUMNS = (
    "point_id",
    "engine",
    "policy",
    "request_rate",
    *KNOB_COLUMNS,
    "model",
    "hardware",
    "tp",
    "replicas",
    "router",
    "seed",
    "flags",
    "workload",
    "goodput",
    "usd_per_gpu_hour",
)
SLO_PERCENTILES = (50, 90, 99)
MINIMIZED = ("usd_per_million_output_tokens", "usd_per_million_total_tokens")
OBJECTIVES = ("output_throughput", "request_goodput", "request_throughput", "total_token_throughput", *MINIMIZED)


@dataclass(frozen=True)
class SweepSpec:
    """grid: policy -> {knob: [values]} (a knob left out keeps the engine's default); flags: policy ->
    fixed engine flags; workload: a ``workloads`` config section, or ``{"kind": "chat_with_long_prompts", ...}``."""

    grid: dict
    request_rates: tuple = (None,)
    workload: dict = field(default_factory=lambda: {"kind": "chat_with_long_prompts"})
    model: str = "llama-3.1-8b"
    hardware: str = "h100"
    tp: int = 1
    seed: int = 0
    flags: dict = field(default_factory=dict)
    goodput: dict | None = None  # vllm bench serve --goodput SLOs (ttft/tpot/e2el ms) for request_goodput
    bench: dict | None = None  # vllm bench serve result options: metrics, percentiles, result_dir, detailed
    axes: dict = field(
        default_factory=dict
    )  # AXES name -> [values]; a missing one is hardware/tp above, 1, round_robin
    prices: dict = field(default_factory=dict)  # hardware name -> USD per GPU-hour (else pricing's default, if any)

    def __post_init__(self):
        require(bool(self.grid), "grid", self.grid, "name at least one policy")
        for policy, knobs in self.grid.items():
            require(policy in POLICIES, "policy", policy, f"must be one of {', '.join(POLICIES)}")
            require(isinstance(knobs, dict), f"grid:{policy}", knobs, "must map knob names to lists of values")
            unknown = sorted(set(knobs) - set(KNOBS[policy]))
            require(
                not unknown,
                f"grid:{policy}",
                unknown,
                f"not swept knobs of {policy}; {policy} sweeps {', '.join(KNOBS[policy]) or 'nothing'}",
            )
            for k, vals in knobs.items():
                require(
                    isinstance(vals, (list, tuple)) and len(vals) > 0,
                    f"grid:{policy}:{k}",
                    vals,
                    "must be a non-empty list",
                )
        for r in self.request_rates:
            require(r is None or (isinstance(r, (int, float)) and r > 0), "request-rates", r, "must be positive")
        unknown = sorted(set(self.axes) - set(AXES))
        require(not unknown, "axes", unknown, f"not sweep axes; axes are {', '.join(AXES)}")
        for k, vals in self.axes.items():
            require(
                isinstance(vals, (list, tuple)) and len(vals) > 0 and len(set(vals)) == len(vals),
                k,
                vals,
                "must be a non-empty list without repeats",
            )

    def axis(self, name: str) -> list:
        default = {"hardware": self.hardware, "tp": self.tp}.get(name, AXIS_DEFAULTS.get(name))
        return list(self.axes.get(name) or [default])


def engine_label(policy: str, knobs: dict) -> str:
    """The recommendation's group: a policy, split by its on/off knobs (SGLang with and without mixing)."""
    return policy + "".join(f"+{k}" for k, v in knobs.items() if isinstance(v, bool) and v)


def _deployment_label(deploy: dict, varied: list) -> str:
    """The axes that vary in this sweep, as a suffix of the engine label (·h200·tp2·x4·least_kv)."""
    parts = {
        "hardware": str(deploy["hardware"]),
        "tp": f"tp{deploy['tp']}",
        "replicas": f"x{deploy['replicas']}",
        "router": str(deploy["router"]),
    }
    return "".join(f"·{parts[a]}" for a in AXES if a in varied)


def points(spec: SweepSpec) -> list[dict]:
    from .pricing import gpu_hourly_price

    out = []
    varied = [a for a in AXES if len(spec.axis(a)) > 1]
    deployments = [dict(zip(AXES, combo)) for combo in itertools.product(*(spec.axis(a) for a in AXES))]
    for policy, knobs in spec.grid.items():
        names = list(knobs)
        for combo in itertools.product(*(knobs[k] for k in names)):
            chosen = dict(zip(names, combo))
            for deploy in deployments:
                for rate in spec.request_rates:
                    p = {
                        "engine": engine_label(policy, chosen) + _deployment_label(deploy, varied),
                        "policy": policy,
                        "request_rate": rate,
                        **{k: chosen.get(k) for k in KNOB_COLUMNS},
                        "model": spec.model,
                        **deploy,
                        "seed": spec.seed,
                        "flags": json.dumps(spec.flags.get(policy, {}), sort_keys=True),
                        "workload": json.dumps(spec.workload, sort_keys=True),
                        "goodput": json.dumps(spec.goodput, sort_keys=True) if spec.goodput else None,
                    }
                    if spec.bench:
                        p["bench"] = json.dumps(spec.bench, sort_keys=True)
                    hashed = {k: v for k, v in p.items() if not (k in AXIS_DEFAULTS and v == AXIS_DEFAULTS[k])}
                    p["usd_per_gpu_hour"] = gpu_hourly_price(
                        str(deploy["hardware"]), spec.prices.get(str(deploy["hardware"]))
                    )[0]
                    p = {"point_id": hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:16], **p}
                    out.append(p)
    return out


def build_workload(workload: dict, rate: float | None, seed: int):
    from workloads import workload_from_config
    from workloads.traffic import chat_with_long_prompts

    w = dict(workload)
    if w.get("kind") == "chat_with_long_prompts":
        w.pop("kind")
        return chat_with_long_prompts(rate if rate is not None else w.pop("request_rate", math.inf), seed, **w)
    if rate is not None:
        if w.get("kind") == "trace":
            w["trace"] = {**w.get("trace", {}), "target_rate": rate}
        else:
            w["request_rate"] = rate
    return workload_from_config(w, seed)


def run_point(point: dict) -> dict:
    """One simulation; the summary's `vllm bench serve` keys join the configuration."""
    from costmodel import load_hardware, load_model
    from simcore.simulation import Simulation

    from .engines import build_cluster

    model, hw = load_model(point["model"]), load_hardware(point["hardware"])
    knobs = {k: point[k] for k in KNOBS[point["policy"]] if point.get(k) is not None}
    flags = {**json.loads(point["flags"]), **knobs}
    replicas, router = point.get("replicas") or 1, point.get("router") or "round_robin"
    engines, route, max_len = build_cluster(point["policy"], model, hw, point["tp"], flags, replicas, router)
    wl = build_workload(json.loads(point["workload"]), point["request_rate"], point["seed"])
    goodput = json.loads(point.get("goodput") or "null")
    bench = json.loads(point.get("bench") or "null")
    res = Simulation(
        engines, wl, max_model_len=max_len, router=route, record_iterations=bool(bench and bench.get("result_dir"))
    ).run(goodput=goodput)
    out = {k: v for k, v in res.summary.items() if k != "replicas"}
    out.update(load_figures(res.requests.arrival_s.to_numpy(), res.requests.ttft_s.to_numpy()))
    if point.get("usd_per_gpu_hour") is not None:
        from .pricing import cost_per_million

        out.update(cost_per_million(out, point["tp"] * replicas, point["usd_per_gpu_hour"]))
    if bench:
        out.update(_bench_outputs(point, bench, res, wl, goodput))
    return out


def _bench_outputs(point: dict, bench: dict, res, wl, goodput) -> dict:
    """`vllm bench serve`'s percentile keys for the point and, with a result folder, its result file."""
    from .bench_result import now_stamp, percentile_keys, vllm_result

    out = percentile_keys(res, bench["metrics"], bench["percentiles"])
    if bench.get("result_dir"):
        w = json.loads(point["workload"])
        rate = point["request_rate"] if point["request_rate"] is not None else w.get("request_rate", math.inf)
        info = {
            "date": now_stamp(),
            "backend": f"chunksim-{point['policy']}",
            "label": point["engine"],
            "model_id": point["model"],
            "num_prompts": len(wl),
            "request_rate": float(rate),
            "burstiness": float(w.get("burstiness", 1.0)),
            "max_concurrency": w.get("max_concurrency"),
            "ramp": None,
            "metadata": {},
            "planned_arrival_s": wl.arrival_s,
            "config": {k: point[k] for k in CONFIG_COLUMNS if k in point},
        }
        result = vllm_result(res, info, bench["metrics"], bench["percentiles"], bench.get("detailed", False), goodput)
        path = Path(bench["result_dir"]) / f"{point['engine']}-{float(rate)}qps-{point['point_id']}.json"
        path.write_text(json.dumps(result, default=_plain))
        out["result_file"] = str(path)
    return out


def safe_run_point(point: dict) -> dict:
    """A point that raises is a record with its error, so the sweep goes on."""
    t0 = time.perf_counter()
    try:
        metrics, error = run_point(point), None
    except Exception as e:  # noqa: BLE001 -- recorded, not swallowed
        metrics, error = {}, f"{type(e).__name__}: {e}"
    return {**point, "error": error, **metrics, "wall_s": time.perf_counter() - t0}


def load_records(path: Path) -> dict:
    """point_id -> record, from a JSON-lines results file; a line cut short by a kill is dropped."""
    path = Path(path)
    if not path.exists():
        return {}
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        raw = raw[: raw.rfind(b"\n") + 1]
        path.write_bytes(raw)
    out = {}
    for line in raw.decode().splitlines():
        if line.strip():
            rec = json.loads(line)
            out[rec["point_id"]] = rec
    return out


def append_record(path: Path, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec, default=_plain) + "\n")
        f.flush()


def _plain(x):
    return x.item() if isinstance(x, np.generic) else str(x)


def table(pts: list[dict], records: dict) -> pd.DataFrame:
    """One row per point in grid order; columns: configuration, error, then the summary metrics."""
    rows = [records.get(p["point_id"], {**p, "error": "not run"}) for p in pts]
    metrics = next((list(r) for r in rows if not r.get("error")), [])
    cols = (
        list(CONFIG_COLUMNS)
        + ["error"]
        + [c for c in metrics if c not in CONFIG_COLUMNS and c not in ("error", "wall_s")]
    )
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)


def run_sweep(
    spec: SweepSpec, results: str | Path | None = None, executor=None, resume: bool = False, progress: bool = False
) -> pd.DataFrame:
    """Run every point not already finished in ``results`` (JSON lines), appending each as it ends."""
    from .executors import map_points

    pts = points(spec)
    path = Path(results) if results else None
    done = {}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            done = {k: r for k, r in load_records(path).items() if not r.get("error")}
        else:
            path.write_text("")
    todo = [p for p in pts if p["point_id"] not in done]
    new = {}

    def on_result(rec):
        new[rec["point_id"]] = json.loads(json.dumps(rec, default=_plain))
        if path is not None:
            append_record(path, rec)

    map_points(safe_run_point, todo, on_result, executor=executor, progress=progress)
    return table(pts, {**done, **new})


def mark_slo(df: pd.DataFrame, itl_slo_ms: float, ttft_slo_ms: float | None = None, percentile: int = 99) -> pd.Series:
    """A point meets the SLOs when it ran, rejected nothing, is not overloaded (experiments/overload.py)
    and its percentile ITL (and TTFT) are within them."""
    require(percentile in SLO_PERCENTILES, "percentile", percentile, f"must be one of {SLO_PERCENTILES}")
    require(itl_slo_ms > 0, "itl-slo-ms", itl_slo_ms, "must be positive")
    require(ttft_slo_ms is None or ttft_slo_ms > 0, "ttft-slo-ms", ttft_slo_ms, "must be positive")
    ok = df.error.isna() & (df.get("num_rejected", 0) == 0) & (df[f"p{percentile}_itl_ms"] <= itl_slo_ms)
    if "overloaded" in df:
        ok &= ~df.overloaded.fillna(False).astype(bool)
    if ttft_slo_ms is not None:
        ok &= df[f"p{percentile}_ttft_ms"] <= ttft_slo_ms
    return ok.fillna(False).astype(bool)


def recommend(
    df: pd.DataFrame,
    itl_slo_ms: float,
    ttft_slo_ms: float | None = None,
    percentile: int = 99,
    objective: str = "output_throughput",
    analytic_tokens: int | None = None,
) -> pd.DataFrame:
    """Per engine, the point with the best objective among those meeting the SLOs (ties: lower ITL): the
    highest throughput or goodput, the lowest cost per million tokens. An overloaded point never
    meets them; ``overloaded`` counts an engine's overloaded points."""
    require(objective in OBJECTIVES, "objective", objective, f"must be one of {', '.join(OBJECTIVES)}")
    require(
        objective in df or df.error.notna().all(),
        "objective",
        objective,
        "not in the results (request_goodput needs a goodput SLO)",
    )
    itl, ttft = f"p{percentile}_itl_ms", f"p{percentile}_ttft_ms"
    d = df.assign(meets_slo=mark_slo(df, itl_slo_ms, ttft_slo_ms, percentile), _order=np.arange(len(df)))
    rows = []
    for engine, g in d.groupby("engine", sort=False):
        ok = g[g.meets_slo].sort_values(
            [objective, itl, "_order"], ascending=[objective in MINIMIZED, True, True], kind="stable"
        )
        row = {"engine": engine, "points": len(g), "meeting_slo": len(ok)}
        if "overloaded" in g:
            row["overloaded"] = int(g.overloaded.fillna(False).astype(bool).sum())
        if len(ok):
            best = ok.iloc[0]
            row.update({k: best[k] for k in ("request_rate", *KNOBS[best.policy])})
            row.update({a: best[a] for a in AXES if a in best and d[a].nunique(dropna=False) > 1})
            row.update({itl: best[itl], ttft: best[ttft], objective: best[objective], "point_id": best.point_id})
        if analytic_tokens is not None and engine != "nochunk":
            row["analytic_budget_tokens"] = analytic_tokens
        rows.append(row)
    out = pd.DataFrame(rows)
    if objective in MINIMIZED and objective in out:  # a ranking: the cheapest deployment first
        out = out.sort_values(objective, kind="stable", na_position="last").reset_index(drop=True)
    return out


def all_overloaded(df: pd.DataFrame) -> bool:
    """Every point that ran is overloaded (queue growth > GROWTH_LIMIT): no rate in the sweep is
    one the server keeps up with, so no setting is recommended."""
    ran = df[df.error.isna()]
    return len(ran) > 0 and "overloaded" in ran and bool(ran.overloaded.fillna(False).astype(bool).all())


def overload_message(df: pd.DataFrame) -> str:
    ran = df[df.error.isna()]
    return (
        f"every point is overloaded (queue growth > {GROWTH_LIMIT:g} s per s: the server keeps up with "
        f"less than {1 / (1 + GROWTH_LIMIT):.0%} of the offered rate; lowest offered rate "
        f"{ran.offered_rate.min():.3g} req/s, its throughput {ran.loc[ran.offered_rate.idxmin(), 'request_throughput']:.3g} "
        "req/s): no setting is recommended; sweep lower --request-rates or more hardware"
    )


def pareto_mask(df: pd.DataFrame, x: str = "output_throughput", y: str = "p99_itl_ms") -> np.ndarray:
    """Points no other point beats on both axes (higher x, lower y)."""
    xs, ys = df[x].to_numpy(dtype=float), df[y].to_numpy(dtype=float)
    ok = np.isfinite(xs) & np.isfinite(ys)
    mask = np.zeros(len(df), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (xs >= xs[i]) & (ys <= ys[i]) & ((xs > xs[i]) | (ys < ys[i]))
        mask[i] = not dominated.any()
    return mask


def analytic_budget(model: str, hardware: str, tp: int, itl_slo_ms: float) -> int:
    """The seed's one-line bound: the largest page-aligned chunk whose weight GEMMs fit the SLO."""
    from costmodel import load_hardware, load_model

    from .stall import StallScene, stall_figures

    return int(
        stall_figures(load_model(model), load_hardware(hardware), StallScene(slo_ms=itl_slo_ms), tp)[
            "slo_budget_tokens"
        ]
    )
