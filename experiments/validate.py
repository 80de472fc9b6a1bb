"""Replay a measured serving run and compare: the accuracy ledger of a profile.

Two run formats (``load_run``):
  llmservingsim  a folder with LLMServingSim's ``meta.json`` (engine kwargs, vLLM's resolved
                 config, ``kv_cache.num_gpu_blocks``) and ``requests.jsonl`` (casys-kaist/
                 LLMServingSim ``bench/``: per request ``input_toks, output_toks, queued_ts,
                 first_token_ts, last_token_ts``, engine monotonic clock, seconds). Arrival is
                 ``queued_ts`` (the engine's clock, so TTFT = first − queued as that project
                 measures it); TPOT = (last − first)/(output − 1); E2E = last − queued; no ITL
                 (no per-token times are recorded).
  vllm-bench     the JSON ``vllm bench serve --save-result --save-detailed`` writes
                 (vllm/benchmarks/serve.py, ``benchmark``: ``start_times, input_lens,
                 output_lens, ttfts, itls, latencies, errors, duration``, seconds). Arrival is
                 ``start_times`` (the client's clock); failed requests (non-empty ``errors``) are
                 left out. The server's settings are not in the file: give them as engine flags.
Parallelism: tensor parallel as ``tp``; data parallel of a dense model as that many replicas
behind the least_outstanding router. vLLM's internal load balancer sends each request to the
engine with the lowest score max(in-flight, waiting + running), waiting requests weighted up once
KV usage passes 50 % (vllm/v1/engine/core_client.py, ``DPLBAsyncMPClient.get_core_engine_for_request``);
least_outstanding is that score without the KV-pressure term. A MoE model's DP ranks step in
lockstep behind that balancer itself (router vllm_dp, experiments/engines.py ``build_dp_group``),
with ``enable_expert_parallel`` (and ``all2all_backend``, ``enable_eplb`` where recorded) as the
run's engine flags (costmodel/lockstep_ep.py).
Figures: mean, median, p90, p99 of TTFT, TPOT, ITL (where measured) and E2E, the duration and the
request and output throughputs; the overall error is the mean |relative error| over them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel import Hardware, ModelSpec
from costmodel.errors import InputError, require
from costmodel.model import MODELS_DIR
from simcore.simulation import fixed_workload

from . import model_error
from .engines import build_cluster
from .model_error import run_at_scale

STATS = ("mean", "median", "p90", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2el")
DEVICES = {
    "rtx 4090": "rtx4090",
    "rtx pro 6000 blackwell server edition": "rtx-pro-6000-server",
    "rtx pro 6000": "rtx-pro-6000",
    "h100": "h100",
    "a100": "a100-80gb",
    "h200": "h200",
    "l40s": "l40s",
}
ENGINE_KEYS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "enable_prefix_caching",
    "block_size",
    "gpu_memory_utilization",
)


@dataclass
class MeasuredRun:
    name: str
    model_id: str
    requests: pd.DataFrame  # arrival_s (from 0), prompt_len, output_len, ttft_s, tpot_s, e2el_s
    duration_s: float
    engine: dict = field(default_factory=dict)  # vLLM flags as VLLM_FLAGS spells them
    tp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    itl_s: np.ndarray | None = None
    device: str = ""
    async_scheduling: bool | None = None  # None: not recorded, the policy's default (vLLM's) applies


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("run", str(path), "no such file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}", e.msg, "not valid JSON") from None


def read_llmservingsim(folder: Path) -> MeasuredRun:
    meta = _json(folder / "meta.json")
    kw = meta.get("engine_kwargs") or {}
    resolved = meta.get("resolved_config") or {}
    sched = resolved.get("scheduler_config") or {}
    cache = {**(resolved.get("cache_config") or {}), **(meta.get("kv_cache") or {})}
    rows = []
    path = folder / "requests.jsonl"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise InputError("run", str(path), "no such file") from None
    need = ("input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{i}", line[:40], f"not valid JSON ({e.msg})") from None
        miss = [k for k in need if not isinstance(r.get(k), (int, float))]
        require(
            not miss,
            f"{path}:{i}:{miss[0] if miss else ''}",
            r.get(miss[0]) if miss else None,
            "missing or not a number",
        )
        rows.append([r[k] for k in need])
    require(bool(rows), "run", str(path), "no requests")
    a = np.array(rows, dtype=float)
    p, o, q, f, last = (a[:, j] for j in range(5))
    t0 = q.min()
    df = (
        pd.DataFrame(
            {
                "arrival_s": q - t0,
                "prompt_len": p.astype(np.int64),
                "output_len": o.astype(np.int64),
                "ttft_s": f - q,
                "tpot_s": np.where(o > 1, (last - f) / np.maximum(o - 1, 1), np.nan),
                "e2el_s": last - q,
            }
        )
        .sort_values("arrival_s", kind="stable")
        .reset_index(drop=True)
    )
    engine = {k: kw.get(k, sched.get(k)) for k in ENGINE_KEYS}
    engine["enable_chunked_prefill"] = sched.get("enable_chunked_prefill", kw.get("enable_chunked_prefill"))
    engine["enable_prefix_caching"] = cache.get("enable_prefix_caching", kw.get("enable_prefix_caching"))
    engine["block_size"] = cache.get("block_size")
    engine["gpu_memory_utilization"] = cache.get("gpu_memory_utilization", kw.get("gpu_memory_utilization"))
    engine["num_gpu_blocks_override"] = cache.get("num_gpu_blocks")
    par = resolved.get("parallel_config") or {}
    engine["all2all_backend"] = kw.get("all2all_backend", par.get("all2all_backend"))
    engine["enable_eplb"] = kw.get("enable_eplb", par.get("enable_eplb"))
    hw = meta.get("hardware") or {}
    return MeasuredRun(
        str(folder),
        str(meta.get("model") or kw.get("model") or ""),
        df,
        float(last.max() - t0),
        {k: v for k, v in engine.items() if v is not None},
        int(kw.get("tensor_parallel_size") or 1),
        int(kw.get("data_parallel_size") or 1),
        bool(kw.get("enable_expert_parallel")),
        None,
        str(hw.get("device_name") or ""),
        sched.get("async_scheduling"),
    )


def read_vllm_bench(path: Path) -> MeasuredRun:
    d = _json(path)
    need = ("start_times", "input_lens", "output_lens", "ttfts", "latencies")
    miss = [k for k in need if not isinstance(d.get(k), list)]
    require(
        not miss,
        f"{path}:{miss[0] if miss else ''}",
        None,
        "missing: save the result with `vllm bench serve --save-result --save-detailed`",
    )
    n = len(d["start_times"])
    bad = [k for k in need if len(d[k]) != n]
    require(
        not bad,
        f"{path}:{bad[0] if bad else ''}",
        len(d[bad[0]]) if bad else 0,
        f"must have {n} entries like start_times",
    )
    ok = np.array([not e for e in d.get("errors") or [""] * n])
    s, p, o = (np.asarray(d[k], dtype=float) for k in ("start_times", "input_lens", "output_lens"))
    ttft, lat = (np.asarray([np.nan if v is None else v for v in d[k]], dtype=float) for k in ("ttfts", "latencies"))
    ok &= np.isfinite(ttft) & np.isfinite(lat) & (o >= 1)
    require(ok.any(), f"{path}:errors", int((~ok).sum()), "no request succeeded")
    t0 = s[ok].min()
    df = (
        pd.DataFrame(
            {
                "arrival_s": s[ok] - t0,
                "prompt_len": p[ok].astype(np.int64),
                "output_len": o[ok].astype(np.int64),
                "ttft_s": ttft[ok],
                "tpot_s": np.where(o[ok] > 1, (lat[ok] - ttft[ok]) / np.maximum(o[ok] - 1, 1), np.nan),
                "e2el_s": lat[ok],
            }
        )
        .sort_values("arrival_s", kind="stable")
        .reset_index(drop=True)
    )
    itls = d.get("itls")
    parts = [np.asarray(x, dtype=float) for x, k in zip(itls or [], ok) if k and x]
    itl = np.concatenate(parts) if parts else None
    tp = int(d.get("tensor_parallel_size") or 1)
    return MeasuredRun(
        str(path),
        str(d.get("model_id") or ""),
        df,
        float(d.get("duration") or df.e2el_s.add(df.arrival_s).max()),
        {},
        tp,
        int(d.get("data_parallel_size") or 1),
        str(d.get("enable_expert_parallel", "")).lower() == "true",
        itl,
    )


def load_run(path) -> MeasuredRun:
    """A LLMServingSim run folder (meta.json + requests.jsonl) or a `vllm bench serve` result JSON."""
    p = Path(path)
    if p.is_dir():
        require((p / "requests.jsonl").is_file(), "run", str(p), "folder has no requests.jsonl (LLMServingSim run)")
        return read_llmservingsim(p)
    require(p.is_file(), "run", str(p), "no such file or folder")
    return read_vllm_bench(p)


def model_for(run: MeasuredRun) -> str:
    """The short name of the shipped model config whose ``_source`` is the run's model id."""
    for f in sorted(MODELS_DIR.glob("*.json")):
        if json.loads(f.read_text()).get("_source", "").lower() == run.model_id.lower():
            return f.stem
    raise InputError("model", run.model_id or None, "no shipped config for this model; give --model")


