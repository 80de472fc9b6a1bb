"""Step-level timings: the importers on fixtures in the upstream formats, bad input named by file,
line and field, and the step fit recovering known constants (host overhead included)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import CostModel, InputError, load_hardware, load_model
from costmodel.calibration.step_timings import load_steps, uniform_steps
from costmodel.calibration.steps import fit_steps, predict_steps

DATA = Path(__file__).parent / "data"
MODEL = load_model("llama-3.1-8b")


def test_vllm_log_importer():
    skipped = {}
    st = load_steps(DATA / "vllm_iterations.log", "vllm-log", skipped=skipped)
    assert skipped == {"dummy or empty iterations": 1}
    assert list(st.kind) == ["prefill", "mixed", "decode"]
    assert list(st.rows) == [3000, 2002, 3] and list(st.seqs) == [2, 3, 3] and list(st.prefill_seqs) == [2, 1, 0]
    assert st.time_s.tolist() == pytest.approx([0.21055, 0.1501, 0.02137])
    used = round(0.122 * 41408)  # KV in use of the decode step: 3 decodes of kv + 1 tokens
    assert st.decode_kv.iloc[2] == 3 * ((used - 3) // 3 + 1)
    assert st.prefill_pairs.iloc[0] == 2 * (1500 * 1501 // 2)  # even split, no cached prefix
    assert st.source.iloc[0].endswith("vllm_iterations.log:2")


def test_splitwise_importer():
    st = load_steps(DATA / "splitwise_rows.csv", "splitwise", gpu="a100-80gb")
    pre, dec = st[st.kind == "prefill"], st[st.kind == "decode"]
    assert list(pre.rows) == [512, 1024] and list(pre.seqs) == [1, 2] and set(st.tp) == {8}
    assert pre.time_s.tolist() == pytest.approx([0.17410922795534134, 0.2854763069190085])
    assert list(dec.rows) == [1, 2] and dec.decode_kv.tolist() == [1 * (512 + 63 + 1), 2 * (512 + 63 + 1)]
    assert list(st.session) == ["power"] * 4  # power logged: the recording session (fit_steps(sessions=True))
    h100 = load_steps(DATA / "splitwise_rows.csv", "steps", gpu="h100-80gb")
    assert h100.time_s.iloc[0] == pytest.approx(0.07713962200796232) and set(h100.session) == {"no-power"}
    with pytest.raises(InputError, match="several GPUs"):
        load_steps(DATA / "splitwise_rows.csv", "splitwise")


def test_steps_csv_importer_skips_other_dtypes():
    skipped = {}
    st = load_steps(DATA / "steps.csv", "steps", skipped=skipped)
    assert skipped == {"dtype": 1} and len(st) == 2
    assert list(st.kind) == ["mixed", "decode"] and list(st.rows) == [514, 2]
    assert st.prefill_pairs.iloc[0] == 512 * 513 // 2 and st.decode_kv.iloc[1] == 1002 + 2002
    assert st.time_s.tolist() == pytest.approx([0.04, 0.0125])


@pytest.mark.parametrize(
    "text,where",
    [
        ("step,q_len,time_s\n0,5,0.1\n", r"steps\.csv:1:kv_len"),
        ("step,q_len,kv_len,time_s,dtype\n0,5,0,0.1,fp8\n1,5,0,0.1,int8\n", r"steps\.csv:2:dtype"),
        ("step,q_len,kv_len,time_s\n0,5,0,0.1\n0,1,x,0.1\n", r"steps\.csv:3:kv_len"),
        ("step,q_len,kv_len,time_s\n0,5,0,0.1\n0,1,9,0.2\n", r"steps\.csv:2:time_s"),
    ],
)
def test_bad_steps_csv_names_file_line_field(tmp_path, text, where):
    p = tmp_path / "steps.csv"
    p.write_text(text)
    with pytest.raises(InputError, match=where) as e:
        load_steps(p, "steps")
    assert "\n" not in str(e.value)


def test_truncated_log_line_names_file_line_field(tmp_path):
    lines = (DATA / "vllm_iterations.log").read_text().splitlines()
    lines[3] = lines[3][: lines[3].index("iteration elapsed") + 12]
    p = tmp_path / "engine.log"
    p.write_text("\n".join(lines))
    with pytest.raises(InputError, match=r"engine\.log:4:iteration elapsed time"):
        load_steps(p, "vllm-log")
    p.write_text("\n".join(lines[1:3]))
    with pytest.raises(InputError, match="KV cache size"):
        load_steps(p, "vllm-log")
    assert len(load_steps(p, "vllm-log", kv_cache_tokens=41408)) == 2
    p.write_text("\n".join(lines[:2] + [lines[4].replace("21.37 ms", "0.03 ms")]))
    skipped = {}
    assert len(load_steps(p, "vllm-log", skipped=skipped)) == 1 and any("async" in k for k in skipped)


def synthetic_steps(rng, n=400):
    """Prefill batches, decode batches and mixed steps of varied shape."""
    kinds = rng.integers(0, 3, n)
    npf = np.where(kinds == 1, 0, rng.integers(1, 5, n))
    q = rng.integers(64, 4096, n)
    kvp = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 4000, n))
    nd = np.where(kinds == 0, 0, rng.integers(1, 200, n))
    kvd = rng.integers(100, 8000, n)
    return npf, q, kvp, nd, kvd


def grid_steps(rng, n=160):
    """synthetic_steps on a grid of prompt lengths and batch sizes (few distinct row counts)."""
    npf, q, kvp, nd, kvd = synthetic_steps(rng, n)
    q = rng.choice([96, 384, 700, 1500, 2600, 3900], n)
    nd = np.where(nd > 0, rng.choice([3, 24, 90, 190], n), 0)
    return npf, q, kvp, nd, kvd


def truth_profile(base, s_pi, s_beta, **fields):
    """The base with every FLOP rate ×s_pi and every HBM rate ×s_beta, spelled out field by field
    (what the step fit's scales mean: calibration/step_pricing.py), plus ``fields``."""
    hw = base.replace(
        pi_eff=base.pi_eff * s_pi,
        beta_eff=base.beta_eff * s_beta,
        pi_attn=base.pi_attn * s_pi if base.pi_attn else None,
        beta_attn=base.beta_attn * s_beta if base.beta_attn else None,
        attn_decode_pi=base.attn_decode_pi * s_pi,
        attn_mixed_pi=base.attn_mixed_pi * s_pi,
        attn_prefill_beta=base.attn_prefill_beta * s_beta,
        attn_prefill_kv_beta=base.attn_prefill_kv_beta * s_beta,
        attn_decode_beta_mha=base.attn_decode_beta_mha * s_beta,
        elementwise_beta=base.elementwise_beta * s_beta,
    )
    return hw.replace(**fields)


def priced(cm, npf, q, kvp, nd, kvd):
    """Each step's time as the simulator prices its batch."""
    return [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [int(k)] * int(p) + [int(v)] * int(d))
        for p, a, k, d, v in zip(npf, q, kvp, nd, kvd)
    ]


