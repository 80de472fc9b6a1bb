"""Sweep grid, recommendation and Pareto front; resume after a kill; errors recorded per point."""

import json

import numpy as np
import pandas as pd
import pytest

from costmodel.errors import InputError
from experiments.sweep import (
    SweepSpec,
    analytic_budget,
    load_records,
    mark_slo,
    pareto_mask,
    points,
    recommend,
    run_sweep,
)

SMALL = {
    "kind": "chat_with_long_prompts",
    "num_prompts": 80,
    "input_len": 256,
    "output_len": 64,
    "long_prompt_len": 8192,
    "long_every": 20,
}


def small_spec(**kw):
    grid = kw.pop(
        "grid",
        {
            "vllm": {"max_num_batched_tokens": [256, 1024, 4096]},
            "sglang": {"chunked_prefill_size": [1024], "enable_mixed_chunk": [False, True]},
        },
    )
    return SweepSpec(grid=grid, request_rates=kw.pop("request_rates", (4, 16)), workload=SMALL, **kw)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "results.jsonl"
    return run_sweep(small_spec(), path), path


def test_points_are_the_grid_with_stable_distinct_ids():
    pts = points(small_spec())
    assert len(pts) == (3 + 2) * 2
    assert len({p["point_id"] for p in pts}) == len(pts)
    assert [p["point_id"] for p in pts] == [p["point_id"] for p in points(small_spec())]
    assert {p["engine"] for p in pts} == {"vllm", "sglang", "sglang+enable_mixed_chunk"}
    assert points(small_spec(seed=1))[0]["point_id"] != pts[0]["point_id"]


def test_spec_rejects_unknown_knobs_and_policies():
    with pytest.raises(InputError, match="grid:vllm"):
        SweepSpec(grid={"vllm": {"chunked_prefill_size": [512]}})
    with pytest.raises(InputError, match="policy"):
        SweepSpec(grid={"trt": {}})


def test_table_is_one_row_per_point_with_config_and_metrics(full):
    df, _ = full
    assert len(df) == 10 and df.error.isna().all()
    assert {"p99_itl_ms", "output_throughput", "p99_ttft_ms", "request_rate", "max_num_batched_tokens"} <= set(df)
    assert (df.completed == SMALL["num_prompts"]).all()


def test_recommendation_is_the_best_point_meeting_the_slo(full):
    df, _ = full
    slo = float(np.median(df.p99_itl_ms))
    rec = recommend(df, slo, analytic_tokens=1536).set_index("engine")
    ok = df[mark_slo(df, slo)]
    for engine, row in rec.iterrows():
        mine = ok[ok.engine == engine]
        if len(mine) == 0:
            assert pd.isna(row.get("point_id"))
            continue
        best = df[df.point_id == row.point_id].iloc[0]
        assert best.p99_itl_ms <= slo
        assert best.output_throughput == mine.output_throughput.max()
    assert (rec.loc[["vllm", "sglang"], "analytic_budget_tokens"] == 1536).all()


def test_recommend_on_a_hand_built_table():
    df = pd.DataFrame(
        {
            "engine": ["vllm"] * 4,
            "policy": "vllm",
            "point_id": list("abcd"),
            "error": None,
            "num_rejected": 0,
            "request_rate": [1, 2, 3, 4],
            "max_num_batched_tokens": [512, 1024, 2048, 4096],
            "long_prefill_token_threshold": None,
            "p99_itl_ms": [30.0, 55.0, 61.0, 90.0],
            "p99_ttft_ms": [100.0, 5000.0, 100.0, 100.0],
            "output_throughput": [10.0, 30.0, 40.0, 50.0],
        }
    )
    assert recommend(df, 60).point_id.iloc[0] == "b"
    assert recommend(df, 60, ttft_slo_ms=1000).point_id.iloc[0] == "a"
    assert recommend(df, 10).meeting_slo.iloc[0] == 0 and "point_id" not in recommend(df, 10)
    with pytest.raises(InputError, match="percentile"):
        recommend(df, 60, percentile=95)


def test_pareto_front():
    df = pd.DataFrame({"output_throughput": [1.0, 2.0, 2.0, 3.0, 1.5], "p99_itl_ms": [10.0, 20.0, 30.0, 40.0, 25.0]})
    assert pareto_mask(df).tolist() == [True, True, False, True, False]


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    spec = small_spec(grid={"vllm": {"max_num_batched_tokens": [-5, 512]}}, request_rates=(8,))
    df = run_sweep(spec, tmp_path / "r.jsonl")
    assert df.error.iloc[0].startswith("InputError") and pd.isna(df.error.iloc[1])
    assert df.p99_itl_ms.iloc[1] > 0
    assert len(load_records(tmp_path / "r.jsonl")) == 2


def test_killed_then_resumed_sweep_gives_the_same_table(full, tmp_path):
    df, path = full
    lines = path.read_text().splitlines(keepends=True)
    partial = tmp_path / "results.jsonl"
    partial.write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])  # killed mid-write
    ran = []
    import experiments.sweep as sweep

    real = sweep.safe_run_point
    sweep.safe_run_point = lambda p: ran.append(p["point_id"]) or real(p)
    try:
        resumed = run_sweep(small_spec(), partial, resume=True)
    finally:
        sweep.safe_run_point = real
    assert len(ran) == len(df) - 4
    done_before = {json.loads(line)["point_id"] for line in lines[:4]}
    assert not done_before & set(ran)
    pd.testing.assert_frame_equal(resumed, df)
    assert len(load_records(partial)) == len(df)


def test_analytic_budget_is_the_seeds():
    assert analytic_budget("llama-3.1-8b", "h100", 1, 60.0) == 1536
