"""Local processes and a Dask LocalCluster give the table an inline sweep gives; the CLI verb."""

import json

import pandas as pd
import pytest
from test_sweep import small_spec

from experiments.cli import main
from experiments.executors import executor_for
from experiments.sweep import run_sweep


@pytest.fixture(scope="module")
def inline():
    return run_sweep(small_spec(request_rates=(8,)))


def test_process_pool_matches_inline(inline, tmp_path):
    with executor_for("local", 2) as ex:
        pd.testing.assert_frame_equal(run_sweep(small_spec(request_rates=(8,)), tmp_path / "r.jsonl", ex), inline)


def test_dask_local_cluster_matches_inline(inline, tmp_path):
    pytest.importorskip("distributed")
    with executor_for("dask", 2) as ex:
        pd.testing.assert_frame_equal(run_sweep(small_spec(request_rates=(8,)), tmp_path / "r.jsonl", ex), inline)


def test_sweep_verb_writes_table_recommendation_and_plots(tmp_path, capsys):
    args = [
        "sweep",
        "--policies",
        "vllm",
        "sglang",
        "--max-num-batched-tokens",
        "512",
        "2048",
        "--chunked-prefill-size",
        "1024",
        "--request-rates",
        "4",
        "12",
        "--num-prompts",
        "60",
        "--input-len",
        "256",
        "--output-len",
        "64",
        "--long-prompt-len",
        "8192",
        "--long-every",
        "20",
        "--itl-slo-ms",
        "60",
        "--ttft-slo-ms",
        "3000",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["points"] == 8 and not out["errors"]
    assert {r["engine"] for r in out["recommendation"]} == {"vllm", "sglang", "sglang+enable_mixed_chunk"}
    for key in ("table", "csv", "recommendation", "itl_vs_throughput", "ttft_vs_rate"):
        assert (tmp_path / out["files"][key].split("/")[-1]).stat().st_size > 0
    assert len(pd.read_parquet(tmp_path / "sweep.parquet")) == 8
    assert main(args + ["--resume"]) == 0


def test_sweep_verb_bad_input_is_one_line_and_exit_2(capsys):
    assert main(["sweep", "--policies", "vllm"]) == 2
    assert "itl-slo-ms" in capsys.readouterr().err
    assert main(["sweep", "--itl-slo-ms", "60", "--resume"]) == 2
