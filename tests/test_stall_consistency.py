"""The stall study agrees with itself: its SLO chunk is priced as `cost` prices it, its scene
honours max_model_len, starts at decode steady state, and says what does not fit."""

import json

import pytest
from cli_helpers import run_cli

from costmodel import CostModel, cost, load_hardware, load_model
from experiments.stall import StallScene, priced_step, slo_chunk, stall_figures
from experiments.stall_sim import WARM_STEPS, run_scene, simulated_stalls


@pytest.mark.parametrize(
    "name, hw, tp, slo, S",
    [
        ("llama-3.1-70b", "h100-sxm", 4, 60.0, 32768),
        ("llama-3.1-70b", "h100-sxm", 4, 60.0, 100000),
        ("llama-3.1-8b", "h100", 1, 60.0, 32768),
        ("llama-3.1-8b", "h100", 1, 25.0, 8192),
    ],
)
def test_priced_chunk_fits_the_slo_and_the_next_size_does_not(name, hw, tp, slo, S):
    m, h = load_model(name), load_hardware(hw)
    sc = StallScene(prompt_len=S, slo_ms=slo)
    cm = CostModel(m, h, tp)
    c = slo_chunk(cm, sc)
    assert c > 0 and c % sc.align == 0
    D, ctx = sc.num_decodes, sc.decode_context
    as_cost = lambda q: cost(m, h, [q] + [1] * D, [S - q] + [ctx] * D, tp).time_s  # what `chunksim cost` prices
    assert priced_step(cm, sc, c) == pytest.approx(as_cost(c), rel=1e-9)
    assert as_cost(c) <= slo / 1e3 < as_cost(c + sc.align)
    figs = stall_figures(m, h, sc, tp)
    assert figs["slo_chunk_tokens"] == c and figs["slo_chunk_step_s"] <= slo / 1e3


def test_the_cli_prints_both_the_seed_formula_and_the_priced_chunk():
    rc, out, _ = run_cli(
        ["stall", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "4", "--slo-ms", "60", "--no-simulate"]
    )
    assert rc == 0 and "seed's formula" in out and "priced (as `cost`" in out
    rc, out, _ = run_cli(["stall", "--json"])
    assert json.loads(out)["slo_budget_tokens"] == 1536  # the seed's own figure stays


def test_a_prompt_longer_than_max_model_len_is_refused():
    rc, _, err = run_cli(["stall", "--model", "qwen3-8b", "--prompt-len", "100000"])
    assert rc == 2 and "max_model_len 40,960" in err and "--prompt-len <= 40,944" in err
    with pytest.raises(Exception, match="max_model_len"):
        simulated_stalls(load_model("qwen3-8b"), load_hardware("h100"), StallScene(prompt_len=40945))


@pytest.mark.parametrize(
    "policy, flags", [("vllm", {"max_num_batched_tokens": 2048}), ("sglang", {"chunked_prefill_size": 2048})]
)
def test_the_long_prompt_arrives_at_decode_steady_state(llama8b, h100, policy, flags):
    sc = StallScene()
    res, t_ready, arrival = run_scene(llama8b, h100, sc, 1, policy, flags, record_iterations=True)
    cm = CostModel(llama8b, h100, 1)
    before = [it for it in res.iterations if t_ready <= it[1] < arrival]
    assert sum(it[3] for it in before) >= WARM_STEPS - 1
    step = cm.time(cm.shape([1] * sc.num_decodes, [sc.decode_context] * sc.num_decodes))
    for _, start, end, steps, plan in before:  # pure decode steps of all D decoders, priced as such
        assert [n for _, n in plan.items] == [1] * sc.num_decodes
        assert (end - start) / steps == pytest.approx(step, rel=0.02)
    # the decoders hold about decode_context tokens when the prompt arrives: ITL is the seed's decode step
    assert step == pytest.approx(stall_figures(llama8b, h100, sc)["decode_step_s"], rel=1e-9)
    assert arrival - t_ready == pytest.approx((WARM_STEPS - 0.5) * step)


def test_what_does_not_fit_is_named():
    m, h = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    rows = {r["policy"]: r for r in simulated_stalls(m, h, StallScene(prompt_len=100000), tp=2)}
    vllm = rows["vLLM V1, max_num_batched_tokens=2048"]["does not fit"]
    assert vllm.startswith("the long prompt's KV does not fit") and "weights" not in vllm
    assert "activations of a 131,072-token forward pass" in rows["no chunking"]["does not fit"]
    rows = simulated_stalls(m, h, StallScene(prompt_len=8192), tp=1)
    assert all(r["does not fit"].startswith("the weights do not fit") for r in rows)


def test_simulate_scenario_stall_takes_input_len():
    rc, out, err = run_cli(["simulate", "--scenario", "stall", "--input-len", "100000", "--json"])
    assert rc == 0, err
    s = json.loads(out)
    assert s["completed"] == 33 and s["total_input_tokens"] == 32 * (2048 - 128) + 100000
    rc, _, err = run_cli(["simulate", "--scenario", "stall", "--output-len", "5"])
    assert rc == 2 and "decode_output_len" in err
