"""The step fit's per-layer terms (kernel_launch_s, hop_latency_s: calibration/step_pricing.py) fitted
jointly over several models and tp sizes (calibration/steps.py, ``fit_steps`` with a dict of models),
the β-below-half-spec warning, multi-tp Splitwise tables, and the cross-model transfer on the shared
Splitwise data where it is present."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import load_hardware, load_model
from costmodel.calibration.step_pricing import scaled_hardware
from costmodel.calibration.step_timings import load_steps, uniform_steps
from costmodel.calibration.steps import elementwise_kernels, fit_steps, layer_terms, predict_steps
from costmodel.roofline import CostModel

BASE = load_hardware("a100-80gb")
MODELS = {"llama-2-7b": load_model("llama-2-7b"), "qwen3-8b": load_model("qwen3-8b")}
TRUTH = {"s_pi": 0.8, "s_beta": 0.9, "launch": 20e-6, "hop": 5e-6, "host_step": 2e-3, "host_seq": 50e-6}
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "steps"


def truth_hw():
    return scaled_hardware(
        BASE,
        TRUTH["s_pi"],
        TRUTH["s_beta"],
        host=[TRUTH["host_step"], TRUTH["host_seq"], 0.0, 0.0],
        layer=(TRUTH["launch"], TRUTH["hop"]),
    )


def splitwise_like(model: str, tp: int, hw) -> pd.DataFrame:
    """Splitwise-shaped steps (a batch's prefill, its mean decode) of ``model`` at ``tp`` priced by ``hw``."""
    cm = CostModel(MODELS[model], hw, tp)
    grid = [(p, b) for p in (128, 512, 2048) for b in (1, 4, 16)]
    p, b = np.array(grid).T
    zero = np.zeros_like(p)
    pre = [cm.step_time([int(x)] * int(n), [0] * int(n)) for x, n in grid]
    dec = [cm.step_time([1] * int(n), [int(x) + 63] * int(n)) for x, n in grid]
    out = pd.concat(
        [
            uniform_steps(b, p, zero, zero, zero, pre, "synthetic", tp),
            uniform_steps(zero, zero, zero, b, p + 63, dec, "synthetic", tp),
        ],
        ignore_index=True,
    )
    out["model"] = model
    return out


def test_joint_fit_of_two_models_recovers_the_shared_per_layer_terms():
    """Two models of other depths at tp 1, 2 and 4, priced by a profile with known per-layer and host
    terms: the joint fit recovers them within a few %, and each model's steps price back."""
    hw = truth_hw()
    steps = pd.concat(
        [splitwise_like("llama-2-7b", tp, hw) for tp in (1, 2, 4)] + [splitwise_like("qwen3-8b", 2, hw)],
        ignore_index=True,
    )
    fit = fit_steps(steps, MODELS, BASE)
    v = fit.values
    assert fit.layered and {m for m, _ in fit.groups} == set(MODELS)
    assert v["kernel_launch_s"] == pytest.approx(TRUTH["launch"], rel=0.03)
    assert v["hop_latency_s"] == pytest.approx(TRUTH["hop"], rel=0.03)
    assert v["host_step_s"] == pytest.approx(TRUTH["host_step"], rel=0.03)
    assert v["s_pi"] == pytest.approx(TRUTH["s_pi"], rel=0.02) and v["s_beta"] == pytest.approx(0.9, rel=0.02)
    assert fit.group_errors["mape"].max() < 0.5
    pred = predict_steps(steps, MODELS, fit.hardware())
    assert np.abs(pred / steps["time_s"].to_numpy() - 1).max() < 0.01


def test_per_layer_terms_carry_to_another_model():
    """Fitted on one model (its fixed time put per layer), the profile prices another model of other
    depth, priced by the same per-layer profile, within 1 %; with the fixed time per step it does not."""
    hw = truth_hw().replace(host_step_s=0.0)  # all of the fixed time per layer
    one = pd.concat([splitwise_like("llama-2-7b", tp, hw) for tp in (1, 2)], ignore_index=True)
    other = splitwise_like("qwen3-8b", 2, hw)
    for per_layer, ok in (("layer", True), ("step", False)):
        fit = fit_steps(one, MODELS, BASE, per_layer=per_layer)
        err = np.abs(predict_steps(other, MODELS, fit.hardware()) / other["time_s"].to_numpy() - 1).mean()
        assert (err < 0.01) == ok, (per_layer, err, fit.warnings)


def test_unidentified_per_layer_terms_are_held_and_said():
    m = load_model("llama-2-7b")
    one = [("a", 8, m)]
    assert [k for k, _ in layer_terms(one, "step", {})] == ["kernel_launch_s", "hop_latency_s"]
    assert [k for k, _ in layer_terms(one, "layer", {})] == ["host_step_s", "hop_latency_s"]
    two_tp = [("a", 2, m), ("a", 8, m)]
    assert [k for k, _ in layer_terms(two_tp, "step", {})] == ["kernel_launch_s"]
    two_models = [("a", 8, m), ("b", 8, load_model("llama-3.1-70b"))]
    assert [k for k, _ in layer_terms(two_models, "step", {})] == ["hop_latency_s"]
    assert elementwise_kernels(m) == 4 * m.L


def test_one_model_one_tp_fit_is_unchanged_by_default():
    """per_layer="step" on one model and tp holds both per-layer terms: the profile carries none."""
    steps = splitwise_like("llama-2-7b", 2, truth_hw())
    fit = fit_steps(steps, MODELS["llama-2-7b"], BASE, tp=2)
    assert not fit.layered and fit.values["kernel_launch_s"] == fit.values["hop_latency_s"] == 0.0
    assert fit.hardware().elementwise_beta == BASE.elementwise_beta
    assert any("kernel_launch_s not identified" in w for w in fit.warnings)


def test_beta_below_half_spec_is_warned_with_what_it_absorbed():
    """Decode steps slowed by a fixed time that only β can take (per-layer and host terms held):
    the fit's β_eff falls below half the spec sheet's, and the warning names the decode steps."""
    hw = scaled_hardware(BASE, 1.0, 0.35)
    steps = splitwise_like("llama-2-7b", 1, hw)
    fixed = {"kernel_launch_s": 0.0, "hop_latency_s": 0.0, "host_step_s": 0.0, "host_per_seq_s": 0.0}
    fit = fit_steps(steps, MODELS["llama-2-7b"], BASE, tp=1, fixed=fixed)
    assert fit.beta_eff < 0.5 * BASE.peak_bandwidth
    warn = [w for w in fit.warnings if w.startswith("beta_eff")]
    assert len(warn) == 1 and "decode steps" in warn[0] and "host_step_s" in warn[0]
    ok = fit_steps(splitwise_like("llama-2-7b", 1, BASE), MODELS["llama-2-7b"], BASE, tp=1)
    assert not any(w.startswith("beta_eff") for w in ok.warnings)


def test_multi_tp_splitwise_table_is_read_and_screened(tmp_path):
    """A Splitwise table of several tp sizes loads (each step its tp and model); a configuration
    faster than one of less work, and one whose e2e time its step times do not add up to, are
    skipped and counted; the CLI fits it."""
    from experiments.cli import main

    rows = []
    for tp, scale in ((2, 1.0), (4, 0.6)):
        for b in (1, 2, 4, 8):
            pt, tt = 100.0 * b * scale, 40.0 * scale * (1 + 0.01 * b)
            if tp == 2 and b == 8:
                pt = 50.0  # broken: below batch 4's
            e2e = pt + 127 * tt * (1.5 if (tp, b) == (4, 4) else 1.0)
            for _ in range(3):
                rows.append(("llama2-70b", "a100-80gb", 512, b, 128, 0.0, 0.0, pt, tt, e2e, tp))
    cols = "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,token_time,e2e_time,tensor_parallel"
    pd.DataFrame(rows, columns=cols.split(",")).to_csv(tmp_path / "sw.csv", index=False)
    skipped: dict = {}
    st = load_steps(tmp_path / "sw.csv", "splitwise", skipped=skipped)
    assert sorted(set(st["tp"])) == [2, 4] and set(st["model"]) == {"llama2-70b"}
    assert sum(skipped.values()) == 6 and len(st) == 2 * (24 - 6)
    assert main(["calibrate", "--from", "splitwise", str(tmp_path / "sw.csv"), "--base", "a100-80gb", "--json"]) == 0


@pytest.mark.skipif(not (SHARED / "splitwise_llama2_70b_a100.csv").is_file(), reason="needs the shared step data")
def test_calibrate_two_models_reports_leave_one_model_out(tmp_path, capsys):
    import json

    from experiments.cli import main

    rc = main(
        [
            "calibrate",
            "--from",
            "splitwise",
            str(SHARED / "splitwise_bloom176b.csv"),
            "--from",
            "splitwise",
            str(SHARED / "splitwise_llama2_70b_a100.csv"),
            "--gpu",
            "a100-80gb",
            "--base",
            "a100-80gb",
            "--json",
        ]
    )
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    lomo = rep["errors_leave_one_model_out"]
    assert {(r["model"], r["tp"]) for r in lomo} == {
        ("bloom-176b", 8),
        ("llama2-70b", 2),
        ("llama2-70b", 4),
        ("llama2-70b", 8),
    }
    assert rep["model"] == "bloom-176b, llama2-70b" and rep["skipped"]
    names = {p["parameter"]: p["value"] for p in rep["parameters"]}
    assert names["kernel_launch_s"] > 0 and names["hop_latency_s"] > 0


def test_eager_launches_hide_under_the_gpu_and_cost_the_same_at_any_tp():
    """host_per_launch_s: a pass takes max(GPU, launches) plus the serial host terms, or
    max(GPU, launches + host) with overlap; a launch-bound decode costs the same at tp 2 and 4, a
    GPU-bound prefill is unchanged; the field at 0 prices exactly as before."""
    from costmodel.errors import InputError
    from costmodel.execution import model_launches

    m, c = load_model("llama-2-7b"), 30e-6
    base = BASE.replace(host_per_seq_s=40e-6)
    hw = base.replace(host_per_launch_s=c)
    for tp in (2, 4):
        gpu = CostModel(m, BASE, tp).step_time([], [], 8, 8 * 513)
        launch = c * model_launches(m, tp)
        assert gpu < launch  # the decode is launch-bound here
        assert CostModel(m, hw, tp).step_time([], [], 8, 8 * 513) == pytest.approx(launch + 8 * 40e-6, rel=1e-12)
        over = CostModel(m, hw, tp, overlap_host=True).step_time([], [], 8, 8 * 513)
        assert over == pytest.approx(launch + 8 * 40e-6, rel=1e-12)
        pre = CostModel(m, BASE, tp).step_time([4096], [0])
        assert pre > launch + 1e-3
        assert CostModel(m, hw, tp).step_time([4096], [0]) == pytest.approx(pre + 40e-6, rel=1e-12)
    assert CostModel(m, base.replace(host_per_launch_s=0.0), 2).step_time([], [], 8, 8 * 513) == CostModel(
        m, base, 2
    ).step_time([], [], 8, 8 * 513)
    with pytest.raises(InputError, match="host_per_launch_s"):
        CostModel(load_model("mixtral-8x7b"), hw, 2)


# The ops each layer's forward runs, transcribed from vLLM's 2023 model code (v0.2, eager):
# LlamaDecoderLayer.forward / LlamaAttention / LlamaMLP with PagedAttentionWithRoPE, and
# BloomBlock.forward / BloomAttention / BloomMLP with PagedAttentionWithALiBi; the linear layers are
# parallel_utils/tensor_parallel's ColumnParallelLinear (F.linear, bias inside) and
# RowParallelLinear (F.linear, all-reduce, then ``output_ + self.bias``). "all_reduce" only at tp > 1.
V02_LLAMA = (
    "input_layernorm", "qkv_proj", "rotary_embedding_neox", "reshape_and_cache", "attention", "o_proj",
    "all_reduce", "residual + h", "post_attention_layernorm", "gate_up_proj", "SiluAndMul", "down_proj",
    "all_reduce", "residual + h",
)  # fmt: skip
V02_BLOOM = (
    "input_layernorm", "query_key_value", "reshape_and_cache", "attention", "dense", "all_reduce",
    "output_ + bias", "attention_output + residual", "post_attention_layernorm", "dense_h_to_4h", "gelu",
    "dense_4h_to_h", "all_reduce", "output_ + bias", "mlp + residual",
)  # fmt: skip


@pytest.mark.parametrize(
    "name, ops", [("llama-2-70b", V02_LLAMA), ("bloom-176b", V02_BLOOM), ("llama-2-7b", V02_LLAMA)]
)
def test_layer_kernels_follow_the_engine_code_of_the_measurements(name, ops):
    """execution.layer_kernels, counted from the model's architecture fields, equals the kernels the
    2023 engine's layer launched (the transcription above), at tp 1 and tp > 1; MoE is refused."""
    from costmodel.errors import InputError
    from costmodel.execution import PASS_KERNELS, layer_kernels, model_launches

    m = load_model(name)
    for tp in (1, 2, 8):
        want = len([o for o in ops if tp > 1 or o != "all_reduce"])
        assert layer_kernels(m, tp) == want
        assert model_launches(m, tp) == m.L * want + PASS_KERNELS
    with pytest.raises(InputError, match="mixtral"):
        layer_kernels(load_model("mixtral-8x7b"), 2)


def test_architecture_fields_for_the_kernel_count(tmp_path):
    """rotary and out_biases from config.json: BLOOM and OPT have no per-layer rotary and a bias on
    both row-parallel projections; a Llama with attention_bias has one on o_proj; Qwen2's bias is the
    QKV's only (inside its GEMM)."""
    import json

    assert (load_model("bloom-176b").rotary, load_model("bloom-176b").out_biases) == (False, 2)
    assert (load_model("opt-13b").rotary, load_model("opt-13b").out_biases) == (False, 2)
    assert (load_model("llama-2-70b").rotary, load_model("llama-2-70b").out_biases) == (True, 0)
    assert (load_model("qwen2.5-7b").rotary, load_model("qwen2.5-7b").out_biases) == (True, 0)
    cfg = json.loads((Path(__file__).resolve().parents[1] / "costmodel" / "models" / "llama-2-7b.json").read_text())
    p = tmp_path / "biased.json"
    p.write_text(json.dumps({**cfg, "attention_bias": True}))
    assert load_model(str(p)).out_biases == 1


def test_launch_term_is_fitted_on_one_model_and_carries_to_another():
    """per_layer="launch": steps of one model whose decodes are bound by the host's launches (the
    truth profile's host_per_launch_s) give that constant back, and it prices another model's steps
    (other depth, other tp) within 1 %; the per-layer GPU term, which the launches' count already
    holds at one model, is held and said."""
    truth = BASE.replace(host_per_launch_s=30e-6, host_per_seq_s=50e-6)
    one = pd.concat([splitwise_like("llama-2-7b", tp, truth) for tp in (1, 2)], ignore_index=True)
    other = splitwise_like("qwen3-8b", 4, truth)
    fit = fit_steps(one, MODELS, BASE, per_layer="launch")
    assert fit.values["host_per_launch_s"] == pytest.approx(30e-6, rel=0.02)
    assert any("kernel_launch_s not identified" in w and "per eager kernel launch" in w for w in fit.warnings)
    err = np.abs(predict_steps(other, MODELS, fit.hardware()) / other["time_s"].to_numpy() - 1)
    assert err.max() < 0.01, fit.warnings
    m = load_model("llama-2-7b")
    assert [k for k, _ in layer_terms([("a", 8, m)], "launch", {})] == [
        "host_step_s",
        "kernel_launch_s",
        "hop_latency_s",
    ]


@pytest.mark.skipif(not (SHARED / "splitwise_llama2_70b_a100.csv").is_file(), reason="needs the shared step data")
def test_llama_steps_price_bloom_steps_through_the_launch_term():
    """Fitted on Splitwise's Llama-2-70B A100 steps alone (tp 2, 4, 8) with the eager-launch term on
    the kernel-calibrated a100-sxm (its β held), BLOOM-176B's A100 steps (never seen) are priced
    within 10 % MAPE for prefill and for decode (benchmarks/bench_steps_transfer.py)."""
    from experiments.cli.calibrate_steps import step_models

    data = {
        name: load_steps(SHARED / f, "splitwise", gpu="a100-80gb")
        for name, f in (("llama2-70b", "splitwise_llama2_70b_a100.csv"), ("bloom-176b", "splitwise_bloom176b.csv"))
    }
    models = step_models(pd.concat(data.values(), ignore_index=True), None)
    base = load_hardware("a100-sxm")
    fit = fit_steps(data["llama2-70b"], models, base, per_layer="launch", fixed={"s_beta": 1.0})
    assert fit.beta_eff <= base.peak_bandwidth
    bloom = data["bloom-176b"]
    ape = np.abs(predict_steps(bloom, models, fit.hardware()) / bloom["time_s"].to_numpy() - 1)
    for kind in ("prefill", "decode"):
        assert 100 * ape[(bloom["kind"] == kind).to_numpy()].mean() <= 10.0, kind


def test_launch_count_is_taken_only_where_the_launch_term_is_fitted():
    """A step fit of a model whose layers the launch count refuses (MoE) runs as before without the
    launch term, and with it is refused naming the model."""
    from costmodel.errors import InputError

    m = load_model("mixtral-8x7b")
    cm = CostModel(m, BASE, 2)
    n, q, d = np.array([1, 1, 0, 0]), np.array([512, 2048, 0, 0]), np.array([0, 0, 4, 16])
    t = [cm.step_time([int(a)] * int(k), [0] * int(k), int(x), int(x) * 513) + 2e-3 for k, a, x in zip(n, q, d)]
    steps = uniform_steps(n, q, np.zeros(4), d, np.full(4, 512), t, "synthetic", tp=2)
    fit_steps(steps, m, BASE, per_layer="step")
    with pytest.raises(InputError, match="mixtral"):
        fit_steps(steps, m, BASE, per_layer="launch")