def hardware_for(run: MeasuredRun) -> str:
    name = run.device.lower()
    for key, profile in DEVICES.items():
        if key in name:
            return profile
    raise InputError("hardware", run.device or None, "the run does not name a known GPU; give --hardware")


def simulate(
    run: MeasuredRun,
    model: ModelSpec,
    hw: Hardware,
    flags: dict | None = None,
    fast_forward: bool = True,
    scale: float = 1.0,
):
    """The run's requests, at their measured arrival times, through vLLM's scheduler with the
    run's engine settings (``flags`` override them) on tp GPUs, dp replicas; ``scale``: every step
    that many times the cost model's price (experiments/model_error.py)."""
    engine = {**run.engine, **{k: v for k, v in (flags or {}).items() if v is not None}}
    if run.expert_parallel and model.is_moe:  # a dense model has no experts to split: vLLM ignores it
        engine.setdefault("enable_expert_parallel", True)
    if not model.is_moe or not engine.get("enable_expert_parallel"):
        engine = {k: v for k, v in engine.items() if k not in ("all2all_backend", "enable_eplb")}
    engine.setdefault("max_model_len", max(int((run.requests.prompt_len + run.requests.output_len).max()), 1))
    if run.async_scheduling is not None:
        engine.setdefault("async_scheduling", bool(run.async_scheduling))
    lockstep = run.dp > 1 and model.is_moe
    route = "vllm_dp" if lockstep else "least_outstanding" if run.dp > 1 else "round_robin"
    engines, router, max_len = build_cluster("vllm", model, hw, run.tp, engine, run.dp, route)
    r = run.requests
    wl = fixed_workload(r.arrival_s.to_numpy(), r.prompt_len.to_numpy(), r.output_len.to_numpy())
    return run_at_scale(
        engines, wl, scale, fast_forward=fast_forward, max_model_len=max_len, router=router if run.dp > 1 else None
    )


