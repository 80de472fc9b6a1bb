"""A measured serving run's decode step durations by batch size, against a profile folder's own
timings and the model (bench_validate.py prints them): where, in batch size, a step's time goes
missing.

After a run's last first token no prefill runs, so every step is a decode of the running requests,
and each distinct ``last_token_ts`` (the engine core's clock, taken when the step's outputs are
made: vLLM's ``IterationStats.update_from_output`` stores ``engine_core_timestamp``) closes a step.
Between two consecutive such times the running count n is known exactly and k steps ran; k is the
gap over the timeseries' step estimate for that second (running / generated tokens per second),
rounded, from seconds wholly inside the wind-down only (the first and last are partial). Gaps of up
to ``MAX_STEPS`` steps within ``SLACK`` of a whole number of steps give the step's duration to the
engine clock's resolution, where the timeseries alone is quantised to one step a second (2-5 %).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

MAX_STEPS = 3
SLACK = 0.2


def exact_decode_steps(run_dir: Path) -> pd.DataFrame:
    """Columns n (running), step_s, k (steps in the gap), ctx_mean, and ctx (each running request's
    context then, from its own first/last token times): one row per usable gap."""
    run_dir = Path(run_dir)
    reqs = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    ts = pd.read_csv(run_dir / "timeseries.csv")
    t0 = min(r["queued_ts"] for r in reqs)
    first = np.array([r["first_token_ts"] for r in reqs])
    last = np.array([r["last_token_ts"] for r in reqs])
    inp = np.array([r["input_toks"] for r in reqs])
    out = np.array([r["output_toks"] for r in reqs])
    ends = np.unique(last[last > first.max()])
    sec_t, sec_gen = ts.t.to_numpy(float), ts.gen_throughput.to_numpy(float)

    def running(at: float) -> int:
        return int(((first <= at) & (last > at)).sum())

    rows = []
    start, stop = first.max() - t0, ends[-1] - t0 if len(ends) else 0.0
    for a, b in zip(ends[:-1], ends[1:]):
        i = int(np.abs(sec_t - 0.5 - ((a + b) / 2 - t0)).argmin())
        if sec_gen[i] <= 0 or sec_t[i] - 1 < start or sec_t[i] > stop:
            continue
        prior = (running(t0 + sec_t[i] - 1) + running(t0 + sec_t[i])) / 2 / sec_gen[i]
        k = max(1, round((b - a) / prior))
        if k > MAX_STEPS or abs((b - a) / prior - k) > SLACK:
            continue
        act = (first <= a) & (last > a)
        ctx = inp[act] + 1 + ((a - first[act]) / np.maximum(last[act] - first[act], 1e-9) * (out[act] - 1)).astype(int)
        rows.append((int(act.sum()), (b - a) / k, k, float(ctx.mean()), ctx))
    return pd.DataFrame(rows, columns=["n", "step_s", "k", "ctx_mean", "ctx"])


def folder_step(folder: Path, tp: int, layers: int, ctx: np.ndarray) -> float:
    """Seconds: the profile folder's own timings summed for one decode step of len(ctx) sequences
    (LLMServingSim's layout: every dense.csv operator per layer x layers, layernorm twice, the
    final norm and embedding once, per_sequence.csv's lm_head and sampler, attention.csv's pure
    decode rows at the mean context), each interpolated linearly in the batch as its simulator does."""
    d = Path(folder) / f"tp{tp}"
    dense, per_seq, att = (pd.read_csv(d / f) for f in ("dense.csv", "per_sequence.csv", "attention.csv"))
    n = len(ctx)

    def at(df: pd.DataFrame, key: str, x: float) -> float:
        df = df.sort_values(key)
        return float(np.interp(x, df[key], df.time_us))

    per = {name: at(g, "tokens", n) for name, g in dense.groupby("layer")}
    layer = sum(v for k, v in per.items() if k not in ("final_layernorm", "embedding")) + per.get("layernorm", 0.0)
    step = layers * layer + per.get("final_layernorm", 0.0) + per.get("embedding", 0.0)
    step += sum(at(g, "sequences", n) for _, g in per_seq.groupby("layer"))
    dec = att[att.prefill_chunk == 0]
    grid = np.sort(dec.n_decode.unique())

    def attn(m: int) -> float:
        g = dec[dec.n_decode == m].sort_values("kv_decode")
        return float(np.interp(np.log(ctx.mean()), np.log(g.kv_decode), g.time_us))

    lo, hi = grid[grid <= n].max(), grid[grid >= n].min()
    a = attn(lo) if lo == hi else attn(lo) + (attn(hi) - attn(lo)) * (n - lo) / (hi - lo)
    return (step + layers * a) * 1e-6


BANDS = (0, 2, 8, 16, 32, 48, 64, 80, 96, 112, 128, 256)


def by_batch(steps: pd.DataFrame, priced: dict[str, np.ndarray]) -> pd.DataFrame:
    """Mean measured step and each priced column (seconds, one value per row of ``steps``) by
    batch-size band, with the measured minus each price."""
    df = steps[["n", "step_s"]].assign(**priced)
    df["band"] = pd.cut(df.n, BANDS)
    g = df.groupby("band", observed=True)
    out = g.mean(numeric_only=True).assign(count=g.size())
    for name in priced:
        out[f"gap_{name}"] = out.step_s - out[name]
    return out


def gap_line(steps: pd.DataFrame, price: np.ndarray) -> tuple[float, float]:
    """(a, b): least-squares measured - price = a + b·n over the gaps, seconds and seconds a sequence."""
    x = np.c_[np.ones(len(steps)), steps.n.to_numpy(float)]
    a, b = np.linalg.lstsq(x, steps.step_s.to_numpy() - price, rcond=None)[0]
    return float(a), float(b)
