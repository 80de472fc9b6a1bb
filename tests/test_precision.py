"""Quantized weights and KV cache (costmodel/precision.py): the bytes they take, the rate their GEMMs
run at, the pool they leave, and how flags and checkpoints name them."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from costmodel import CostModel, load_hardware, load_model, model_from_config
from costmodel.errors import InputError
from costmodel.precision import WEIGHT_FORMATS, gemm_rate, resolve
from experiments.engine_cmd import parse_engine_cmd
from experiments.engines import build_engine, with_precision


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize(("model", "hw", "tp"), [("llama-3.1-8b", "h100", 1), ("qwen3-32b", "h200", 2)])
@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_an_fp8_kv_cache_holds_twice_the_tokens(policy, model, hw, tp, kv):
    m, h = load_model(model), load_hardware(hw)
    _, pool16, _, _ = build_engine(policy, m, h, tp)
    _, pool8, cm, _ = build_engine(policy, m, h, tp, {"kv_cache_dtype": kv})
    t16, t8 = pool16.total * pool16.block_size, pool8.total * pool8.block_size
    assert cm.model.kv_bytes_per_token * 2 == m.kv_bytes_per_token
    assert abs(t8 - 2 * t16) <= 2 * pool8.block_size  # the same bytes, half a token's worth each; floors apart


@pytest.mark.parametrize(("weights", "ratio"), [("fp8", 0.5), ("int4_wo", (0.5 + 2.5 / 128) / 2), ("nvfp4", 0.28125)])
def test_quantized_weights_shrink_the_decoder_not_the_embedding(weights, ratio):
    m = load_model("llama-3.1-70b")
    q = replace(m, weights=weights)
    outer = (m.embed_params + m.head_params) * m.b
    assert q.weight_bytes - outer == pytest.approx((m.weight_bytes - outer) * ratio, rel=1e-12)


@pytest.mark.parametrize("hw", ["h100", "h200", "rtx4090"])
@pytest.mark.parametrize("weights", ["fp8", "fp8_block", "int8_wo", "int4_wo"])
def test_a_lone_decode_saves_the_weight_bytes_it_no_longer_streams(hw, weights):
    """At batch 1 every linear GEMM is memory-bound on the seed roofline: the step is shorter by the
    decoder's saved bytes over β, exactly."""
    m, h = load_model("llama-3.1-8b"), load_hardware(hw)
    t16 = CostModel(m, h).step_time([1], [1000])
    tq = CostModel(replace(m, weights=weights), h).step_time([1], [1000])
    saved = m.always_on_layer_params * (m.b - WEIGHT_FORMATS[weights][0])
    assert t16 - tq == pytest.approx(saved / h.beta_eff, rel=1e-9)


@pytest.mark.parametrize(
    ("hw", "weights", "rate"),
    [
        ("h100", "fp8", 1979 / 989),
        ("h100", "int8", 1979 / 989),
        ("h100", "int4_wo", 1.0),
        ("h100", "nvfp4", 1.0),  # no FP4 on Hopper: weight-only
        ("a100-80gb", "fp8", 1.0),  # no FP8 on Ampere: Marlin weight-only
        ("rtx4090", "fp8", 330.3 / 165.2),
        ("rtx-pro-6000", "nvfp4", 2015.2 / 503.8),
    ],
)
def test_a_compute_bound_gemm_runs_at_its_dtype_rate(hw, weights, rate):
    h = load_hardware(hw)
    assert gemm_rate(weights, h) == pytest.approx(rate, rel=1e-3)
    m = load_model("llama-3.1-8b")
    lin = lambda mm: CostModel(mm, h).breakdown(CostModel(mm, h).shape([8192], [8192])).op("linear").time_s  # noqa: E731
    assert lin(m) / lin(replace(m, weights=weights)) == pytest.approx(rate, rel=1e-9)


def test_w8a8_int8_needs_an_int8_rate():
    with pytest.raises(InputError, match="int8"):
        CostModel(replace(load_model("llama-3.1-8b"), weights="int8"), load_hardware("rtx-pro-6000"))