def _stat(v: np.ndarray, s: str) -> float:
    v = v[np.isfinite(v)]
    if not len(v):
        return float("nan")
    return float(v.mean() if s == "mean" else np.median(v) if s == "median" else np.percentile(v, int(s[1:])))


def compare(run: MeasuredRun, result) -> pd.DataFrame:
    """One row per figure: metric, measured, simulated, rel_error (simulated/measured − 1)."""
    sim, summ = result.requests, result.summary
    rows = []
    for m in LATENCIES:
        if m == "itl" and run.itl_s is None:
            continue
        for s in STATS:
            meas = _stat(run.itl_s if m == "itl" else run.requests[f"{m}_s"].to_numpy(float), s)
            simv = summ[f"{s}_itl_ms"] / 1e3 if m == "itl" else _stat(sim[f"{m}_s"].to_numpy(float), s)
            rows.append({"metric": f"{s}_{m}_ms", "measured": meas * 1e3, "simulated": simv * 1e3})
    out = int(run.requests.output_len.sum())
    rows += [
        {"metric": "duration_s", "measured": run.duration_s, "simulated": summ["duration"]},
        {
            "metric": "request_throughput",
            "measured": len(run.requests) / run.duration_s,
            "simulated": summ["request_throughput"],
        },
        {"metric": "output_throughput", "measured": out / run.duration_s, "simulated": summ["output_throughput"]},
    ]
    df = pd.DataFrame(rows)
    df["rel_error"] = df.simulated / df.measured - 1.0
    return df


