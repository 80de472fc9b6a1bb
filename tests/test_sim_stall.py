"""The seed scene simulated: what each policy does to the decoders' inter-token latency."""

import pytest

from experiments.engines import build_engine
from experiments.scenarios import stall_scene
from experiments.stall import StallScene, stall_figures
from simcore.simulation import Simulation

N = 32


def run_scene(llama8b, h100, policy, flags):
    sched, pool, cm, max_len = build_engine(policy, llama8b, h100, 1, flags)
    sim = Simulation(
        [(sched, pool, cm)], stall_scene(num_decodes=N), check=True, max_model_len=max_len, record_iterations=True
    )
    return sim.run()


@pytest.fixture(scope="module")
def analytic(llama8b, h100):
    return stall_figures(llama8b, h100, StallScene())


def test_no_chunking_stalls_decoders_for_the_whole_prefill(llama8b, h100, analytic):
    res = run_scene(llama8b, h100, "nochunk", {})
    stall = res.requests.max_itl_s[:N].max()
    assert stall == pytest.approx(analytic["prefill_s"], rel=0.03)
    assert stall == pytest.approx(1.61, rel=0.03)


def test_vllm_budget_bounds_the_gap_to_one_chunk(llama8b, h100, analytic):
    res = run_scene(llama8b, h100, "vllm", {"max_num_batched_tokens": 2048})
    stall = res.requests.max_itl_s[:N].max()
    assert stall == pytest.approx(analytic["max_chunk_s"], rel=0.03)
    assert stall == pytest.approx(0.134, rel=0.03)
    chunked = [it for it in res.iterations if any(r.rid == N for r, _ in it[4].items) and it[3] == 1]
    prefill_steps = [it for it in chunked if any(r.rid == N and n > 1 for r, n in it[4].items)]
    assert len(prefill_steps) == analytic["num_chunks"] == 17
    assert res.summary["completed"] == N + 1


def test_sglang_without_mixing_stalls_decoders_for_about_the_prefill(llama8b, h100, analytic):
    res = run_scene(llama8b, h100, "sglang", {"chunked_prefill_size": 2048})
    stall = res.requests.max_itl_s[:N].max()
    assert analytic["prefill_s"] * 0.97 <= stall <= analytic["prefill_s"] * 1.1


def test_sglang_mixed_chunk_lands_near_vllm(llama8b, h100):
    vllm = run_scene(llama8b, h100, "vllm", {"max_num_batched_tokens": 2048}).requests.max_itl_s[:N].max()
    mixed = run_scene(llama8b, h100, "sglang", {"chunked_prefill_size": 2048, "enable_mixed_chunk": True})
    assert mixed.requests.max_itl_s[:N].max() == pytest.approx(vllm, rel=0.05)


def test_threshold_bounds_chunk_even_with_a_big_budget(llama8b, h100):
    big = run_scene(llama8b, h100, "vllm", {"max_num_batched_tokens": 16384}).requests.max_itl_s[:N].max()
    clamped = run_scene(llama8b, h100, "vllm", {"max_num_batched_tokens": 16384, "long_prefill_token_threshold": 2048})
    assert clamped.requests.max_itl_s[:N].max() < big / 2