def test_a_tiles_profile_without_a_fit_for_the_format_refuses_it():
    h = load_hardware("a100-sxm")
    assert "fp8" not in h.gemm_dtypes  # no FP8 on Ampere, none in its tables
    with pytest.raises(InputError, match="fitted: int4_wo, int8_wo, sq"):
        CostModel(replace(load_model("llama-3.1-8b"), weights="fp8"), h)


@pytest.mark.parametrize(
    ("hw", "weights"), [("l40s", "fp8"), ("l40s", "int4_wo"), ("h100-sxm", "fp8_block"), ("b200", "nvfp4")]
)
def test_a_tiles_profile_prices_the_decoder_by_the_formats_own_fit(hw, weights):
    """The linear GEMMs take the format's fitted tile model (gemm_dtypes); the LM head stays 16-bit."""
    from costmodel.gemm_tiles import GemmTiles

    h, m = load_hardware(hw), load_model("llama-3.1-8b")
    q = CostModel(replace(m, weights=weights), h)
    fit = GemmTiles.from_profile(h, weights)
    rows = 64
    want = float((fit.times(np.full(len(q.tile_k), rows), q.tile_n, q.tile_k, m.b) * q.tile_count).sum())
    assert q._tiled_time("linear", rows, rows) == pytest.approx(
        want * q.budget_factor(rows) + _rest(q, rows), rel=1e-12
    )
    assert q._tiled_time("lm_head", 1, 1) == CostModel(m, h)._tiled_time("lm_head", 1, 1)


def _rest(cm, rows) -> float:
    import math

    if not cm.lin_rest:
        return 0.0
    pi = cm.hw.pi_eff / cm.budget_factor(rows)
    return math.hypot(2 * cm.lin_rest * rows / pi, cm.w_b * cm.lin_rest / cm.hw.beta_eff)


def test_engine_command_lines_carry_the_precision_flags():
    v = parse_engine_cmd("vllm serve meta-llama/Llama-3.1-8B --quantization fp8 --kv-cache-dtype fp8")
    assert v.flags == {"quantization": "fp8", "kv_cache_dtype": "fp8"} and not v.ignored
    s = parse_engine_cmd(
        "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --quantization fp8 --kv-cache-dtype fp8_e5m2"
    )
    assert s.flags == {"quantization": "fp8", "kv_cache_dtype": "fp8_e5m2"} and not s.ignored
    assert parse_engine_cmd("vllm serve meta-llama/Llama-3.1-8B -q awq").flags == {"quantization": "awq"}


def _cfg(**qc) -> dict:
    cfg = json.loads((load_model.__globals__["MODELS_DIR"] / "llama-3.1-8b.json").read_text())
    return {**cfg, "quantization_config": qc} if qc else cfg


@pytest.mark.parametrize(
    ("qc", "weights"),
    [
        ({"quant_method": "fp8"}, "fp8"),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8_block"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4_wo"),
        ({"quant_method": "gptq", "bits": 8}, "int8_wo"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ],
)
def test_a_checkpoint_declares_its_format(qc, weights):
    m = model_from_config(_cfg(**qc), "q")
    assert m.weights == weights
    assert with_precision(m).weights == weights  # no flag: the checkpoint's
    assert with_precision(m, "fp8" if weights.startswith("fp8") else None).weights == weights


def test_a_flag_naming_another_method_than_the_checkpoint_is_refused():
    m = model_from_config(_cfg(quant_method="fp8"), "q")
    with pytest.raises(InputError, match="quantization_config is fp8"):
        with_precision(m, "awq")
    with pytest.raises(InputError, match="bits"):
        model_from_config(_cfg(quant_method="gptq", bits=3), "q")


def test_unquantized_runs_are_untouched():
    m = load_model("llama-3.1-8b")
    assert with_precision(m) is m and with_precision(m, None, "auto", "bfloat16") is m
    assert resolve(None).weights == "bf16" and resolve(None, kv_cache_dtype="bfloat16").kv == "bf16"
