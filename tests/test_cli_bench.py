"""`vllm bench serve` / `sglang.bench_serving` flags and result files, checked against the clients'
own key lists (tests/data, with their source) and against the per-request table recomputed here."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import run_cli

DATA = Path(__file__).parent / "data"
VLLM_KEYS = json.loads((DATA / "vllm_bench_serve_result_keys.json").read_text())
SGLANG_KEYS = json.loads((DATA / "sglang_bench_serving_result_keys.json").read_text())
ISSUE_CMD = [
    "simulate",
    "--dataset-name",
    "random",
    "--random-input-len",
    "1024",
    "--random-output-len",
    "128",
    "--random-range-ratio",
    "0.5",
    "--request-rate",
    "5",
    "--num-prompts",
    "300",
    "--save-result",
]


def _one_file(d: Path) -> dict:
    files = list(d.iterdir())
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


@pytest.fixture(scope="module")
def issue_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("issue")
    rc, out, err = run_cli(ISSUE_CMD + ["--result-dir", d / "D", "--out", d / "run", "--quiet"])
    assert rc == 0, err
    return _one_file(d / "D"), pd.read_csv(d / "run" / "requests.csv"), d


def test_issue_command_keys_match_vllm(issue_run):
    result, _, d = issue_run
    assert set(result) - {"chunksim"} == set(VLLM_KEYS["keys"])
    name = next((d / "D").iterdir()).name
    assert re.fullmatch(r"chunksim-vllm-5\.0qps-Llama-3\.1-8B-\d{8}-\d{6}\.json", name), name


def test_issue_command_semantics(issue_run):
    r, df, _ = issue_run
    assert r["num_prompts"] == 300 and r["completed"] + r["failed"] == 300 and r["failed"] == 0
    assert r["request_rate"] == 5.0 and r["burstiness"] == 1.0 and r["max_concurrency"] is None
    assert df.prompt_len.between(512, 1536).all() and df.output_len.between(64, 192).all()
    assert df.prompt_len.nunique() > 100
    assert r["total_input_tokens"] == df.prompt_len.sum()
    assert r["total_output_tokens"] == df.num_output_tokens.sum()
    assert r["request_throughput"] == pytest.approx(r["completed"] / r["duration"])
    assert r["p99_ttft_ms"] == pytest.approx(np.percentile(df.ttft_s * 1e3, 99))
    assert r["std_tpot_ms"] == pytest.approx(np.std(df.tpot_s.dropna() * 1e3))
    assert r["median_itl_ms"] > 0 and r["request_goodput"] is None and r["rtfx"] == 0.0
    assert r["latencies"] == pytest.approx(df.e2el_s.tolist()) and r["queue_times"] == [0.0] * 300
    start, end = df.arrival_s - df.arrival_s.min(), df.finish_s - df.arrival_s.min()
    per_second = np.zeros(int(np.ceil(end.max())) + 1)
    for a, b in zip(start.astype(int), end.astype(int)):
        per_second[a : b + 1] += 1
    assert r["max_concurrent_requests"] == per_second.max()
    assert r["chunksim"]["engine_config"]["max_num_batched_tokens"]["value"] == 8192


def test_detailed_lists_and_peak_tokens(tmp_path):
    argv = [
        "simulate",
        "--random-input-len",
        "256",
        "--random-output-len",
        "32",
        "--random-range-ratio",
        "0.3",
        "--request-rate",
        "20",
        "--num-prompts",
        "120",
        "--save-result",
        "--save-detailed",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99.9",
        "--result-dir",
        tmp_path,
        "--quiet",
    ]
    assert run_cli(argv)[0] == 0
    r = _one_file(tmp_path)
    assert set(r) - {"chunksim"} == (
        set(VLLM_KEYS["keys"])
        | set(VLLM_KEYS["detailed_keys"])
        | {
            "p50_ttft_ms",
            "p99.9_ttft_ms",
            "p50_tpot_ms",
            "p99.9_tpot_ms",
            "p50_itl_ms",
            "p99.9_itl_ms",
            "mean_e2el_ms",
            "median_e2el_ms",
            "std_e2el_ms",
            "p50_e2el_ms",
            "p99.9_e2el_ms",
        }
    ) - {"p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms"}
    assert [len(i) for i in r["itls"]] == [n - 1 for n in r["output_lens"]]
    gaps = np.concatenate([np.asarray(i) for i in r["itls"]])
    assert r["p50_itl_ms"] == pytest.approx(np.percentile(gaps, 50) * 1e3, rel=3e-3)
    assert r["mean_itl_ms"] == pytest.approx(gaps.mean() * 1e3, rel=1e-9)
    t0 = min(r["start_times"])
    tokens = np.zeros(int(np.ceil(max(s + l for s, l in zip(r["start_times"], r["latencies"])) - t0)) + 1)
    for s, ttft, itl in zip(r["start_times"], r["ttfts"], r["itls"]):
        for t in s + ttft + np.r_[0.0, np.cumsum(itl)]:
            tokens[int(t - t0)] += 1
    assert r["max_output_tokens_per_s"] == tokens.max()


def test_failed_requests_and_goodput(tmp_path):
    argv = [
        "simulate",
        "--random-input-len",
        "1024",
        "--random-range-ratio",
        "0.5",
        "--num-prompts",
        "50",
        "--request-rate",
        "10",
        "--max-model-len",
        "1100",
        "--goodput",
        "ttft:1000",
        "--save-result",
        "--save-detailed",
        "--result-filename",
        "r.json",
        "--result-dir",
        tmp_path,
        "--out",
        tmp_path / "run",
        "--quiet",
    ]
    assert run_cli(argv)[0] == 0
    r = json.loads((tmp_path / "r.json").read_text())
    df = pd.read_csv(tmp_path / "run" / "requests.csv")
    failed = [i for i, e in enumerate(r["errors"]) if e]
    assert r["failed"] == len(failed) > 0 and r["completed"] + r["failed"] == 50
    too_long = (df.prompt_len + df.output_len > 1100).to_numpy()
    assert np.flatnonzero(too_long).tolist() == failed
    assert all(r["output_lens"][i] == 0 for i in failed)
    assert 0 < r["request_goodput"] <= r["request_throughput"]


def test_closed_loop_queue_times(tmp_path):
    argv = [
        "simulate",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--num-prompts",
        "100",
        "--request-rate",
        "100",
        "--max-concurrency",
        "4",
        "--save-result",
        "--result-dir",
        tmp_path,
        "--quiet",
    ]
    assert run_cli(argv)[0] == 0
    r = _one_file(tmp_path)
    assert r["max_concurrency"] == 4 and min(r["queue_times"]) >= 0 and max(r["queue_times"]) > 0
    assert "-concurrency4-" in next(tmp_path.iterdir()).name


def test_ramp_up(tmp_path):
    argv = [
        "simulate",
        "--ramp-up-strategy",
        "linear",
        "--ramp-up-start-rps",
        "1",
        "--ramp-up-end-rps",
        "4",
        "--num-prompts",
        "60",
        "--input-len",
        "128",
        "--output-len",
        "8",
        "--save-result",
        "--result-dir",
        tmp_path,
        "--out",
        tmp_path / "run",
        "--quiet",
    ]
    assert run_cli(argv)[0] == 0
    r = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert (r["ramp_up_strategy"], r["ramp_up_start_rps"], r["ramp_up_end_rps"]) == ("linear", 1.0, 4.0)
    assert [e["rps"] for e in r["rps_change_events"]] == [1, 2, 3, 4]
    assert "ramp-up-linear-1.0qps-4.0qps" in next(tmp_path.glob("*.json")).name
    gaps = np.diff(pd.read_csv(tmp_path / "run" / "requests.csv").arrival_s)
    assert gaps[:20].mean() > gaps[-20:].mean()


def test_sglang_format(tmp_path):
    argv = [
        "simulate",
        "--policy",
        "sglang",
        "--random-input-len",
        "512",
        "--random-output-len",
        "32",
        "--num-prompts",
        "80",
        "--request-rate",
        "8",
        "--save-result",
        "--result-format",
        "sglang",
        "--result-dir",
        tmp_path,
        "--out",
        tmp_path / "run",
        "--quiet",
    ]
    assert run_cli(argv)[0] == 0 and run_cli(argv)[0] == 0
    path = next(tmp_path.glob("*.jsonl"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    r = json.loads(lines[0])
    assert set(r) == set(SGLANG_KEYS["keys"])
    df = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert r["concurrency"] == pytest.approx(df.e2el_s.sum() / r["duration"])
    assert r["p95_e2e_latency_ms"] == pytest.approx(np.percentile(df.e2el_s * 1e3, 95))
    assert r["total_throughput"] == pytest.approx((r["total_input_tokens"] + r["total_output_tokens"]) / r["duration"])
    assert r["server_info"]["policy"] == "sglang" and r["random_input_len"] == 512
    assert re.fullmatch(r"chunksim-sglang_\d{4}_80_512_32\.jsonl", path.name)


def test_datasets(tmp_path):
    table = Path(__file__).resolve().parents[1] / "workloads" / "fixtures" / "sharegpt_first_turns_llama3.csv"
    rows = pd.read_csv(table)
    assert (
        run_cli(
            [
                "simulate",
                "--dataset-name",
                "sharegpt",
                "--num-prompts",
                "60",
                "--request-rate",
                "20",
                "--out",
                tmp_path / "a",
                "--quiet",
            ]
        )[0]
        == 0
    )
    a = pd.read_csv(tmp_path / "a" / "requests.csv")
    assert set(zip(a.prompt_len, a.output_len)) <= set(zip(rows.prompt_len, rows.output_len))
    assert a.prompt_len.max() <= 1024 and (a.prompt_len + a.output_len).max() <= 2048
    assert (
        run_cli(
            [
                "simulate",
                "--dataset-name",
                "sharegpt",
                "--sharegpt-output-len",
                "7",
                "--num-prompts",
                "30",
                "--out",
                tmp_path / "b",
                "--quiet",
            ]
        )[0]
        == 0
    )
    assert (pd.read_csv(tmp_path / "b" / "requests.csv").output_len == 7).all()
    rc, out, _ = run_cli(
        [
            "simulate",
            "--dataset-name",
            "prefix_repetition",
            "--prefix-repetition-num-prefixes",
            "3",
            "--num-prompts",
            "31",
            "--request-rate",
            "2",
            "--json",
            "--out",
            tmp_path / "c",
        ]
    )
    c = pd.read_csv(tmp_path / "c" / "requests.csv")
    assert rc == 0 and len(c) == 30 and (c.prompt_len == 512).all() and (c.output_len == 128).all()
    assert json.loads(out)["prefix_cache_hit_rate"] > 0.3


def test_aliases_give_the_same_run():
    a = run_cli(
        [
            "simulate",
            "--input-len",
            "300",
            "--output-len",
            "20",
            "--num-prompts",
            "50",
            "--request-rate",
            "10",
            "--json",
        ]
    )
    b = run_cli(
        [
            "simulate",
            "--random-input-len",
            "300",
            "--random-output-len",
            "20",
            "--num-prompts",
            "50",
            "--request-rate",
            "10",
            "--json",
        ]
    )
    assert a[0] == b[0] == 0 and json.loads(a[1]) == json.loads(b[1])


def test_percentile_keys_follow_vllm_naming():
    from experiments.bench_result import _p_word

    assert [_p_word(p) for p in (99.0, 99.9, 50.0, 0.5)] == ["99", "99.9", "50", "0.5"]
    assert not math.isnan(float(_p_word(12.25)))


def test_percentile_flags_in_the_printed_summary(tmp_path):
    rc, out, _ = run_cli(
        [
            "simulate",
            "--num-prompts",
            "80",
            "--request-rate",
            "10",
            "--random-range-ratio",
            "0.4",
            "--percentile-metrics",
            "ttft,e2el",
            "--metric-percentiles",
            "90,99.5",
            "--json",
            "--out",
            tmp_path,
        ]
    )
    s = json.loads(out)
    df = pd.read_csv(tmp_path / "requests.csv")
    assert rc == 0
    assert s["p90_ttft_ms"] == pytest.approx(np.percentile(df.ttft_s * 1e3, 90))
    assert s["p99.5_e2el_ms"] == pytest.approx(np.percentile(df.e2el_s * 1e3, 99.5))
    assert s["std_e2el_ms"] == pytest.approx(np.std(df.e2el_s * 1e3))


def test_sweep_writes_vllm_results_per_point(tmp_path):
    argv = [
        "sweep",
        "--itl-slo-ms",
        "100",
        "--policies",
        "vllm",
        "--max-num-batched-tokens",
        "512",
        "2048",
        "--request-rates",
        "5",
        "--dataset-name",
        "random",
        "--random-input-len",
        "256",
        "--num-prompts",
        "40",
        "--save-result",
        "--no-progress",
        "--no-plots",
        "--out",
        tmp_path,
        "--json",
    ]
    rc, out, err = run_cli(argv)
    assert rc == 0, err
    files = sorted(tmp_path.glob("vllm-5.0qps-*.json"))
    assert len(files) == 2
    for f in files:
        assert set(json.loads(f.read_text())) - {"chunksim"} == set(VLLM_KEYS["keys"])
    df = pd.read_csv(tmp_path / "sweep.csv")
    assert sorted(df.result_file) == [str(f) for f in files] and df.std_ttft_ms.notna().all()
    rc, _, _ = run_cli(argv[:-1] + ["--percentile-metrics", "e2el", "--metric-percentiles", "50"])
    assert "p50_e2el_ms" in pd.read_csv(tmp_path / "sweep.csv")