@pytest.mark.parametrize(
    "base_name,truth",
    [
        (
            "a100-sxm",
            dict(
                s_pi=0.85,
                s_beta=0.9,
                host_step_s=1.1e-3,
                host_per_seq_s=12e-6,
                host_per_prefill_seq_s=0.3e-3,
                host_prefill_step_s=2.5e-3,
            ),
        ),
        (
            "l40s",
            dict(
                s_pi=0.7,
                s_beta=1.05,
                host_step_s=0.4e-3,
                host_per_seq_s=25e-6,
                host_per_prefill_seq_s=0.8e-3,
                host_prefill_step_s=1.5e-3,
            ),
        ),
        (
            "h100-sxm",
            dict(
                s_pi=0.95,
                s_beta=0.75,
                host_step_s=2.2e-3,
                host_per_seq_s=6e-6,
                host_per_prefill_seq_s=0.1e-3,
                host_prefill_step_s=4e-3,
            ),
        ),
    ],
)
def test_fit_on_a_calibrated_base_recovers_host_terms_and_prices_back(base_name, truth):
    """Tile/wave GEMMs, fitted and unit-model attention: the step fit prices steps as the simulator
    does, so it recovers the host terms and scales of timings the simulator produced, and the profile
    it writes prices those steps back as the fit said (to rounding)."""
    base = load_hardware(base_name)
    assert base.gemm_form == "tiles"
    cm = CostModel(
        MODEL,
        truth_profile(base, truth["s_pi"], truth["s_beta"], **{k: v for k, v in truth.items() if k.startswith("host")}),
    )
    npf, q, kvp, nd, kvd = grid_steps(np.random.default_rng(13))
    times = priced(cm, npf, q, kvp, nd, kvd)
    steps = uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic")
    fit = fit_steps(steps, MODEL, base)
    for k, v in truth.items():
        assert fit.values[k] == pytest.approx(v, rel=0.02), k
    back = np.array(priced(CostModel(MODEL, fit.hardware()), npf, q, kvp, nd, kvd))
    fitted = fit.errors.set_index("kind")["mape"]
    assert back == pytest.approx(np.array(times), rel=0.01)
    assert np.abs(back / np.array(times) - 1).mean() * 100 <= fitted.max() + 1e-9


