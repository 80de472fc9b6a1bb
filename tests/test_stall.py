"""`chunksim stall` against the seed's figures, each recomputed here from the seed's own formulas."""

import json
import math

import pytest

from costmodel import load_hardware, load_model
from experiments.cli import main
from experiments.stall import StallScene, stall_figures


@pytest.fixture(scope="module")
def figs(llama8b, h100):
    return stall_figures(llama8b, h100, StallScene())


def seed_formulas(m, hw, S=32768, D=32, ctx=2048, budget=2048, slo=0.060, align=256):
    """The seed's arithmetic, written out from its text (not from chunksim's cost model)."""
    P, k, pi, beta = m.P, m.kv_bytes_per_token, hw.pi_eff, hw.beta_eff
    prefill_flops = 2 * P * S + 2 * m.L * m.h * m.d_h * S * S
    decode = (2 * P + D * ctx * k) / beta
    c = budget - D
    chunk = lambda q, pre: (
        2 * P * (q + D) / pi + 4 * m.L * m.h * m.d_h * (q * pre + q * q / 2) / pi + D * ctx * k / beta
    )
    return {
        "prefill_tflop": prefill_flops / 1e12,
        "prefill_s": prefill_flops / pi,
        "decode_step_s": decode,
        "kv_bytes_per_token": 2 * m.L * m.h_kv * m.d_h * 2,
        "weight_bytes": 2 * P,
        "spike_ratio": prefill_flops / pi / decode,
        "num_chunks": math.ceil(S / c),
        "first_chunk_s": chunk(c, 0),
        "max_chunk_s": chunk(c, (S // c - 1) * c),
        "piggyback_decode_s": 2 * P * D / pi + D * ctx * k / beta,
        "ridge_spec": hw.peak_flops / hw.peak_bandwidth,
        "ridge_achieved": pi / beta,
        "kv_reread_crossover_tokens": 2 * P * 2 / k,
        "kv_reread_fraction_at_128k": k * 131072 / 2 / (2 * P),
        "slo_budget_tokens": int(pi * (slo - decode) / (2 * P)) // align * align,
        "decode_riding_along_s": math.ceil(S / c) * D * ctx * k / beta,
    }


# What the seed states; the bar is 1 % for the analytic figures, 3 % for per-chunk ones.
SEED_TEXT = {
    "prefill_s": 1.61,
    "prefill_tflop": 807,
    "decode_step_s": 9.5e-3,
    "kv_bytes_per_token": 131072,
    "weight_bytes": 16.06e9,
    "spike_ratio": 170,
    "num_chunks": 17,
    "ridge_spec": 295,
    "ridge_achieved": 192,
    "kv_reread_crossover_tokens": 245e3,
    "kv_reread_fraction_at_128k": 0.53,
    "slo_budget_tokens": 1536,
}
SEED_TEXT_3PCT = {
    "first_chunk_s": 0.070,
    "max_chunk_s": 0.134,
    "piggyback_decode_s": 4.3e-3,
    "decode_riding_along_s": 0.056,
}


@pytest.mark.parametrize("key", SEED_TEXT)
def test_seed_figure_within_1pct(figs, llama8b, h100, key):
    assert figs[key] == pytest.approx(seed_formulas(llama8b, h100)[key], rel=0.01)
    assert figs[key] == pytest.approx(SEED_TEXT[key], rel=0.01)


@pytest.mark.parametrize("key", SEED_TEXT_3PCT)
def test_seed_chunk_figure_within_3pct(figs, llama8b, h100, key):
    assert figs[key] == pytest.approx(seed_formulas(llama8b, h100)[key], rel=0.03)
    assert figs[key] == pytest.approx(SEED_TEXT_3PCT[key], rel=0.03)


def test_chunks_sum_to_prefill_plus_decodes_riding_along(figs):
    """Chunking is FLOP-neutral: Σ chunks ≈ prefill + the decode rows and KV reads riding along."""
    assert figs["chunked_total_s"] == pytest.approx(
        figs["prefill_s"] + figs["num_chunks"] * figs["piggyback_decode_s"], rel=0.01
    )


@pytest.mark.parametrize(
    "name,S,D,ctx,budget",
    [
        ("qwen3-8b", 20000, 16, 4096, 1024),
        ("llama-3.1-70b", 50000, 64, 1000, 4096),
        ("llama-3.1-8b", 9000, 8, 512, 512),
    ],
)
def test_varied_scenes_follow_the_formulas(name, S, D, ctx, budget):
    m, hw = load_model(name), load_hardware("h100")
    f = stall_figures(m, hw, StallScene(S, D, ctx, budget))
    exp = seed_formulas(m, hw, S, D, ctx, budget)
    for key in (
        "prefill_s",
        "decode_step_s",
        "num_chunks",
        "first_chunk_s",
        "piggyback_decode_s",
        "kv_reread_crossover_tokens",
    ):
        assert f[key] == pytest.approx(exp[key], rel=0.03), key


def test_tp2_halves_weight_bytes(llama8b, h100):
    one = stall_figures(llama8b, h100, StallScene())
    two = stall_figures(llama8b, h100, StallScene(), tp=2)
    assert two["weight_bytes"] == pytest.approx(one["weight_bytes"] / 2)
    assert two["prefill_s"] < one["prefill_s"]


def test_moe_stall_uses_active_parameters(h100):
    m = load_model("mixtral-8x7b")
    f = stall_figures(m, h100, StallScene(8192, 16, 1024, 2048))
    attn = 4 * m.L * m.h * m.d_h * 8192 * 8193 / 2
    assert f["prefill_s"] == pytest.approx((2 * m.P_active * 8192 + attn) / h100.pi_eff, rel=1e-3)


def test_cli_json_has_exactly_the_keys(capsys):
    assert main(["stall", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {
        "prefill_s",
        "prefill_tflop",
        "decode_step_s",
        "kv_bytes_per_token",
        "weight_bytes",
        "spike_ratio",
        "num_chunks",
        "first_chunk_s",
        "max_chunk_s",
        "chunked_total_s",
        "piggyback_decode_s",
        "ridge_spec",
        "ridge_achieved",
        "kv_reread_crossover_tokens",
        "kv_reread_fraction_at_128k",
        "slo_budget_tokens",
        "slo_chunk_tokens",
        "slo_chunk_step_s",
    }


def test_cli_table_and_chunks(capsys):
    assert main(["stall", "--chunks"]) == 0
    out = capsys.readouterr().out
    assert "faithful counting" in out and "cached_prefix" in out


@pytest.mark.parametrize(
    "argv,field",
    [
        (["stall", "--budget", "16"], "budget"),
        (["stall", "--prompt-len", "0"], "prompt-len"),
        (["stall", "--model", "nope"], "model"),
        (["stall", "--hardware", "tpu"], "hardware"),
        (["stall", "--tp", "3"], "tp"),
        (["cost", "--q-lens", "1,2", "--kv-lens", "0"], "--kv-lens"),
        (["cost", "--q-lens", "0"], "--q-lens"),
        (["cost", "--q-lens", "a,b"], "q-lens"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, field):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and "\n" not in err and "Traceback" not in err


def test_cli_cost_json(capsys):
    assert main(["cost", "--q-lens", "2016,1,1", "--kv-lens", "0,2048,2048", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"time_s", "flops", "bytes", "operators", "expected_error"}
    assert out["expected_error"]["kind"] == "spec-sheet"
    assert {o["bound"] for o in out["operators"]} <= {"compute", "memory"}
    assert out["time_s"] == pytest.approx(sum(o["time_s"] for o in out["operators"]))


def test_cli_help_lists_verbs(capsys):
    assert main(["--help"]) == 0
    assert "stall" in capsys.readouterr().out
