"""chunksim validate: a run written in each upstream format from a simulation replays to itself
(every figure within rounding), engine settings are read, and a MoE model's DP + EP ranks replay in
lockstep."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from costmodel import InputError, load_hardware, load_model
from costmodel.lockstep_ep import ExpertParallelism
from experiments.engines import build_cluster
from experiments.validate import load_run, model_for, overall_error, validate
from simcore.simulation import Simulation, fixed_workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("rtx4090")
ENGINE = {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096}


def simulated(n=40, seed=0, dp=1):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(0.2 / dp, n))
    p, o = rng.integers(20, 1500, n), rng.integers(2, 200, n)
    engines, route, L = build_cluster(
        "vllm", MODEL, HW, 1, {**ENGINE, "num_gpu_blocks_override": 900}, dp, "least_outstanding"
    )
    res = Simulation(engines, fixed_workload(arr, p, o), max_model_len=L, router=route if dp > 1 else None).run()
    return res.requests, 1000.0 + arr  # an engine clock that does not start at 0


def write_llmservingsim(folder, df, clock0, moe=False, dp=1, model_id="meta-llama/Llama-3.1-8B", engine=ENGINE):
    folder.mkdir()
    meta = {
        "schema_version": 1,
        "model": model_id,
        "vllm_version": "0.19.0",
        "engine_kwargs": {
            "model": model_id,
            "tensor_parallel_size": 1,
            "data_parallel_size": dp,
            "enable_expert_parallel": moe,
            **engine,
            "dtype": "bfloat16",
        },
        "kv_cache": {
            "num_gpu_blocks": 900,
            "block_size": 16,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
        },
        "hardware": {"device_name": "NVIDIA GeForce RTX 4090"},
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    with open(folder / "requests.jsonl", "w") as f:
        for r, q in zip(df.itertuples(), clock0):
            f.write(
                json.dumps(
                    {
                        "request_id": f"bench-{r.rid}",
                        "input_toks": int(r.prompt_len),
                        "output_toks": int(r.output_len),
                        "arrival_time": 1.7e9 + q,
                        "queued_ts": q,
                        "scheduled_ts": q + r.queue_s,
                        "first_token_ts": q + r.ttft_s,
                        "last_token_ts": q + r.e2el_s,
                    }
                )
                + "\n"
            )


def test_llmservingsim_run_replays_to_itself(tmp_path):
    df, clock = simulated()
    write_llmservingsim(tmp_path / "run", df, clock)
    run = load_run(tmp_path / "run")
    assert run.engine["num_gpu_blocks_override"] == 900 and run.engine["max_num_seqs"] == 32 and run.itl_s is None
    table, overall, _, _ = validate(tmp_path / "run", MODEL, HW)
    assert len(table) == 15 and overall < 1e-9
    assert set(table.metric) >= {"median_tpot_ms", "p99_ttft_ms", "p90_e2el_ms", "duration_s", "output_throughput"}
    slower, _, _, _ = validate(tmp_path / "run", MODEL, HW.replace(beta_eff=HW.beta_eff / 2))
    assert slower.set_index("metric").loc["median_tpot_ms", "rel_error"] > 0.3


def test_data_parallel_ranks_replay_to_themselves(tmp_path):
    df, clock = simulated(n=60, seed=4, dp=2)
    write_llmservingsim(tmp_path / "run", df, clock, dp=2)
    table, overall, result, run = validate(tmp_path / "run", MODEL, HW)
    assert run.dp == 2 and len(result.replicas) == 2 and overall < 1e-9
    single, _, _, _ = validate(tmp_path / "run", MODEL, HW, run=dataclasses.replace(run, dp=1))
    assert single.set_index("metric").loc["mean_ttft_ms", "rel_error"] > 0


def test_vllm_bench_json_replays_to_itself(tmp_path):
    df, clock = simulated(seed=1)
    out = {
        "duration": float(df.finish_s.max() - df.arrival_s.min()),
        "completed": len(df),
        "start_times": (clock + 5.0).tolist(),
        "input_lens": df.prompt_len.tolist(),
        "output_lens": df.output_len.tolist(),
        "ttfts": df.ttft_s.tolist(),
        "latencies": df.e2el_s.tolist(),
        "itls": [[] for _ in range(len(df))],
        "errors": [""] * len(df),
    }
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(out))
    table, overall, _, run = validate(p, MODEL, HW, {**ENGINE, "num_gpu_blocks_override": 900})
    assert run.itl_s is None and overall < 1e-9
    out["itls"] = [[t] * (int(k) - 1) for t, k in zip(df.tpot_s, df.output_len)]
    p.write_text(json.dumps(out))
    with_itl, _, _, _ = validate(p, MODEL, HW, {**ENGINE, "num_gpu_blocks_override": 900})
    assert len(with_itl) == 19 and np.isfinite(with_itl.rel_error).all()
    out["errors"][0] = "timeout"
    p.write_text(json.dumps(out))
    assert len(load_run(p).requests) == len(df) - 1
    del out["ttfts"]
    p.write_text(json.dumps(out))
    with pytest.raises(InputError, match="ttfts"):
        load_run(p)


def test_dp_ep_moe_run_replays_to_itself_in_lockstep(tmp_path):
    """A run simulated as vLLM -dp 2 --enable-expert-parallel of a MoE model, written as
    LLMServingSim's meta.json says it (data_parallel_size 2, enable_expert_parallel true), replays to
    itself: validate builds the same lockstep group with the same expert layout."""
    moe, hw = load_model("qwen3-30b-a3b"), load_hardware("h100")
    engine = {**ENGINE, "num_gpu_blocks_override": 900, "all2all_backend": "deepep_low_latency"}
    rng = np.random.default_rng(7)
    n = 60
    arr, p, o = np.cumsum(rng.exponential(0.05, n)), rng.integers(20, 1500, n), rng.integers(2, 200, n)
    engines, route, L = build_cluster("vllm", moe, hw, 1, {**engine, "enable_expert_parallel": True}, 2, "vllm_dp")
    assert route.lockstep.experts.ep == ExpertParallelism(2, "deepep", "low_latency")
    df = Simulation(engines, fixed_workload(arr, p, o), max_model_len=L, router=route).run().requests
    recorded = {k: v for k, v in engine.items() if k != "num_gpu_blocks_override"}
    write_llmservingsim(tmp_path / "run", df, 1000.0 + arr, True, 2, "Qwen/Qwen3-30B-A3B", recorded)
    table, overall, result, run = validate(tmp_path / "run", moe, hw)
    assert run.dp == 2 and run.expert_parallel and len(result.replicas) == 2 and overall < 1e-9
    no_ep, _, _, _ = validate(tmp_path / "run", moe, hw, run=dataclasses.replace(run, expert_parallel=False))
    assert overall_error(no_ep) > 1e-3  # DeepEP's all-to-all changes the price
    with pytest.raises(InputError, match="data-parallel ranks only"):  # EP on one engine: not modelled
        validate(tmp_path / "run", moe, hw, run=dataclasses.replace(run, dp=1))


def test_a_shared_runs_meta_as_dp2_ep_moe_is_not_refused(tmp_path):
    """The shared RTX PRO 6000 run's meta.json changed to DP 2 + EP of a MoE model (no measured DP + EP
    run exists: the figures are not compared with anything, only computed)."""
    src = Path(__file__).resolve().parents[2] / "shared/data/validation/llmservingsim/runs/RTXPRO6000/Qwen3-32B"
    if not src.is_dir():
        src = Path("/work/shared/data/validation/llmservingsim/runs/RTXPRO6000/Qwen3-32B")
    meta = json.loads((src / "meta.json").read_text())
    meta["model"] = "Qwen/Qwen3-30B-A3B"
    meta["engine_kwargs"].update(
        model="Qwen/Qwen3-30B-A3B", tensor_parallel_size=1, data_parallel_size=2, enable_expert_parallel=True
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "meta.json").write_text(json.dumps(meta))
    (run_dir / "requests.jsonl").write_text((src / "requests.jsonl").read_text())
    run = load_run(run_dir)
    model, hw = load_model(model_for(run)), load_hardware("rtx-pro-6000")  # PROVENANCE.md: RTX PRO 6000
    table, overall, result, _ = validate(run_dir, model, hw, run=run)
    assert run.dp == 2 and run.expert_parallel and len(result.replicas) == 2
    assert np.isfinite(table.simulated).all() and result.summary["completed"] == len(run.requests)


def test_validate_cli(tmp_path, capsys):
    from experiments.cli import main

    df, clock = simulated(n=20, seed=2)
    write_llmservingsim(tmp_path / "run", df, clock)
    assert main(["validate", str(tmp_path / "run"), "--plots", str(tmp_path / "plots")]) == 0
    text = capsys.readouterr().out
    assert "mean |relative error|" in text and "rtx4090" in text
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["cdf_e2el.png", "cdf_tpot.png", "cdf_ttft.png"]
    assert main(["validate", str(tmp_path / "nothing")]) == 2


@pytest.mark.parametrize(
    "device,profile",
    [
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ],
)
def test_run_device_picks_its_edition(device, profile):
    from experiments.validate import MeasuredRun, hardware_for

    run = MeasuredRun("x", "m", None, 1.0, device=device)
    assert hardware_for(run) == profile
    hw = load_hardware(profile)
    if profile.startswith("rtx-pro"):  # the two editions differ in memory bandwidth (NVIDIA's pages: 1597, 1792 GB/s)
        assert hw.peak_bandwidth == {"rtx-pro-6000-server": 1597e9, "rtx-pro-6000": 1792e9}[profile]
        assert hw.peak_flops <= load_hardware("rtx-pro-6000").peak_flops


def test_validate_uncertainty_bands_cover_by_the_kinds_error(tmp_path, capsys, monkeypatch):
    """``validate --uncertainty N``: each figure's p5-p95 band from N draws of the profile kind's
    error. A run measured on the 4090 and priced on the much faster RTX PRO 6000 lies outside bands
    drawn at a 1 % error and inside bands drawn at a factor e^1 (p5-p95: x0.19 to x5.2)."""
    from costmodel import expected_error as ee
    from experiments import model_error
    from experiments.cli import main

    df, clock = simulated(n=20, seed=3)
    write_llmservingsim(tmp_path / "run", df, clock)
    args = ["validate", str(tmp_path / "run"), "--hardware", "rtx-pro-6000", "--uncertainty", "20", "--json"]
    got = {}
    for s in (0.01, 1.0):
        monkeypatch.setattr(model_error, "expected_error", lambda hw, s=s: ee.ExpectedError("spec-sheet", s, 0, 1, "t"))
        assert main(args) == 0
        got[s] = json.loads(capsys.readouterr().out)
    for out in got.values():
        u = out["uncertainty"]
        assert u["draws"] == 20 and u["figures"] == len(out["figures"]) == 15
        assert u["inside"] == sum(f["inside"] for f in out["figures"])
        assert all(f["p5"] <= f["p95"] for f in out["figures"])
    tpot = {s: next(f for f in got[s]["figures"] if f["metric"] == "median_tpot_ms") for s in got}
    assert tpot[0.01]["measured"] > tpot[0.01]["p95"] and tpot[1.0]["inside"]
    assert got[1.0]["uncertainty"]["coverage"] > got[0.01]["uncertainty"]["coverage"]
    assert got[1.0]["uncertainty"]["median_width"] > 10 * got[0.01]["uncertainty"]["median_width"]
    assert main([*args[:-1], "--uncertainty", "0"]) == 2
