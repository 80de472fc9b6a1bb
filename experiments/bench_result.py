"""A run written as the benchmark clients write theirs: `vllm bench serve --save-result` and
`python -m sglang.bench_serving --output-file`.

vLLM (vllm/benchmarks/serve.py, ``calculate_metrics``, ``benchmark`` and ``main_async``): a
request that fails (here: one chunksim rejects) counts in ``failed`` with output 0; TPOT is over
outputs longer than one token; percentiles are ``np.percentile`` of the selected metrics, keyed
``p{N}_{metric}_ms`` with N written as an int when whole; ``max_output_tokens_per_s`` and
``max_concurrent_requests`` are the busiest one-second buckets from the first send; without
``--save-detailed`` the per-request lists are dropped except ``latencies`` and ``queue_times``
(vLLM keeps both). SGLang (sglang/benchmark/serving.py, ``calculate_metrics`` and
``benchmark``): p90/p95/p99 of e2e latency, TTFT, TPOT and ITL, ``concurrency`` = Σ e2e / duration,
one JSON line appended per run. Inter-token gaps come from the run's log-histogram (within
0.12 % of the exact sample), never from a list per token, unless detail is asked for.
"""

from __future__ import annotations

import math
import os
from datetime import datetime
from pathlib import Path

import numpy as np

from costmodel.errors import InputError, require

VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")
VLLM_DROPPED = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
SGLANG_PERCENTILES = (90, 95, 99)
FORMATS = ("vllm", "sglang")


