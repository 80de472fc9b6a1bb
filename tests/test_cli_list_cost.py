"""chunksim list; simulate --time-scale / --target-rate on traces; sweep axes (hardware, tp,
replicas, router); --gpu-hourly-price and cost per million tokens; Hugging Face ids for --model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli

from experiments.pricing import DEFAULT_GPU_HOURLY_USD, cost_per_million

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "workloads" / "fixtures" / "mooncake_conv_30.jsonl"


@pytest.mark.parametrize(
    "what,must",
    [
        ("models", {"llama-3.1-8b", "qwen3-8b"}),
        ("hardware", {"h100", "b200"}),
        ("routers", {"round_robin", "least_kv"}),
        ("datasets", {"random", "sharegpt", "mooncake"}),
    ],
)
def test_list(what, must):
    rc, out, err = run_cli(["list", what, "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert must <= {r["name"] for r in rows}
    rc, text, _ = run_cli(["list", what])
    assert rc == 0 and all(m in text for m in must)


def test_list_shows_every_shipped_file_and_its_price_source():
    rows = {r["name"]: r for r in json.loads(run_cli(["list", "hardware", "--json"])[1])}
    assert set(rows) == {p.stem for p in (ROOT / "costmodel" / "hardware").glob("*.yaml")}
    for name, r in rows.items():
        if name in DEFAULT_GPU_HOURLY_USD:
            assert r["usd_per_gpu_hour"] > 0 and "lambda.ai" in r["price_source"]
        else:
            assert r["usd_per_gpu_hour"] is None and "--gpu-hourly-price" in r["price_source"]
    models = {r["name"]: r for r in json.loads(run_cli(["list", "models", "--json"])[1])}
    assert set(models) == {p.stem for p in (ROOT / "costmodel" / "models").glob("*.json")}
    assert models["llama-3.1-8b"]["hugging_face_id"] == "meta-llama/Llama-3.1-8B"


def _arrivals(tmp_path, *flags):
    import pandas as pd

    rc, _, err = run_cli(
        ["simulate", "--workload-file", MOONCAKE, "--max-model-len", "200000", "--quiet", "--out", tmp_path, *flags]
    )
    assert rc == 0, err
    return pd.read_csv(tmp_path / "requests.csv").arrival_s.to_numpy()


def test_time_scale_and_target_rate(tmp_path):
    base = _arrivals(tmp_path)
    assert base.max() == pytest.approx(9.0)
    assert _arrivals(tmp_path, "--time-scale", "2") == pytest.approx(2 * base)
    assert _arrivals(tmp_path, "--time-scale", "0.5") == pytest.approx(0.5 * base)
    fast = _arrivals(tmp_path, "--target-rate", "10")
    assert (len(fast) - 1) / (fast.max() - fast.min()) == pytest.approx(10)
    (tmp_path / "exp.yaml").write_text(
        f"workload: {{kind: trace, trace: {{path: {MOONCAKE}, format: mooncake}}}}\nengine: {{max_model_len: 200000}}\n"
    )
    rc, out, err = run_cli(
        ["simulate", "-f", tmp_path / "exp.yaml", "--time-scale", "3", "--out", tmp_path / "f", "--quiet"]
    )
    assert rc == 0, err
    import yaml

    assert yaml.safe_load((tmp_path / "f" / "config.yaml").read_text())["workload"]["trace"]["time_scale"] == 3


def test_cost_per_million_tokens():
    s = {"output_throughput": 1000.0, "total_token_throughput": 4000.0}
    c = cost_per_million(s, gpus=2, price=3.6)  # 7.2 USD/h = 0.002 USD/s; 1e6 tokens at 1000/s = 1000 s
    assert c["usd_per_million_output_tokens"] == pytest.approx(2.0)
    assert c["usd_per_million_total_tokens"] == pytest.approx(0.5)


def test_simulate_reports_cost(tmp_path):
    argv = ["simulate", "--num-prompts", "20", "--input-len", "256", "--output-len", "16", "--json"]
    s = json.loads(run_cli(argv)[1])
    assert s["usd_per_gpu_hour"] == DEFAULT_GPU_HOURLY_USD["h100"][0] and s["gpus"] == 1
    assert s["usd_per_million_output_tokens"] == pytest.approx(3.99 / 3600 / s["output_throughput"] * 1e6)
    s2 = json.loads(run_cli(argv + ["--gpu-hourly-price", "7.98", "--tp", "2", "--replicas", "2"])[1])
    assert s2["gpus"] == 4 and s2["price_source"].startswith("given")
    assert s2["usd_per_million_output_tokens"] == pytest.approx(7.98 * 4 / 3600 / s2["output_throughput"] * 1e6)
    s3 = json.loads(run_cli(argv + ["--hardware", "h200"])[1])  # no sourced price: no cost, and says so
    assert s3["usd_per_gpu_hour"] is None and "usd_per_million_output_tokens" not in s3
    assert "--gpu-hourly-price" in s3["price_source"]
    rc, text, _ = run_cli(argv[:-1] + ["--quiet"])
    assert "usd_per_million_output_tokens" in text and "lambda.ai" in text


SWEEP = [
    "sweep",
    "--itl-slo-ms",
    "100",
    "--policies",
    "vllm",
    "--max-num-batched-tokens",
    "1024",
    "--request-rates",
    "8",
    "--num-prompts",
    "24",
    "--no-progress",
    "--json",
]


def test_sweep_axes_and_cost_ranking(tmp_path):
    rc, out, err = run_cli(
        SWEEP
        + [
            "--hardware",
            "h100",
            "a100-80gb",
            "--tp",
            "1",
            "2",
            "--replicas",
            "1",
            "2",
            "--router",
            "round_robin",
            "least_outstanding",
            "--objective",
            "usd_per_million_output_tokens",
            "--out",
            tmp_path,
        ]
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["points"] == 16
    import pandas as pd

    df = pd.read_csv(tmp_path / "sweep.csv")
    assert set(df.hardware) == {"h100", "a100-80gb"} and set(df.tp) == {1, 2} and set(df.replicas) == {1, 2}
    assert set(df.router) == {"round_robin", "least_outstanding"}
    gpus = df.tp * df.replicas
    want = df.usd_per_gpu_hour * gpus / 3600 / df.output_throughput * 1e6
    assert df.usd_per_million_output_tokens.to_numpy() == pytest.approx(want.to_numpy())
    costs = [r["usd_per_million_output_tokens"] for r in res["recommendation"]]
    assert len(costs) == 16 and costs == sorted(costs)  # every deployment its own group, the cheapest first
    # more GPUs for the same arrivals cost more per token at this light load
    one = df[(df.tp == 1) & (df.replicas == 1)].usd_per_million_output_tokens.min()
    assert one < df[(df.tp == 2) & (df.replicas == 2)].usd_per_million_output_tokens.min()


def test_sweep_replicas_and_router_change_the_simulation():
    rc, out, err = run_cli(SWEEP[:-1] + ["--replicas", "2", "--router", "round_robin", "least_kv", "--json"])
    assert rc == 0, err
    rec = json.loads(out)["recommendation"]
    assert {r["engine"] for r in rec} == {"vllm·round_robin", "vllm·least_kv"}


def test_sweep_point_ids_unchanged_without_new_axes():
    """A sweep naming no replicas or router hashes its points as before (resume reads old files)."""
    from experiments.sweep import SweepSpec, points

    a = points(SweepSpec(grid={"vllm": {"max_num_batched_tokens": [512]}}, request_rates=(4,)))
    b = points(
        SweepSpec(
            grid={"vllm": {"max_num_batched_tokens": [512]}},
            request_rates=(4,),
            axes={"replicas": [1], "router": ["round_robin"]},
        )
    )
    assert [p["point_id"] for p in a] == [p["point_id"] for p in b]


@pytest.mark.parametrize(
    "hf_id,short", [("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("Qwen/Qwen3-8B", "qwen3-8b")]
)
def test_model_takes_hugging_face_ids_everywhere(hf_id, short, tmp_path):
    from costmodel import load_model

    assert load_model(hf_id).name == short
    rc, out, err = run_cli(["cost", "--q-lens", "16", "--model", hf_id])
    assert rc == 0 and short in out, err
    rc, out, err = run_cli(["simulate", "--model", hf_id, "--num-prompts", "3", "--quiet"])
    assert rc == 0 and short in out, err
    rc, out, err = run_cli(["stall", "--no-simulate", "--model", hf_id])
    assert rc == 0, err
    rc, _, err = run_cli(["cost", "--q-lens", "16", "--model", "org/unknown-13b"])
    assert rc == 2 and "Hugging Face id" in err


LSS_MODEL = ROOT / "tests" / "fixtures" / "llmservingsim" / "RTX4090" / "meta-llama" / "Llama-3.1-8B"


def test_calibrate_llmservingsim_descends_into_its_one_variant_and_takes_model(tmp_path):
    import shutil

    import yaml

    rc, out, err = run_cli(["calibrate", "--from", "llmservingsim", LSS_MODEL, "--json"])
    assert rc == 0, err
    points = json.loads(out)["points"]
    # a profile whose meta.yaml names a model chunksim does not ship: refused by file and key without
    # --model, calibrated with it (its shapes from a config.json)
    d = tmp_path / "RTX4090" / "acme" / "Acme-8B"
    shutil.copytree(LSS_MODEL / "bf16", d / "bf16")
    meta = yaml.safe_load((d / "bf16" / "meta.yaml").read_text())
    (d / "bf16" / "meta.yaml").write_text(yaml.safe_dump({**meta, "model": "acme/Acme-8B"}))
    rc, _, err = run_cli(["calibrate", "--from", "llmservingsim", d])
    assert rc == 2 and "meta.yaml:model" in err and "acme/Acme-8B" in err
    cfg = tmp_path / "acme-config"
    cfg.mkdir()
    shutil.copy(ROOT / "costmodel" / "models" / "llama-3.1-8b.json", cfg / "config.json")
    for model in (str(cfg), "meta-llama/Llama-3.1-8B", "llama-3.1-8b"):
        rc, out, err = run_cli(["calibrate", "--from", "llmservingsim", d, "--model", model, "--json"])
        assert rc == 0, err
        assert json.loads(out)["points"] == points
    shutil.copytree(d / "bf16", d / "fp8")
    rc, _, err = run_cli(["calibrate", "--from", "llmservingsim", d, "--model", "llama-3.1-8b"])
    assert rc == 2 and "bf16, fp8" in err


def test_calibrate_model_refused_where_nothing_reads_it():
    rc, _, err = run_cli(["calibrate", "--measure", "--model", "qwen3-8b"])
    assert rc == 2 and "--model" in err
