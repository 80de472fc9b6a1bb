"""benchmarks/decode_steps.py: a run's wind-down steps timed from its requests' last tokens, and a
profile folder summed for one decode step, on synthetic runs and folders with known answers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from benchmarks.decode_steps import by_batch, exact_decode_steps, folder_step, gap_line


def write_run(tmp_path, remaining, step_of, start=100.0, seed=0):
    """A wind-down: len(remaining) requests decoding from ``start`` (their first tokens just before),
    request i needing remaining[i] more steps; a step of n running takes step_of(n) seconds. The
    files are LLMServingSim's (requests.jsonl, timeseries.csv). Returns the true (n, step) per step."""
    rng = np.random.default_rng(seed)
    left = np.array(remaining, dtype=int)
    done = np.zeros(len(left))
    t, true, ends = start, [], []
    while (left > 0).any():
        n = int((left > 0).sum())
        t += step_of(n)
        true.append((n, step_of(n)))
        ends.append((t, n))
        left[left > 0] -= 1
        done[(left == 0) & (done == 0)] = t
    first = start - rng.uniform(0.0, 1e-3, len(left))
    reqs = [
        {
            "request_id": f"r{i}",
            "input_toks": int(rng.integers(100, 2000)),
            "output_toks": int(remaining[i] + 1),
            "arrival_time": 0.0,
            "queued_ts": float(first[i] - rng.uniform(0.5, 3.0)),
            "scheduled_ts": float(first[i] - 0.4),
            "first_token_ts": float(first[i]),
            "last_token_ts": float(done[i]),
        }
        for i in range(len(left))
    ]
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in reqs) + "\n")
    t0 = min(r["queued_ts"] for r in reqs)
    secs = np.arange(1, int(t - t0) + 2, dtype=float)
    gen = [sum(n for te, n in ends if s - 1 < te - t0 <= s) for s in secs]
    run = [int(sum(1 for r in reqs if r["first_token_ts"] <= t0 + s < r["last_token_ts"])) for s in secs]
    pd.DataFrame(
        {"t": secs, "prompt_throughput": 0.0, "gen_throughput": gen, "running": run, "waiting": 0, "kv_cache_pct": 0.0}
    ).to_csv(tmp_path / "timeseries.csv", index=False)
    return true


@pytest.mark.parametrize(
    "a,b,nreq,most,seed", [(0.020, 2e-4, 60, 400, 0), (0.035, 8e-5, 128, 400, 1), (0.012, 5e-4, 40, 100, 2)]
)
def test_wind_down_steps_are_the_true_ones(tmp_path, a, b, nreq, most, seed):
    rng = np.random.default_rng(seed)
    remaining = rng.integers(1, most, nreq)
    step_of = lambda n: a + b * n
    true = dict(write_run(tmp_path, remaining, step_of, seed=seed))
    got = exact_decode_steps(tmp_path)
    assert len(got) >= 8
    assert set(got.n) <= set(true)
    np.testing.assert_allclose(got.step_s, [true[n] for n in got.n], rtol=1e-6)
    ga, gb = gap_line(got, np.zeros(len(got)))
    assert ga == pytest.approx(a, rel=1e-4) and gb == pytest.approx(b, rel=1e-3)


def test_a_step_in_the_batch_size_is_found_where_it_is(tmp_path):
    step_of = lambda n: 0.030 + (0.009 if n > 64 else 0.0) + 1e-4 * n
    write_run(tmp_path, np.random.default_rng(3).integers(1, 300, 128), step_of, seed=3)
    steps = exact_decode_steps(tmp_path)
    tab = by_batch(steps, {"smooth": 0.030 + 1e-4 * steps.n.to_numpy(float)})
    gap = tab.gap_smooth
    low = gap[[iv.right <= 64 for iv in gap.index]]
    high = gap[[iv.left >= 64 for iv in gap.index]]
    assert np.allclose(low, 0.0, atol=1e-9) and np.allclose(high, 0.009, atol=1e-9)


def write_folder(tmp_path, tp=2):
    d = tmp_path / f"tp{tp}"
    d.mkdir()
    tokens = [1, 2, 4, 8, 16, 32, 64, 128]
    ops = {
        "qkv_proj": (40.0, 0.1),
        "o_proj": (30.0, 0.05),
        "gate_up_proj": (180.0, 0.2),
        "down_proj": (90.0, 0.1),
        "layernorm": (2.0, 0.01),
        "act_fn": (2.5, 0.0),
        "final_layernorm": (2.2, 0.0),
        "embedding": (3.0, 0.0),
    }
    pd.DataFrame(
        [(op, t, c + s * t) for op, (c, s) in ops.items() for t in tokens], columns=["layer", "tokens", "time_us"]
    ).to_csv(d / "dense.csv", index=False)
    pd.DataFrame(
        [
            (op, n, c + s * n)
            for op, (c, s) in {"lm_head": (500.0, 0.5), "sampler": (10.0, 0.6)}.items()
            for n in tokens
        ],
        columns=["layer", "sequences", "time_us"],
    ).to_csv(d / "per_sequence.csv", index=False)
    kv = [16, 64, 256, 1024, 4096]
    att = [(0, 0, n, k, 5.0 + 0.01 * n * k) for n in [1, 2, 4, 8, 16, 32, 64, 128] for k in kv]
    att += [(512, 0, 0, 0, 99.0)]
    pd.DataFrame(att, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]).to_csv(
        d / "attention.csv", index=False
    )
    return ops


@pytest.mark.parametrize("n,kv,layers", [(16, 256, 64), (48, 1024, 32), (100, 700, 48)])
def test_folder_step_sums_the_folder(tmp_path, n, kv, layers):
    ops = write_folder(tmp_path)
    ctx = np.full(n, float(kv))
    per_layer = sum(c + s * n for op, (c, s) in ops.items() if op not in ("final_layernorm", "embedding"))
    per_layer += ops["layernorm"][0] + ops["layernorm"][1] * n
    grid = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    lo, hi = grid[grid <= n].max(), grid[grid >= n].min()
    kvs = np.log([16, 64, 256, 1024, 4096])

    def attn(m):
        return float(np.interp(np.log(kv), kvs, [5.0 + 0.01 * m * k for k in [16, 64, 256, 1024, 4096]]))

    a = attn(lo) if lo == hi else attn(lo) + (attn(hi) - attn(lo)) * (n - lo) / (hi - lo)
    want = layers * (per_layer + a) + 2.2 + 3.0 + 500 + 0.5 * n + 10 + 0.6 * n
    assert folder_step(tmp_path, 2, layers, ctx) == pytest.approx(want * 1e-6, rel=1e-12)