def parse_percentile_metrics(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    for m in names:
        require(m in VLLM_METRICS, "--percentile-metrics", m, f"chunksim reports {', '.join(VLLM_METRICS)}")
    require(bool(names), "--percentile-metrics", text, "name at least one metric")
    return names


def parse_metric_percentiles(text: str) -> list[float]:
    out = []
    for p in text.split(","):
        try:
            v = float(p)
        except ValueError:
            raise InputError("--metric-percentiles", p, "must be a comma-separated list of numbers") from None
        require(0 <= v <= 100, "--metric-percentiles", p, "must be in [0, 100]")
        out.append(v)
    return out


def parse_metadata(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        require("=" in item, "--metadata", item, "must be KEY=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _errors(df) -> list[str]:
    return [e if isinstance(e, str) else "" for e in df.rejected.tolist()]


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _itl_values(hist):
    counts = hist.counts
    centers = np.minimum(hist._center(np.arange(len(counts))), hist.max)
    return counts, centers


def _itl_stats(hist, percentiles) -> dict:
    counts, centers = _itl_values(hist)
    n, mean = hist.count, hist.mean
    std = float(np.sqrt((counts * (centers - mean) ** 2).sum() / n)) if n else 0.0
    out = {"mean": mean * 1e3, "median": hist.quantile(0.5) * 1e3, "std": std * 1e3}
    out.update({p: hist.quantile(p / 100) * 1e3 for p in percentiles})
    return out


def _stats(values_s: np.ndarray, percentiles) -> dict:
    v = values_s if len(values_s) else np.zeros(1)
    out = {"mean": float(np.mean(v)) * 1e3, "median": float(np.median(v)) * 1e3, "std": float(np.std(v)) * 1e3}
    out.update({p: float(np.percentile(v, p)) * 1e3 for p in percentiles})
    return out


def run_itl_histogram(res):
    from simcore.histogram import LogHistogram

    h = LogHistogram()
    for r in res.replicas:
        h.merge(r.itl)
    return h


def _token_buckets(res, t0: float, seconds: int) -> np.ndarray:
    """Tokens sampled per one-second bucket from t0, replayed from the iteration log."""
    from .iterlog import replay

    tokens = np.zeros(seconds)
    cms = [r.cm for r in res.replicas]
    for e in replay(res.iterations, cms):
        k = sum(e.sampled)
        if k:
            b = (e.ends - t0).astype(np.int64)
            b = b[(b >= 0) & (b < seconds)]
            np.add.at(tokens, b, k)
    return tokens


def _peaks(res, done) -> tuple[float | None, int]:
    if not len(done):
        return 0.0, 0
    t0 = float(done.arrival_s.min())
    seconds = int(np.ceil(float(done.finish_s.max()) - t0)) + 1
    require(seconds <= 50_000_000, "duration", seconds, "too long to bucket per second")
    conc = np.zeros(seconds + 1)
    start = (done.arrival_s.to_numpy() - t0).astype(np.int64)
    end = (done.finish_s.to_numpy() - t0).astype(np.int64)
    np.add.at(conc, start, 1)
    np.add.at(conc, end + 1, -1)
    max_conc = int(np.cumsum(conc)[:seconds].max())
    if res.iterations is None:
        return None, max_conc
    return float(_token_buckets(res, t0, seconds).max()), max_conc


def per_request_itls(res) -> list[list[float]]:
    from .iterlog import token_times

    df = res.requests
    times = token_times(res.iterations, df.rid.tolist(), [r.cm for r in res.replicas])
    return [np.diff(times[rid]).tolist() for rid in df.rid.tolist()]


def vllm_result(
    res, run: dict, percentile_metrics: list[str], percentiles: list[float], detailed: bool, goodput: dict | None
) -> dict:
    """``run``: date, backend, label, model_id, num_prompts, request_rate, burstiness, max_concurrency,
    metadata, ramp (None or (strategy, start, end)), planned_arrival_s, config."""
    df = res.requests
    ok = df.finish_s.notna().to_numpy()
    done = df[ok]
    duration = float(res.summary["duration"])
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out_lens = np.where(ok, df.num_output_tokens.to_numpy(), 0)
    total_in, total_out = int(done.prompt_len.sum()), int(out_lens.sum())
    max_tok, max_conc = _peaks(res, done)
    planned = np.asarray(run["planned_arrival_s"], dtype=float)
    queue = (df.arrival_s.to_numpy() - planned[df.rid.to_numpy()])[ok] if run["max_concurrency"] else np.zeros(ok.sum())
    head = {
        "date": run["date"],
        "endpoint_type": run["backend"],
        "backend": run["backend"],
        "label": run["label"],
        "model_id": run["model_id"],
        "tokenizer_id": run["model_id"],
        "num_prompts": run["num_prompts"],
        **run["metadata"],
        "request_rate": run["request_rate"] if math.isfinite(run["request_rate"]) else "inf",
        "burstiness": run["burstiness"],
        "max_concurrency": run["max_concurrency"],
    }
    if run["ramp"]:
        head.update(zip(("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"), run["ramp"]))
    r = {
        "duration": duration,
        "completed": int(ok.sum()),
        "failed": int((~ok).sum()),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(int(ok.sum())),
        "request_goodput": per_s(int(_good(done, goodput).sum())) if goodput else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "input_lens": df.prompt_len.tolist(),
        "output_lens": out_lens.tolist(),
        "ttfts": df.ttft_s.fillna(0.0).tolist(),
        "itls": per_request_itls(res) if detailed else None,
        "latencies": df.e2el_s.fillna(0.0).tolist(),
        "start_times": df.arrival_s.tolist(),
        "queue_times": queue.tolist(),
        "generated_texts": [""] * len(df),
        "errors": _errors(df),
        "max_output_tokens_per_s": max_tok,
        "max_concurrent_requests": max_conc,
        "rtfx": 0.0,
    }
    if run["ramp"]:
        r["rps_change_events"] = _rps_events(*run["ramp"], run["num_prompts"], run["date"])
    r.update(percentile_keys(res, percentile_metrics, percentiles))
    result = {**head, **r, "chunksim": run["config"]}
    if not detailed:
        for k in VLLM_DROPPED:
            result.pop(k, None)
    return result


def percentile_keys(res, metrics: list[str], percentiles: list[float]) -> dict:
    """mean/median/std/p{N} of each selected metric, in ms, as vLLM's ``process_one_metric`` names them."""
    done = res.requests[res.requests.finish_s.notna()]
    values = {"ttft": done.ttft_s.to_numpy(), "tpot": done.tpot_s.dropna().to_numpy(), "e2el": done.e2el_s.to_numpy()}
    out = {}
    for m in VLLM_METRICS:
        if m not in metrics:
            continue
        st = _itl_stats(run_itl_histogram(res), percentiles) if m == "itl" else _stats(values[m], percentiles)
        out.update({f"mean_{m}_ms": st["mean"], f"median_{m}_ms": st["median"], f"std_{m}_ms": st["std"]})
        out.update({f"p{_p_word(p)}_{m}_ms": st[p] for p in percentiles})
    return out


def _good(done, slos_ms: dict) -> np.ndarray:
    """vLLM's goodput: TPOT counts as 0 for one-token outputs."""
    ok = np.ones(len(done), dtype=bool)
    for key, ms in slos_ms.items():
        ok &= done[f"{key}_s"].fillna(0.0).to_numpy() <= ms / 1e3
    return ok


def _rps_events(strategy, start, end, n, date) -> list[dict]:
    from workloads.arrivals import ramp_rates

    events, last = [{"rps": int(start), "timestamp": date}], int(start)
    for rate in ramp_rates(strategy, start, end, n):
        cur = int(rate)
        events += [{"rps": v, "timestamp": date} for v in range(last + 1, cur + 1)]
        last = max(last, cur)
    return events


def sglang_result(res, run: dict, detailed: bool) -> dict:
    """``run`` as for vllm_result, plus dataset_name, sharegpt_output_len, random_input_len,
    random_output_len, random_range_ratio, tag."""
    df = res.requests
    ok = df.finish_s.notna().to_numpy()
    done = df[ok]
    duration = float(res.summary["duration"])
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    total_in, total_out = int(done.prompt_len.sum()), int(done.num_output_tokens.sum())
    max_tok, max_conc = _peaks(res, done)
    out = {
        "tag": run.get("tag"),
        "backend": run["backend"],
        "dataset_name": run["dataset_name"],
        "request_rate": run["request_rate"],
        "max_concurrency": run["max_concurrency"],
        "sharegpt_output_len": run["sharegpt_output_len"],
        "random_input_len": run["random_input_len"],
        "random_output_len": run["random_output_len"],
        "random_range_ratio": run["random_range_ratio"],
        "server_info": run["config"],
        "duration": duration,
        "completed": int(ok.sum()),
        "total_input_tokens": total_in,
        "total_input_text_tokens": total_in,
        "total_input_vision_tokens": 0,
        "total_output_tokens": total_out,
        "total_output_tokens_retokenized": total_out,
        "request_throughput": per_s(int(ok.sum())),
        "input_throughput": per_s(total_in),
        "output_throughput": per_s(total_out),
        "total_throughput": per_s(total_in + total_out),
    }
    values = {
        "e2e_latency": done.e2el_s.to_numpy(),
        "ttft": done.ttft_s.to_numpy(),
        "tpot": done.tpot_s.dropna().to_numpy(),
    }
    for m in ("e2e_latency", "ttft", "tpot", "itl"):
        st = (
            _itl_stats(run_itl_histogram(res), SGLANG_PERCENTILES)
            if m == "itl"
            else _stats(values[m], SGLANG_PERCENTILES)
        )
        out.update({f"mean_{m}_ms": st["mean"], f"median_{m}_ms": st["median"], f"std_{m}_ms": st["std"]})
        out.update({f"p{p}_{m}_ms": st[p] for p in SGLANG_PERCENTILES})
    out.update(
        {
            "concurrency": per_s(float(done.e2el_s.sum())),
            "accept_length": None,
            "max_output_tokens_per_s": max_tok,
            "max_concurrent_requests": max_conc,
        }
    )
    if detailed:
        out.update(
            {
                "input_lens": df.prompt_len.tolist(),
                "output_lens": np.where(ok, df.num_output_tokens.to_numpy(), 0).tolist(),
                "ttfts": df.ttft_s.fillna(0.0).tolist(),
                "itls": per_request_itls(res),
                "generated_texts": [""] * len(df),
                "errors": _errors(df),
            }
        )
    return out


def result_path(fmt: str, result_dir: str | None, result_filename: str | None, run: dict) -> Path:
    """vLLM's ``compute_result_filename`` (``{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json``)
    or SGLang's default (``{backend}_{MMDD}_{num_prompts}_{in}_{out}.jsonl`` for random datasets)."""
    if result_filename:
        name = result_filename
    elif fmt == "sglang":
        day = run["date"][4:8]
        tail = (
            f"{run['random_input_len']}_{run['random_output_len']}"
            if run["dataset_name"].startswith("random")
            else run["dataset_name"]
        )
        name = f"{run['backend']}_{day}_{run['num_prompts']}_{tail}.jsonl"
    else:
        conc = f"-concurrency{run['max_concurrency']}" if run["max_concurrency"] is not None else ""
        model = run["model_id"].split("/")[-1]
        if run["ramp"]:
            s, a, b = run["ramp"]
            name = f"{run['label']}-ramp-up-{s}-{a}qps-{b}qps{conc}-{model}-{run['date']}.json"
        else:
            name = f"{run['label']}-{run['request_rate']}qps{conc}-{model}-{run['date']}.json"
    return Path(result_dir) / name if result_dir else Path(name)


def now_stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def writable_file(path: Path, field: str) -> None:
    """Refuse, before any simulation, a file path that is a folder or whose folder cannot be made or written."""
    path = Path(path)
    require(not path.is_dir(), field, str(path), "is a folder; give a file path")
    writable_dir(path.parent if str(path.parent) else Path("."), field)


def writable_dir(path: Path, field: str) -> None:
    """Make the folder now (it would be made after the run anyway) and check it can be written."""
    p = Path(path)
    require(not p.exists() or p.is_dir(), field, str(p), "exists and is not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(field, str(p), f"cannot make the folder ({e.strerror})") from None
    require(os.access(p, os.W_OK | os.X_OK), field, str(p), "is not writable")