@pytest.mark.parametrize(
    "truth",
    [
        dict(s_pi=0.8, s_beta=0.7, host_step_s=2.0e-3, host_per_seq_s=30e-6, host_per_prefill_seq_s=150e-6),
        dict(s_pi=1.3, s_beta=1.1, host_step_s=0.6e-3, host_per_seq_s=8e-6, host_per_prefill_seq_s=1.2e-3),
        dict(
            s_pi=0.9,
            s_beta=0.95,
            host_step_s=1.1e-3,
            host_per_seq_s=12e-6,
            host_per_prefill_seq_s=0.3e-3,
            host_prefill_step_s=2.5e-3,
        ),
    ],
)
@pytest.mark.parametrize("base_name", ["h100", "a100-80gb"])
def test_fit_recovers_known_constants(truth, base_name):
    base = load_hardware(base_name)
    hw = base.replace(
        pi_eff=base.pi_eff * truth["s_pi"],
        beta_eff=base.beta_eff * truth["s_beta"],
        **{k: v for k, v in truth.items() if k.startswith("host")},
    )
    cm = CostModel(MODEL, hw)  # the simulator's own pricing, step by step
    npf, q, kvp, nd, kvd = synthetic_steps(np.random.default_rng(7))
    times = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [int(k)] * int(p) + [int(v)] * int(d))
        for p, a, k, d, v in zip(npf, q, kvp, nd, kvd)
    ]
    steps = uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic")
    fit = fit_steps(steps, MODEL, base)
    for k, v in truth.items():
        assert fit.values[k] == pytest.approx(v, rel=0.02), k
    assert predict_steps(steps, MODEL, fit.hardware(), 1) == pytest.approx(np.array(times), rel=0.01)


REGIME_TRUTH = dict(
    s_pi=0.9,
    s_beta=0.8,
    host_step_s=1.5e-3,
    host_per_seq_s=20e-6,
    host_per_prefill_seq_s=0.4e-3,
    host_prefill_step_s=3e-3,
)


def regime_steps(base, **regime):
    """Steps priced by `base` scaled by REGIME_TRUTH, its host terms and a GEMM rows regime: (steps, times)."""
    hw = truth_profile(base, 0.9, 0.8, **regime, **{k: v for k, v in REGIME_TRUTH.items() if k.startswith("host")})
    cm = CostModel(MODEL, hw)
    npf, q, kvp, nd, kvd = (grid_steps if hw.gemm_form == "tiles" else synthetic_steps)(np.random.default_rng(11))
    times = priced(cm, npf, q, kvp, nd, kvd)
    return uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic"), times


@pytest.mark.parametrize(
    "brk,s_rows,base_name", [(2048, 0.75, "h100"), (512, 0.6, "a100-80gb"), (1024, 0.7, "a100-sxm")]
)
def test_fit_recovers_a_gemm_rows_regime_and_host_terms(brk, s_rows, base_name):
    """Timings priced by a profile whose GEMMs above `brk` rows run slower: the fit finds that break,
    its scale and the host terms (within 2 %), and the profile it writes prices the steps back."""
    base = load_hardware(base_name)
    steps, times = regime_steps(base, gemm_rows_break=brk, gemm_rows_pi_scale=s_rows)
    fit = fit_steps(steps, MODEL, base)
    assert fit.rows_break == brk
    for k, v in {**REGIME_TRUTH, "s_rows": s_rows}.items():
        assert fit.values[k] == pytest.approx(v, rel=0.02), k
    out = fit.hardware()
    assert (out.gemm_rows_break, out.gemm_rows_pi_scale) == (brk, pytest.approx(s_rows, rel=0.02))
    assert predict_steps(steps, MODEL, out, 1) == pytest.approx(np.array(times), rel=0.01)


def test_prefill_step_term_held_when_every_prefill_step_has_one_prefill():
    """With one prefill sequence in every prefill step the per-prefill-step term is the
    per-prefill-sequence term: held at 0, and the other recovers their sum."""
    base = load_hardware("h100")
    cm = CostModel(MODEL, base.replace(host_step_s=1e-3, host_per_prefill_seq_s=0.5e-3, host_prefill_step_s=2e-3))
    rng = np.random.default_rng(2)
    n = 200
    npf, q = (rng.random(n) < 0.5).astype(int), rng.integers(64, 3000, n)
    nd, kvd = rng.integers(0, 100, n), rng.integers(100, 4000, n)
    nd[npf == 0] = np.maximum(nd[npf == 0], 1)
    times = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [0] * int(p) + [int(v)] * int(d))
        for p, a, d, v in zip(npf, q, nd, kvd)
    ]
    fit = fit_steps(uniform_steps(npf, q, np.zeros(n, int), nd, kvd, times, "synthetic"), MODEL, base)
    assert fit.values["host_prefill_step_s"] == 0.0
    assert fit.values["host_per_prefill_seq_s"] == pytest.approx(2.5e-3, rel=0.02)
    assert any(w.startswith("host_prefill_step_s not identified") for w in fit.warnings)


