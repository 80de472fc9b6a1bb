"""Plots render from sweep tables and runs; the iteration-log replay behind them is exact."""

import numpy as np
import pandas as pd
import pytest
from test_sweep import small_spec

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from experiments.iterlog import iteration_frame, token_times
from experiments.plots import itl_vs_throughput, save, ttft_vs_rate
from experiments.run_plots import iteration_composition, itl_timeline, latency_cdfs, save_run_plots
from experiments.scenarios import stall_scene
from experiments.sweep import recommend, run_sweep
from simcore.simulation import Simulation
from workloads.traffic import chat_with_long_prompts


def run(policy, flags, wl, fast_forward=True):
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    sched, pool, cm, max_len = build_engine(policy, m, hw, 1, flags)
    return Simulation(
        [(sched, pool, cm)], wl, record_iterations=True, fast_forward=fast_forward, max_model_len=max_len
    ).run()


@pytest.mark.parametrize(
    "policy,flags",
    [
        ("vllm", {"max_num_batched_tokens": 1024}),
        ("sglang", {"chunked_prefill_size": 1024, "enable_mixed_chunk": True}),
        ("nochunk", {}),
    ],
)
def test_replayed_token_times_are_the_runs(policy, flags):
    wl = chat_with_long_prompts(10, num_prompts=80, input_len=256, output_len=64, long_prompt_len=8192, long_every=20)
    res = run(policy, flags, wl)
    df = res.requests
    times = token_times(res.iterations, df.rid.tolist(), [r.cm for r in res.replicas])
    for r in df.itertuples():
        t = times[r.rid]
        assert len(t) == r.num_output_tokens
        assert t[0] == r.first_token_s and t[-1] == r.finish_s
        assert np.diff(t).max(initial=0.0) == pytest.approx(r.max_itl_s, abs=1e-12)
    it = iteration_frame(res.iterations)
    assert len(it) == res.summary["num_iterations"]
    assert it.prefill_tokens.sum() == df.prompt_len.sum()
    assert it.decode_tokens.sum() == (df.num_output_tokens - 1).sum()


def test_fast_forward_replay_matches_stepping():
    wl = stall_scene(4096, 4, 512)
    a, b = run("vllm", {"max_num_batched_tokens": 512}, wl), run("vllm", {"max_num_batched_tokens": 512}, wl, False)
    fa = iteration_frame(a.iterations, a.replicas[0].cm)
    fb = iteration_frame(b.iterations, b.replicas[0].cm)
    assert len(a.iterations) < len(b.iterations)
    pd.testing.assert_frame_equal(fa.drop(columns="fast_forwarded"), fb.drop(columns="fast_forwarded"))


def test_run_plots_render(tmp_path):
    res = run("vllm", {"max_num_batched_tokens": 2048}, stall_scene(8192, 8, 1024))
    for fig in (itl_timeline(res, itl_slo_ms=60), iteration_composition(res), latency_cdfs([res, res], ["a", "b"])):
        save(fig, tmp_path / "x.png")
        assert (tmp_path / "x.png").stat().st_size > 10_000
    assert len(save_run_plots(res, tmp_path / "p")) == 3


def test_sweep_plots_render(tmp_path):
    df = run_sweep(small_spec())
    rec = recommend(df, 40.0, 3000.0)
    save(itl_vs_throughput(df, 40.0, recommendation=rec, ttft_slo_ms=3000.0), tmp_path / "a.png")
    save(ttft_vs_rate(df, 3000.0), tmp_path / "b.png")
    assert (tmp_path / "a.png").stat().st_size > 10_000 and (tmp_path / "b.png").stat().st_size > 10_000