def overall_error(table: pd.DataFrame) -> float:
    """Mean |relative error| over the printed figures."""
    return float(table.rel_error.abs().mean())


def validate(path, model: ModelSpec, hw: Hardware, flags: dict | None = None, run: MeasuredRun | None = None):
    """(figures table, overall error, simulation result, the measured run)."""
    run = run or load_run(path)
    result = simulate(run, model, hw, flags)
    rejected = int(result.requests.rejected.notna().sum())
    require(
        rejected == 0,
        "run",
        str(path),
        f"{rejected} requests were rejected in simulation "
        f"(first: {result.requests.rejected.dropna().iloc[0] if rejected else ''})",
    )
    table = compare(run, result)
    return table, overall_error(table), result, run


def figure_bands(
    run: MeasuredRun,
    model: ModelSpec,
    hw: Hardware,
    flags: dict | None = None,
    sigma_log: float | None = None,
    draws: int = 40,
    band: tuple = (5, 95),
    seed: int = 0,
) -> pd.DataFrame:
    """Each figure's band over ``draws`` runs, each with a factor on every step's time drawn from
    the profile's expected error (``sigma_log``, default its kind's: costmodel/expected_error.py)
    and the fit's parameters drawn from its covariance where it has one; ``inside``: whether the
    measured figure lies in the band."""
    profiles, scales = model_error.draws(hw, draws, np.random.default_rng(seed), sigma_log)
    sims = [
        compare(run, simulate(run, model, d, flags, scale=float(f))).simulated.to_numpy()
        for d, f in zip(profiles, scales)
    ]
    out = compare(run, simulate(run, model, hw, flags))[["metric", "measured", "simulated"]]
    lo, hi = np.percentile(np.array(sims), band, axis=0)
    out[f"p{band[0]}"], out[f"p{band[1]}"] = lo, hi
    out["inside"] = (out.measured >= lo) & (out.measured <= hi)
    return out


def cdf_plots(run: MeasuredRun, result, folder, title: str | None = None) -> dict:
    """One PNG per metric: the measured and the simulated CDF on one axis."""
    from matplotlib.figure import Figure

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for m in LATENCIES:
        if m == "itl":
            if run.itl_s is None:
                continue
            meas = np.sort(run.itl_s)
            qs = np.linspace(0.0005, 0.9995, 2000)
            sim = np.array([result.replicas[0].itl.quantile(q) for q in qs]) if len(result.replicas) == 1 else None
            if sim is None:
                from simcore.histogram import LogHistogram

                h = LogHistogram()
                for r in result.replicas:
                    h.merge(r.itl)
                sim = np.array([h.quantile(q) for q in qs])
            sim_x, sim_y = sim, qs
        else:
            meas = np.sort(run.requests[f"{m}_s"].dropna().to_numpy())
            sim_x = np.sort(result.requests[f"{m}_s"].dropna().to_numpy())
            sim_y = np.arange(1, len(sim_x) + 1) / max(len(sim_x), 1)
        fig = Figure(figsize=(6, 4))
        ax = fig.subplots()
        ax.plot(meas * 1e3, np.arange(1, len(meas) + 1) / max(len(meas), 1), label="measured", lw=1.5)
        ax.plot(np.asarray(sim_x) * 1e3, sim_y, label="simulated", lw=1.5, ls="--")
        ax.set_xlabel(f"{m.upper()} (ms)")
        ax.set_ylabel("fraction of requests" if m != "itl" else "fraction of token gaps")
        ax.grid(alpha=0.3)
        ax.legend()
        what = f"{m.upper()} CDF: measured vs simulated ({len(meas):,} measured {'gaps' if m == 'itl' else 'requests'})"
        ax.set_title(f"{what}\n{title}" if title else what, fontsize=9)
        fig.tight_layout()
        paths[m] = out / f"cdf_{m}.png"
        fig.savefig(paths[m], dpi=110)
    return paths