@pytest.mark.parametrize(
    "field,value",
    [
        ("gemm_rows_break", -1),
        ("gemm_rows_break", 2.5),
        ("gemm_rows_budget", -3),
        ("gemm_rows_budget", "100\ngemm_rows_break: 50"),
        ("gemm_rows_pi_scale", 0.0),
        ("host_prefill_step_s", -1e-3),
    ],
)
def test_bad_regime_and_host_fields_name_the_field(tmp_path, field, value):
    p = tmp_path / "x.yaml"
    p.write_text(
        f"name: x\nmemory_bytes: 1\npeak_flops: 1\npeak_bandwidth: 1\npi_eff: 1\nbeta_eff: 1\n{field}: {value}\n"
    )
    with pytest.raises(InputError, match=field):
        load_hardware(str(p))


def test_no_rows_regime_without_one_in_the_data():
    base = load_hardware("h100")
    cm = CostModel(MODEL, base.replace(host_step_s=1e-3))
    npf, q, kvp, nd, kvd = synthetic_steps(np.random.default_rng(5))
    times = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [int(k)] * int(p) + [int(v)] * int(d))
        for p, a, k, d, v in zip(npf, q, kvp, nd, kvd)
    ]
    fit = fit_steps(uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic"), MODEL, base)
    assert fit.rows_break == 0 and fit.rows_budget == 0 and fit.values["s_rows"] == 1.0
    assert fit.hardware().gemm_rows_break == 0 and fit.hardware().gemm_rows_budget == 0
    assert any("no GEMM rows regime" in w for w in fit.warnings)


def test_rows_regime_prices_only_gemms_above_the_break():
    base = load_hardware("h100")
    slow = base.replace(gemm_rows_break=1024, gemm_rows_pi_scale=0.5)
    a, b = CostModel(MODEL, base), CostModel(MODEL, slow)
    assert b.step_time([1024], [0]) == a.step_time([1024], [0])
    lin = lambda cm, r: next(t for t in cm._weight_terms(r, 1) if t[0] == "linear")[3]
    assert lin(b, 1025) == pytest.approx(0.5 * lin(a, 1025))
    assert b.step_time([4096], [0]) > a.step_time([4096], [0]) * 1.3


@pytest.mark.parametrize("counting,brk,budget", [("seed", 0, 0), ("faithful", 1024, 0), ("faithful", 0, 1800)])
@pytest.mark.parametrize("base_name", ["a100-sxm", "h100-sxm"])  # wave-model attention; roofline attention
def test_step_pricing_is_the_simulators_step_time(counting, brk, budget, base_name):
    """The fit's pricing (tile GEMMs for every distinct row count at once) equals CostModel.step_time
    batch by batch, host terms included."""
    from costmodel.calibration.step_pricing import gpu_times, price_steps, step_shapes

    hw = load_hardware(base_name).replace(
        counting=counting, gemm_rows_break=brk, gemm_rows_budget=budget, gemm_rows_pi_scale=0.8
    )
    npf, q, kvp, nd, kvd = synthetic_steps(np.random.default_rng(4), 60)
    steps = uniform_steps(npf, q, kvp, nd, kvd, np.ones(60), "x")
    gpu = gpu_times(step_shapes(steps), MODEL, hw, 1)
    assert gpu == pytest.approx(priced(CostModel(MODEL, hw), npf, q, kvp, nd, kvd), rel=1e-12)
    host = hw.replace(host_step_s=1e-3, host_per_seq_s=2e-5, host_prefill_step_s=3e-3)
    assert price_steps(steps, MODEL, host, 1) == pytest.approx(
        priced(CostModel(MODEL, host), npf, q, kvp, nd, kvd), rel=1e-12
    )


@pytest.mark.parametrize(
    "name,tp,fields",
    [
        ("llama-3.1-8b", 1, {}),
        (
            "llama-3.1-8b",
            1,
            dict(
                counting="faithful",
                gemm_tile_rows=64,
                sampler_s=1e-4,
                sampler_seq_s=1e-6,
                elementwise_beta=2e12,
                roofline_combine="max",
            ),
        ),
        ("bloom-176b", 8, dict(gemm_tile_rows=128, gemm_rows_break=1024, gemm_rows_pi_scale=0.7)),
        ("bloom-176b", 8, dict(gemm_tile_rows=128, gemm_rows_budget=1500, gemm_rows_pi_scale=0.6)),
        ("llama-3.1-70b", 4, dict(allreduce_oneshot_tokens=512, step_overhead_s=1e-4, counting="faithful")),
        ("qwen3-32b", 2, dict(pcie_gts=32, pcie_lanes=16, pcie_p2p=True, compute_capability=12.0, counting="faithful")),
        ("llama-3.1-8b", 4, dict(pcie_gts=16, pcie_lanes=16, compute_capability=8.9)),
    ],
)
def test_roofline_step_pricing_is_step_time_bit_for_bit(name, tp, fields):
    """Roofline profiles: the fit's elementwise pricing (attention sums, weight operators, all-reduce
    regimes) gives CostModel.step_time's bits for every batch, wide ones (> 48 prefills) included."""
    from costmodel.calibration.step_pricing import gpu_times, step_shapes

    model = load_model(name)
    base = load_hardware("a100-80gb")
    hw = base.replace(
        **fields,
        **(
            {"allreduce_regimes": load_hardware("a100-sxm").allreduce_regimes}
            if "allreduce_oneshot_tokens" in fields
            else {}
        ),
    )
    rng = np.random.default_rng(8)
    npf, q, kvp, nd, kvd = synthetic_steps(rng, 300)
    q[::5] = rng.integers(1, 80, len(q[::5]))  # short chunks: either side of the attention bound
    npf[:3] = 60
    steps = uniform_steps(npf, q, kvp, nd, kvd, np.ones(300), "x", tp=tp)
    cm = CostModel(model, hw, tp)
    ref = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [int(k)] * int(p) + [int(v)] * int(d))
        for p, a, k, d, v in zip(npf, q, kvp, nd, kvd)
    ]
    assert gpu_times(step_shapes(steps), model, hw, tp).tolist() == ref


def test_second_beta_start_only_where_a_unit_decode_is_flat_in_beta():
    """The second s_beta start (LOW_BETA_START) is tried where the unit decode model prices a decode
    by its thread blocks' flow at the first solution (the shipped A100 constants under the flow
    split, at 1 GB/s in flight per thread block, make long decodes flow-bound), not for roofline
    attention."""
    from costmodel.calibration.step_pricing import step_shapes
    from costmodel.calibration.steps import _flat_decodes, _Pricer

    n = np.array([1, 4, 16, 64, 256])
    steps = uniform_steps(np.zeros(5, int), np.zeros(5, int), np.zeros(5, int), n, n * 2000, np.ones(5), "x")
    profiles = {
        "a100-sxm, flow split": load_hardware("a100-sxm").replace(attn_decode_split="flow", attn_decode_cta_beta=1e9),
        "h100": load_hardware("h100"),
        "a100-80gb": load_hardware("a100-80gb"),
    }
    flat = {
        name: _flat_decodes(_Pricer(step_shapes(steps), MODEL, hw, 1), (0.85, 0.974, 0.85, 1.0))
        for name, hw in profiles.items()
    }
    assert flat == {"a100-sxm, flow split": True, "h100": False, "a100-80gb": False}


def test_rows_regime_scales_the_tile_models_gemms_above_the_break():
    base = load_hardware("a100-sxm")
    slow = base.replace(gemm_rows_break=1024, gemm_rows_pi_scale=0.5)
    a, b = CostModel(MODEL, base), CostModel(MODEL, slow)
    assert b._fixed_time(1024, 1) == a._fixed_time(1024, 1)
    half = CostModel(MODEL, base.replace(pi_eff=base.pi_eff * 0.5))
    assert b._tiled_time("linear", 4096, 1) == half._tiled_time("linear", 4096, 1)
    assert b._tiled_time("linear", 4096, 1) > 1.5 * a._tiled_time("linear", 4096, 1)


@pytest.mark.parametrize("s_pi,s_pa", [(0.9, 0.3), (0.6, 1.1)])
def test_fit_recovers_a_separate_attention_scale(s_pi, s_pa):
    base = load_hardware("a100-80gb")
    hw = base.replace(pi_eff=base.pi_eff * s_pi, pi_attn=base.pi_attention * s_pa, host_step_s=1e-3)
    cm = CostModel(MODEL, hw)
    npf, q, kvp, nd, kvd = synthetic_steps(np.random.default_rng(3))
    times = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [int(k)] * int(p) + [int(v)] * int(d))
        for p, a, k, d, v in zip(npf, q, kvp, nd, kvd)
    ]
    fit = fit_steps(uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic"), MODEL, base)
    assert fit.values["s_pi"] == pytest.approx(s_pi, rel=0.02)
    assert fit.values["s_pi_attn"] == pytest.approx(s_pa, rel=0.02)
    assert fit.hardware().pi_attention == pytest.approx(base.pi_attention * s_pa, rel=0.02)
    assert not any("s_pi_attn" in w for w in fit.warnings)


def test_attention_scale_tied_to_pi_when_attention_is_negligible():
    steps = uniform_steps(
        [0] * 5, [0] * 5, [0] * 5, [8, 16, 32, 64, 128], [100] * 5, [0.010, 0.0105, 0.011, 0.012, 0.014], "x"
    )
    fit = fit_steps(steps, MODEL, load_hardware("h100"))
    assert fit.values["s_pi_attn"] == fit.values["s_pi"]
    assert fit.hardware().pi_attn is None  # priced at pi_eff, as the base does
    assert any("s_pi_attn not identified" in w for w in fit.warnings)


def test_fit_clamps_at_spec_peaks_and_says_so():
    base = load_hardware("h100")
    fast = base.replace(pi_eff=base.peak_flops * 1.5, beta_eff=base.peak_bandwidth * 1.4)
    cm = CostModel(MODEL, fast)
    npf, q, kvp, nd, kvd = synthetic_steps(np.random.default_rng(1), 200)
    times = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [int(k)] * int(p) + [int(v)] * int(d))
        for p, a, k, d, v in zip(npf, q, kvp, nd, kvd)
    ]
    fit = fit_steps(uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic"), MODEL, base)
    hw = fit.hardware()
    assert hw.pi_eff <= base.peak_flops * (1 + 1e-9) and hw.beta_eff <= base.peak_bandwidth * (1 + 1e-9)
    assert any("pi_eff at peak_flops" in w for w in fit.warnings)
    assert any("beta_eff at peak_bandwidth" in w for w in fit.warnings)


def test_unidentified_host_terms_are_held_at_zero():
    steps = uniform_steps(
        [0] * 5, [0] * 5, [0] * 5, [8] * 5, [100, 500, 1000, 2000, 4000], [0.01, 0.011, 0.012, 0.014, 0.018], "x"
    )
    fit = fit_steps(steps, MODEL, load_hardware("h100"))
    assert fit.values["host_per_prefill_seq_s"] == 0.0 and fit.values["host_per_seq_s"] == 0.0
    assert fit.values["host_prefill_step_s"] == 0.0
    assert sum(w.startswith("host_") and "not identified" in w for w in fit.warnings) == 3
    assert any(w.startswith("s_pi_attn not identified") for w in fit.warnings)  # decode attention is memory-bound


def test_fit_of_40k_steps_is_fast():
    rng = np.random.default_rng(2)
    npf, q, kvp, nd, kvd = synthetic_steps(rng, 40_000)
    steps = uniform_steps(npf, q, kvp, nd, kvd, rng.uniform(0.01, 0.2, 40_000), "synthetic")
    fit = fit_steps(steps, MODEL, load_hardware("h100"))
    assert fit.points == 40_000 and fit.seconds < 30  # bench_steps prints the figure; this only guards a blow-up


def test_calibrate_cli_from_steps(tmp_path, capsys):
    from experiments.cli import main

    assert (
        main(
            [
                "calibrate",
                "--from",
                "splitwise",
                str(DATA / "splitwise_rows.csv"),
                "--gpu",
                "a100-80gb",
                "--model",
                "bloom-176b",
                "--base",
                "a100-80gb",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    hw = load_hardware(str(tmp_path / "fitted.yaml"))
    assert hw.pi_eff <= hw.peak_flops and hw.calibration["step_fit"]["tp"] == 8
    assert main(["calibrate", "--from", "vllm-log", str(DATA / "steps.csv")]) == 2
    assert "Iteration" in capsys.readouterr().err
    pd.testing.assert_frame_equal(
        load_steps(DATA / "splitwise_rows.csv", "splitwise", gpu="a100-80gb"),
        load_steps(DATA / "splitwise_rows.csv", "steps", gpu="a100-80gb"),
    )


SPLITWISE = Path(__file__).resolve().parents[2] / "shared" / "data" / "steps" / "splitwise_bloom176b.csv"


@pytest.mark.skipif(not SPLITWISE.is_file(), reason="needs the shared step data")
def test_calibrate_from_splitwise_writes_the_rows_budget(tmp_path, capsys):
    """`chunksim calibrate --from splitwise` on Splitwise's A100 BLOOM-176B table: the fit's rows
    budget reaches the written profile, which prices the table as the fit reported."""
    from experiments.cli import main

    assert (
        main(
            [
                "calibrate",
                "--from",
                "splitwise",
                str(SPLITWISE),
                "--gpu",
                "a100-80gb",
                "--model",
                "bloom-176b",
                "--base",
                "a100-80gb",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert "GEMM rows past" in capsys.readouterr().out
    hw = load_hardware(str(tmp_path / "fitted.yaml"))
    rec = hw.calibration["step_fit"]
    assert hw.gemm_rows_budget == rec["gemm_rows_budget"] > 0 and hw.gemm_rows_break == 0 and hw.gemm_rows_pi_scale < 1
    steps = load_steps(SPLITWISE, "splitwise", gpu="a100-80gb")
    pred = predict_steps(steps, load_model("bloom-176b"), hw, 8)
    fitted = {e["kind"]: e["mape"] for e in rec["errors_percent"]}
    for kind in ("prefill", "decode"):
        at = (steps.kind == kind).to_numpy()
        assert np.abs(pred[at] / steps.time_s.to_numpy()[at] - 1).mean() * 100 == pytest.approx(fitted[kind], rel=1e-6)


def test_kernel_and_step_sources_compose(tmp_path):
    """--from vidur … --from steps …: kernels fit the base, the step fit scales it and adds host time."""
    from experiments.cli import main

    kernels = Path(__file__).resolve().parents[1] / "costmodel" / "calibration_data" / "h100_llama-2-7b_mlp.csv"
    cm = CostModel(MODEL, load_hardware("h100").replace(host_step_s=1e-3, host_per_seq_s=20e-6))
    shapes = [
        ([700], [0]),
        ([1] * 8, [500] * 8),
        ([1] * 40, [1500] * 40),
        ([300, 1, 1], [0, 90, 900]),
        ([2000], [1000]),
        ([1] * 3, [100] * 3),
    ]
    rows = [(i, q, kv, cm.step_time(qs, kvs)) for i, (qs, kvs) in enumerate(shapes) for q, kv in zip(qs, kvs)]
    pd.DataFrame(rows, columns=["step", "q_len", "kv_len", "time_s"]).to_csv(tmp_path / "steps.csv", index=False)
    assert (
        main(
            [
                "calibrate",
                "--from",
                "vidur",
                str(kernels),
                "--from",
                "steps",
                str(tmp_path / "steps.csv"),
                "--out",
                str(tmp_path / "cal"),
            ]
        )
        == 0
    )
    hw = load_hardware(str(tmp_path / "cal" / "fitted.yaml"))
    cal = hw.calibration
    assert "step_fit" in cal and "gemm.pi" in cal["kernel_fit"]["parameters"] and "log_covariance" not in cal
    s_pi = cal["step_fit"]["parameters"]["s_pi"]["value"]
    assert hw.pi_eff == pytest.approx(s_pi * cal["kernel_fit"]["parameters"]["gemm.pi"]["value"], rel=1e-9)
    assert hw.host_step_s + hw.host_per_seq_s > 0 and hw.pi_eff <= hw.peak_flops


@pytest.mark.parametrize("base", ["a100-80gb", "h100"])
def test_prefill_physical_terms_stay_monotone_in_rows(base):
    """What bench_steps' data reason rests on: in BLOOM-176B tp 8, the all-reduce costs no more per row
    as rows grow, and attention at a fixed prompt costs the same per token at any batch (ALiBi's bias
    sits inside it), so neither can make 512x16 dearer per token than 512x8 and 512x32."""
    from costmodel import CostModel, load_hardware, load_model

    cm = CostModel(load_model("bloom-176b"), load_hardware(base), 8)
    rows = [1024, 2048, 4096, 8192, 16384, 32768]
    per_row = [cm.allreduce_s(r) / r for r in rows]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(per_row, per_row[1:]))
    att = [
        cm.breakdown(cm.shape(np.full(b, 512), np.zeros(b, dtype=int))).op("attention_prefill").time_s / b
        for b in (4, 8, 16, 32, 64)
    ]
    assert max(att) / min(att) - 1 < 0.02


@pytest.mark.parametrize(
    "budget,s_rows,base_name", [(3000, 0.6, "h100"), (1300, 0.75, "a100-80gb"), (2500, 0.7, "a100-sxm")]
)
def test_fit_recovers_a_gemm_rows_budget_and_host_terms(budget, s_rows, base_name):
    """Timings priced by a profile whose steps run their first `budget` GEMM rows at π and the rest
    at s_rows·π (a budget off the fit's starting grid): the fit finds the budget (to 2 %), its scale
    and the host terms, and the profile it writes prices the steps back."""
    base = load_hardware(base_name)
    steps, times = regime_steps(base, gemm_rows_budget=budget, gemm_rows_pi_scale=s_rows)
    fit = fit_steps(steps, MODEL, base)
    assert fit.rows_break == 0 and fit.rows_budget == pytest.approx(budget, rel=0.02)
    for k, v in {**REGIME_TRUTH, "s_rows": s_rows}.items():
        assert fit.values[k] == pytest.approx(v, rel=0.02), k
    out = fit.hardware()
    assert (out.gemm_rows_budget, out.gemm_rows_pi_scale) == (fit.rows_budget, pytest.approx(s_rows, rel=0.02))
    assert predict_steps(steps, MODEL, out, 1) == pytest.approx(np.array(times), rel=0.01)


def test_rows_budget_prices_only_the_rows_past_it():
    """Past the budget B a step's GEMMs cost B rows at π plus the rest at s·π: the increment per
    row beyond B is 1/s of the one below, and a step within the budget is priced as without one."""
    base = load_hardware("h100")
    cm0, cm = CostModel(MODEL, base), CostModel(MODEL, base.replace(gemm_rows_budget=2000, gemm_rows_pi_scale=0.5))
    assert cm.step_time([2000], [0]) == cm0.step_time([2000], [0])
    gemm = lambda c, r: next(c._op_time(*t[1:]) for t in c._weight_terms(r, 1) if t[0] == "linear")  # noqa: E731
    assert gemm(cm, 6000) - gemm(cm, 2000) == pytest.approx(2 * (gemm(cm0, 6000) - gemm(cm0, 2000)), rel=1e-9)
    tiles = load_hardware("a100-sxm")
    a, b = CostModel(MODEL, tiles), CostModel(MODEL, tiles.replace(gemm_rows_budget=1024, gemm_rows_pi_scale=0.5))
    assert b._tiled_time("linear", 4096, 1) == pytest.approx(
        a._tiled_time("linear", 4096, 1) * (1024 + 2 * 3072) / 4096, rel=1e-3
    )


def test_fit_by_session_gives_each_session_its_own_throttle():
    """Two recording sessions whose steps past the budget run at different scales: with sessions the
    fit recovers both (and the budget); the profile of each prices that session's steps back."""
    base = load_hardware("h100")
    rng = np.random.default_rng(21)
    npf, q, kvp, nd, kvd = synthetic_steps(rng)
    lab = np.where(rng.random(len(q)) < 0.5, "a", "b")
    host = dict(host_step_s=1e-3, host_prefill_step_s=2e-3)
    truth = {"a": 0.6, "b": 0.8}
    times = np.empty(len(q))
    for k, s in truth.items():
        cm = CostModel(MODEL, base.replace(gemm_rows_budget=2500, gemm_rows_pi_scale=s, **host))
        at = lab == k
        times[at] = priced(cm, npf[at], q[at], kvp[at], nd[at], kvd[at])
    steps = uniform_steps(npf, q, kvp, nd, kvd, times, "synthetic").assign(session=lab)
    fit = fit_steps(steps, MODEL, base, sessions=True)
    assert fit.rows_budget == pytest.approx(2500, rel=0.02)
    assert fit.session_rows == {k: pytest.approx(v, rel=0.02) for k, v in truth.items()}
    for k in truth:
        at = lab == k
        assert predict_steps(steps[at], MODEL, fit.hardware(session=k), 1) == pytest.approx(times[at], rel=0.01)
    with pytest.raises(InputError, match="session"):
        fit.hardware(session="c")
    with pytest.raises(InputError, match="session"):
        fit_steps(steps.drop(columns="session"), MODEL, base, sessions=True)


@pytest.mark.parametrize("keep", ["both", "prefill", "decode"])
def test_a_step_table_of_one_kind_says_which_kind_is_extrapolated(keep):
    """Steps of one kind only fit, and the warnings name the kind the profile extrapolates to."""
    base = load_hardware("h100")
    cm = CostModel(MODEL, base.replace(host_step_s=1e-3, host_per_seq_s=20e-6))
    rng = np.random.default_rng(4)
    n = 120
    npf = {"both": (rng.random(n) < 0.5).astype(int), "prefill": np.ones(n, int), "decode": np.zeros(n, int)}[keep]
    q, nd, kvd = rng.integers(64, 3000, n), rng.integers(1, 100, n), rng.integers(100, 4000, n)
    nd[npf > 0] = 0 if keep == "prefill" else nd[npf > 0]
    times = [
        cm.step_time([int(a)] * int(p) + [1] * int(d), [0] * int(p) + [int(v)] * int(d))
        for p, a, d, v in zip(npf, q, nd, kvd)
    ]
    fit = fit_steps(uniform_steps(npf, q, np.zeros(n, int), nd, kvd, times, "synthetic"), MODEL, base)
    no_decode = any(w.startswith("no decode-only steps") for w in fit.warnings)
    no_prefill = any(w.startswith("no step with a prefill") for w in fit.warnings)
    assert (no_decode, no_prefill) == {"both": (False, False), "prefill": (True, False), "decode": (False, True)}[keep]
