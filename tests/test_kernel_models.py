"""The physical kernel models: tile/wave GEMMs (costmodel/gemm_tiles.py) and unit decode attention
(costmodel/decode_units.py): known constants recovered from synthetic timings, spec caps honoured,
monotone in the work, and priced by the cost model with the same formula the fit uses."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from costmodel import CostModel, load_hardware, load_model
from costmodel.calibration.fit import fit
from costmodel.calibration.importers.tables import drop_floor
from costmodel.calibration.operator_models import attention_times
from costmodel.calibration.profile import profile_from_fit
from costmodel.calibration.timings import attention_row, gemm_row
from costmodel.decode_launch import mmha_launch, xqa_dispatched
from costmodel.decode_units import PARAMS as DEC, decode_unit_time, decode_unit_times, xqa_blocks
from costmodel.gemm_tiles import PARAMS, GemmTiles, layer_gemms
from costmodel.hardware import hardware_from_dict

MiB = 1 << 20
A100 = load_hardware("a100-80gb").replace(sms=108, l2_bytes=40.0 * MiB)
TRUE = dict(
    pi=250e12, beta=1.6e12, beta_l2=6e12, beta_cta=60e9, floor=3e-6, split=2e-6, wave=4e-7, l2=20e6, l2_out=30e6
)


def gemm_table(model: GemmTiles, scale=None) -> pd.DataFrame:
    m = np.array([1, 2, 8, 16, 64, 96, 128, 200, 256, 512, 1000, 2048, 4096, 8192], float)
    nk = [(n, k) for n in (256, 1024, 3072, 4096, 8192, 14336) for k in (128, 1024, 4096, 8192)]
    M = np.repeat(m, len(nk))
    N, K = (np.tile(np.array([x[i] for x in nk], float), len(m)) for i in (0, 1))
    t = model.times(M, N, K)
    return pd.DataFrame(gemm_row("gemm", M, K, N, 2, t * (1 if scale is None else scale)))


@pytest.mark.parametrize("sms", [108, 132])
def test_gemm_tiles_recovers_known_constants(sms):
    truth = GemmTiles(**TRUE, sms=sms)
    f = fit(gemm_table(truth), form="physical", spec=A100.replace(sms=sms))
    g = f.classes["gemm"]
    got = dict(zip(g.params, g.values))
    for p in ("pi", "beta", "floor", "beta_l2"):
        assert got[p] == pytest.approx(TRUE[p], rel=0.02), p
    assert g.errors["mape"] < 0.5


def test_gemm_tiles_clamps_at_the_spec_peak():
    too_fast = GemmTiles(**{**TRUE, "pi": 2 * A100.peak_flops}, sms=108)
    f = fit(gemm_table(too_fast), form="physical", spec=A100)
    assert f.value("gemm.pi") <= A100.peak_flops * (1 + 1e-9)
    assert any("gemm.pi clamped" in w for w in f.warnings)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20000), n=st.sampled_from([128, 1000, 4096, 14336]), k=st.sampled_from([64, 4096, 16384]))
def test_gemm_time_never_falls_with_more_rows(m, n, k):
    g = GemmTiles(**TRUE, sms=132)
    assert g.time(m + 1, n, k) >= g.time(m, n, k) * (1 - 1e-12)


def test_gemm_waves_quantize_time():
    """One more row past a full wave of 128×256 tiles starts a second wave: the time jumps, while
    inside a wave it barely moves (compute-bound shape)."""
    g = GemmTiles(**{**TRUE, "beta_cta": 1e12}, sms=108)
    n, k = 256 * 108, 8192  # one 128×256 tile column per SM at m = 128
    inside, across = g.time(120, n, k) / g.time(64, n, k), g.time(129, n, k) / g.time(128, n, k)
    assert across > 1.3 and inside < across


def test_gemm_activations_and_weights_have_their_own_l2_capacity():
    """Without l2_act the inputs are resident together below l2 (the form before it); with it, a
    GEMM whose activations fit l2_act while its weights exceed l2 reads the activations at the L2
    rate: faster than the combined form, never faster than reading every byte from the L2, and
    the same as the combined form once the activations exceed the L2 too."""
    free = {**TRUE, "beta_cta": 1e12, "pi": 1e16, "beta_l2": 5e13}  # the bytes are the limit
    old = GemmTiles(**free, sms=108)
    assert old.values[-1] == 0.0 and len(old.values) == len(PARAMS)
    new = GemmTiles(**free, sms=108, l2_act=100e6)
    m, n = 8192.0, 32.0
    for k in (2048.0, 3072.0):  # X = 2·m·k = 34–50 MB: within l2_act, beyond l2
        fast, slow = new.time(m, n, k), old.time(m, n, k)
        everything_l2 = 2 * (m * k + n * k + m * n) / free["beta_l2"]
        assert fast < 0.5 * slow and fast >= everything_l2
    k = 16384.0  # X = 268 MB: out of every capacity (W = 1 MB still in)
    assert new.time(m, n, k) == pytest.approx(old.time(m, n, k), rel=0.01)
    assert GemmTiles(**{**free, "l2": 1e12}, sms=108, l2_act=1e12).time(m, n, 1024.0) == pytest.approx(
        GemmTiles(**{**free, "l2": 1e12}, sms=108).time(m, n, 1024.0), rel=1e-9
    )


def test_gemm_fit_recovers_the_activation_capacity():
    truth = GemmTiles(**TRUE, sms=108, l2_act=35e6)
    m = np.repeat([1024.0, 2048.0, 4096.0, 8192.0], 6)
    n = np.tile([32.0, 64.0, 128.0], 8)
    k = np.tile(np.repeat([2048.0, 4096.0], 3), 4)
    df = pd.concat(
        [gemm_table(truth), pd.DataFrame(gemm_row("gemm", m, k, n, 2, truth.times(m, n, k)))], ignore_index=True
    )
    g = fit(df, form="physical", spec=A100).classes["gemm"]
    got = dict(zip(g.params, g.values))
    assert got["l2_act"] == pytest.approx(35e6, rel=0.1)
    assert g.errors["mape"] < 0.5


def test_roofline_prices_weight_gemms_with_the_tile_model():
    hw = A100.replace(
        gemm_form="tiles",
        pi_eff=TRUE["pi"],
        beta_eff=TRUE["beta"],
        kernel_overhead_s=TRUE["floor"],
        gemm_l2_beta=TRUE["beta_l2"],
        gemm_cta_beta=TRUE["beta_cta"],
        gemm_split_s=TRUE["split"],
        gemm_wave_s=TRUE["wave"],
        gemm_l2_resident_bytes=TRUE["l2"],
        gemm_l2_out_bytes=TRUE["l2_out"],
        gemm_l2_act_bytes=25e6,
        counting="faithful",
    )
    hw = hardware_from_dict(yaml.safe_load(hw.to_yaml()))
    model = load_model("llama-3.1-8b")
    tiles = GemmTiles(**TRUE, sms=108, l2_act=25e6)
    for tp in (1, 2):
        cm = CostModel(model, hw, tp)
        k, n, count = layer_gemms(model, tp)
        assert len(k) == 4 and count[0] == model.L
        for rows in (1, 77, 4096):
            want = sum(c * tiles.time(rows, nn, kk) for kk, nn, c in zip(k, n, count))
            want += math.hypot(2 * cm.lin_rest * rows / hw.pi_eff, 2 * cm.lin_rest / hw.beta_eff)
            got = cm.breakdown(cm.shape([rows], [0])).op("linear").time_s
            assert got == pytest.approx(want, rel=1e-12)
            assert cm.step_time([rows], [0]) == pytest.approx(cm.breakdown(cm.shape([rows], [0])).time_s, rel=1e-12)


DEC_TRUE = dict(
    pi_decode=40e12,
    beta_decode=1.5e12,
    beta_decode_mha=0.9e12,
    beta_l2_decode=4e12,
    l2_decode=30e6,
    cta_decode=10e9,
    unit_q=0.02,
    unit=5e-8,
    overhead_decode=1.1e-5,
    unit_mha=1.7e-8,
    overhead_decode_mha=1.0e-5,
    combine=2e-7,
    pi_decode_mha=20e12,
    loop_mha=7e-7,
    l2_pass=8e6,
    hidden_keys=64.0,
    combine_fixed=1.5e-6,
    beta_issue=2.5e12,
)


def decode_table(v) -> pd.DataFrame:
    rows = []
    for h, hkv in ((32, 8), (64, 8), (32, 32), (8, 1), (64, 1), (40, 40), (28, 4), (32, 1)):
        for b in (1, 4, 16, 64, 256, 1024):
            for kv in (7, 63, 511, 4095, 32767):
                rows.append((b, kv, h, hkv))
    b, kv, h, hkv = (np.array(x, float) for x in zip(*rows))
    F, B = 4 * h * 128 * (kv + 1) * b, 2 * 2 * 128 * hkv * (kv + 1) * b
    t = decode_unit_times(v, b, kv + 1, F, B, h, hkv, 108)
    return pd.DataFrame(attention_row("attention", b, 1.0, kv, h, hkv, 128, 2, t)).assign(
        op="attention_decode", decode_flops=F, decode_bytes=B + 4 * 128 * b * h
    )


def test_unit_decode_recovers_known_constants():
    v = [DEC_TRUE[p] for p in DEC]
    f = fit(decode_table(v), form="physical", spec=A100)
    a = f.classes["attention"]
    assert a.errors["mape"] < 1.0
    got = dict(zip(a.params, a.values))
    for p in (
        "beta_decode",
        "beta_decode_mha",
        "unit",
        "unit_mha",
        "overhead_decode",
        "overhead_decode_mha",
        "combine",
    ):
        assert got[p] == pytest.approx(DEC_TRUE[p], rel=0.05), p


def test_unit_decode_picks_the_grouping_the_table_follows():
    """Timings made with a grouped kernel that stops at g = 16 (B200-like) are fitted with that rule."""
    v = [DEC_TRUE[p] for p in DEC]
    df = decode_table(v)
    b, kv, h, hkv = (df[c].to_numpy(float) for c in ("seqs", "k", "heads", "kv_heads"))
    F, B = 4 * h * 128 * (kv + 1) * b, 2 * 2 * 128 * hkv * (kv + 1) * b
    df["time_s"] = decode_unit_times(v, b, kv + 1, F, B, h, hkv, 108, (2, 16))
    f = fit(df, form="physical", spec=A100)
    assert f.classes["attention"].groups == (2, 16, "flow") and f.classes["attention"].errors["mape"] < 2.0


@pytest.mark.parametrize("split,alias", [("xqa", 0.0), ("launch", 1.0), ("gen", 1.0)])
def test_unit_decode_picks_the_splitting_the_table_follows(split, alias):
    """Timings made with XQA's multi-block split (per-wave costs), or with TensorRT-LLM's dispatch
    and MMHA launch rules over a K-only table (decode_launch), are fitted with that split, and a
    profile from the fit carries it and prices serving decodes (no K-only alias) by it."""
    v = [
        {
            **DEC_TRUE,
            "unit": 4e-6 if split != "gen" else DEC_TRUE["unit"],
            "unit_mha": 7e-6 if split in ("launch", "gen") else DEC_TRUE["unit_mha"],
        }[p]
        for p in DEC
    ]
    df = decode_table(v).assign(kv_alias=alias)
    b, kv, h, hkv = (df[c].to_numpy(float) for c in ("seqs", "k", "heads", "kv_heads"))
    F, B = 4 * h * 128 * (kv + 1) * b, 2 * 2 * 128 * hkv * (kv + 1) * b
    df["time_s"] = decode_unit_times(v, b, kv + 1, F, B, h, hkv, 108, (2, 32, split), alias)
    f = fit(df, form="physical", spec=A100)
    assert f.classes["attention"].groups == (2, 32, split) and f.classes["attention"].errors["mape"] < 2.0
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(f, A100, "synthetic").to_yaml()))
    assert hw.attn_decode_split == split and hw.attn_decode_combine_s == pytest.approx(f.value("attention.combine"))
    model = load_model("llama-3.1-8b")
    cm = CostModel(model, hw, 1)
    fv = [f.value(f"attention.{p}") for p in DEC]
    for n, kv in ((1, 30000), (16, 1000), (300, 4000)):  # XQA splits each unit into 43, 6 and 1 block(s)
        got = cm.breakdown(cm.shape([1] * n, [kv] * n)).op("attention_decode").time_s
        h, hkv = model.h, model.h_kv
        want = model.L * decode_unit_time(
            fv, n, kv + 1, 4.0 * h * 128 * (kv + 1) * n, 4.0 * 128 * hkv * (kv + 1) * n, h, hkv, 108, (2, 32, split)
        )
        assert got == pytest.approx(want, rel=1e-12)


def test_launch_split_recovers_mmha_constants():
    """The launch split's MMHA terms (per-wave latency, key walk, value pass over a K-only cache)
    come back from timings made with them."""
    v = [{**DEC_TRUE, "unit": 4e-6, "unit_mha": 7e-6}[p] for p in DEC]
    df = decode_table(v).assign(kv_alias=1.0)
    b, kv, h, hkv = (df[c].to_numpy(float) for c in ("seqs", "k", "heads", "kv_heads"))
    F, B = 4 * h * 128 * (kv + 1) * b, 2 * 2 * 128 * hkv * (kv + 1) * b
    df["time_s"] = decode_unit_times(v, b, kv + 1, F, B, h, hkv, 108, (2, 32, "launch"), 1.0)
    got = fit(df, form="physical", spec=A100).classes["attention"]
    assert got.groups == (2, 32, "launch")
    for p, want in (
        ("unit_mha", 7e-6),
        ("loop_mha", DEC_TRUE["loop_mha"]),
        ("beta_decode_mha", DEC_TRUE["beta_decode_mha"]),
        ("overhead_decode_mha", DEC_TRUE["overhead_decode_mha"]),
        ("hidden_keys", DEC_TRUE["hidden_keys"]),
        ("combine_fixed", DEC_TRUE["combine_fixed"]),
    ):
        assert got.values[got.params.index(p)] == pytest.approx(want, rel=0.05), p


def test_gen_split_prices_grouped_rows_as_flow_and_the_rest_as_mmha():
    """Gen split (Blackwell): rows inside the grouping are priced as the flow split prices them with
    each block's first ``hidden_keys`` keys under its latency, the rest (beyond 16 query heads per KV
    head, TensorRT-LLM's MMHA fallback) as the launch split's MMHA."""
    v = [DEC_TRUE[p] for p in DEC]
    n, kv = np.array([1.0, 8, 64, 512]), np.array([65536.0, 4096, 512, 64])
    for h, hkv in ((32, 4), (96, 4), (32, 1), (16, 16)):
        F, B = 4.0 * h * 128 * kv * n, 2.0 * 128 * hkv * kv * n
        got = decode_unit_times(v, n, kv, F, B, h, hkv, 148, (1, 16, "gen"), 1.0)
        want = (
            decode_unit_times(v, n, kv, F, B, h, hkv, 148, (1, 16), 1.0, hidden=True)
            if h / hkv <= 16
            else decode_unit_times(v, n, kv, F, B, h, hkv, 148, (99, 99, "launch"), 1.0)
        )
        assert np.array_equal(got, want), (h, hkv)
    v = [{**DEC_TRUE, "pi_decode": 1e30}[p] for p in DEC]
    few = decode_unit_times(
        v, 512.0, 64.0, 4.0 * 32 * 128 * 64 * 512, 2.0 * 128 * 4 * 64 * 512, 32.0, 4.0, 148, (1, 16, "gen")
    )
    flat = decode_unit_times(
        v, 512.0, 2.0, 4.0 * 32 * 128 * 2 * 512, 2.0 * 128 * 4 * 2 * 512, 32.0, 4.0, 148, (1, 16, "gen")
    )
    assert float(few) == pytest.approx(float(flat), rel=1e-12)  # 64 keys per block: all under its latency


def test_xqa_blocks_first_keys_hide_under_the_wave_latency():
    """Launch split: an XQA block's first ``hidden_keys`` keys cost no time beyond its wave's latency
    (a batch whose blocks hold no more keys prices as its waves alone), the keys past them stream
    at the rate they would without the term."""
    v = {**DEC_TRUE, "pi_decode": 1e30, "unit": 4e-6, "hidden_keys": 96.0}
    price = lambda v, kv: float(
        decode_unit_times(
            [v[p] for p in DEC],
            64.0,
            kv,
            4.0 * 32 * 128 * kv * 64,  # noqa: E731
            2.0 * 2 * 128 * 8 * kv * 64,
            32.0,
            8.0,
            108,
            (2, 32, "launch"),
        )
    )
    assert bool(xqa_dispatched(64.0, 8.0, 96.0, 108)) and float(xqa_blocks(64.0, 512.0, 96.0, 108)) == 1.0
    waves = math.ceil(64 * 8 / 108)
    alone = waves * v["unit"] + v["overhead_decode"]  # 4 query heads: one 16-row tile, no rows past it
    for kv in (2.0, 40.0, 96.0):
        assert price(v, kv) == pytest.approx(alone, rel=1e-12)
    none = {**v, "hidden_keys": 0.0}
    assert price(v, 150.0) - alone == pytest.approx((price(none, 150.0) - alone) * (1 - 96 / 150), rel=1e-9)


@pytest.mark.parametrize("units,kv,split", [(32, 4096, 4), (64, 4096, 2), (64, 511, 1), (500, 4096, 1)])
def test_split_launch_pays_its_reduction_once(units, kv, split):
    """Launch split: an MMHA launch whose units split into m > 1 blocks (mmha_launch) pays the fixed
    cost of its reduction once, beside m times the per-block combine; an unsplit one pays neither."""
    assert float(mmha_launch(float(units), float(kv), 108)[2]) == split
    price = lambda c0: float(
        decode_unit_times(
            [{**DEC_TRUE, "combine_fixed": c0}[p] for p in DEC],
            float(units),
            float(kv),  # noqa: E731
            4.0 * 128 * kv * units,
            2.0 * 2 * 128 * kv * units,
            1.0,
            1.0,
            108,
            (2, 32, "launch"),
        )
    )
    assert price(3e-6) - price(0.0) == pytest.approx(3e-6 if split > 1 else 0.0, abs=1e-15)


@pytest.mark.parametrize(
    "n,hkv,kv,sms,want",
    [
        (8, 1, 512, 108, True),  # 8·⌊512/128⌋·4 = 128 ≥ 108
        (8, 1, 511, 108, False),  # 8·3·4 = 96
        (16, 1, 100, 108, False),  # under 128 keys: one block per unit, 64 < 108
        (27, 1, 100, 108, True),  # 108
        (1, 8, 5000, 132, True),
    ],
)  # 8·39·4
def test_xqa_runs_only_when_its_blocks_fill_the_gpu(n, hkv, kv, sms, want):
    assert bool(xqa_dispatched(float(n), float(hkv), float(kv), sms)) is want


@pytest.mark.parametrize(
    "units,kv,want",
    [
        (64, 511, (1024, 1, 1)),  # factor min(⌈432/64⌉, 4) = 4: 1024 threads, 512 keys per loop: 511 + 1 fit one
        (64, 512, (1024, 1, 2)),  # ... 512 + 1 do not (tlength + 1 keys)
        (64, 4096, (1024, 1, 2)),  # ⌈108/64⌉ = 2 blocks per unit
        (200, 4096, (512, 2, 1)),  # factor 3 → 512 threads, 2 per SM: ⌈216/200⌉ = 2, but at most ⌈108/200⌉ = 1
        (200, 200, (512, 2, 1)),  # 200 keys fit one 256-key loop
        (500, 4096, (256, 4, 1)),
    ],
)  # ≥ 4·SMs blocks: 256 threads, no split
def test_mmha_launch_follows_tensorrt_llm_launcher(units, kv, want):
    assert tuple(float(x) for x in mmha_launch(float(units), float(kv), 108)) == want


def test_mmha_split_is_capped_at_one_wave_of_big_blocks():
    """TensorRT-LLM sizes MMHA's split buffers for one 1,024-thread block per SM
    (AttentionOp::getMaxNumSeqLenTile: ⌈SMs/units⌉) and multi_block_grid_setup clamps the balanced
    split ⌈SMs·P/units⌉ to it, so 512-thread grids (P = 2) of SMs to 2·SMs units run unsplit (A100,
    192 units at 31-127 keys: 14.1-14.4 µs, as 96 units in one wave, not 128 in two: 21.7-26.2);
    and its loop covers ⌈T/threads per value⌉·8 keys, 1,024 at d = 64 (8 threads a value)."""
    assert [float(mmha_launch(u, 4096.0, 108)[2]) for u in (150.0, 192.0, 215.0)] == [1.0, 1.0, 1.0]
    assert float(mmha_launch(100.0, 4096.0, 108)[2]) == 2.0
    assert float(mmha_launch(64.0, 1000.0, 108, 4, 8.0)[2]) == 1.0
    assert float(mmha_launch(64.0, 1000.0, 108, 4, 16.0)[2]) == 2.0


def test_mmha_launch_follows_the_blocks_per_sm():
    """With 3 blocks of 256 threads per SM (768 threads) a grid of 128 units gets 512-thread blocks,
    one per SM (factor min(⌈3·148/128⌉, 3) = 3: 768 threads, rounded down to 512), and 512 units
    256-thread ones, three per SM."""
    assert tuple(float(x) for x in mmha_launch(128.0, 4096.0, 148, 3)) == (512, 1, 2)
    assert tuple(float(x) for x in mmha_launch(512.0, 4096.0, 148, 3)) == (256, 3, 1)
    assert tuple(float(x) for x in mmha_launch(128.0, 4096.0, 148)) == (1024, 1, 2)


def test_fit_finds_mmha_occupancy():
    """Timings made with MMHA at 3 blocks per SM are fitted with that occupancy, which the profile
    carries and prices serving decodes by."""
    v = [{**DEC_TRUE, "unit": 4e-6, "unit_mha": 7e-6}[p] for p in DEC]
    df = decode_table(v).assign(kv_alias=1.0)
    b, kv, h, hkv = (df[c].to_numpy(float) for c in ("seqs", "k", "heads", "kv_heads"))
    F, B = 4 * h * 128 * (kv + 1) * b, 2 * 2 * 128 * hkv * (kv + 1) * b
    df["time_s"] = decode_unit_times(v, b, kv + 1, F, B, h, hkv, 108, (2, 32, "launch", 3), 1.0)
    f = fit(df, form="physical", spec=A100)
    assert f.classes["attention"].groups == (2, 32, "launch", 3) and f.classes["attention"].errors["mape"] < 2.0
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(f, A100, "synthetic").to_yaml()))
    assert hw.attn_decode_mmha_blocks == 3
    model = load_model("llama-3.1-8b")
    cm = CostModel(model, hw, 1)
    fv = [f.value(f"attention.{p}") for p in DEC]
    n, kv1 = 40, 3000
    got = cm.breakdown(cm.shape([1] * n, [kv1] * n)).op("attention_decode").time_s
    want = model.L * decode_unit_time(
        fv,
        n,
        kv1 + 1,
        4.0 * model.h * 128 * (kv1 + 1) * n,
        4.0 * 128 * model.h_kv * (kv1 + 1) * n,
        model.h,
        model.h_kv,
        108,
        (2, 32, "launch", 3),
    )
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "field,value",
    [
        ("attn_decode_split", "flash"),
        ("attn_decode_combine_s", -1e-7),
        ("attn_decode_mmha_blocks", 0),
        ("attn_decode_mmha_blocks", 2.5),
    ],
)
def test_decode_split_fields_are_validated(field, value):
    d = yaml.safe_load(A100.to_yaml())
    with pytest.raises(ValueError, match=field):
        hardware_from_dict({**d, field: value})


def test_launch_split_needs_mmha_rate():
    d = {
        **yaml.safe_load(A100.to_yaml()),
        "sms": 108,
        "attn_decode_pi": 1e14,
        "beta_attn": 1e12,
        "attn_decode_beta_mha": 1e12,
        "attn_decode_l2_beta": 3e12,
        "attn_decode_l2_bytes": 3e7,
        "attn_decode_cta_beta": 1e10,
        "attn_decode_unit_mha_s": 1e-6,
        "attn_decode_unit_s": 1e-6,
        "attn_decode_split": "launch",
    }
    with pytest.raises(ValueError, match="attn_decode_pi_mha"):
        hardware_from_dict(d)
    assert hardware_from_dict({**d, "attn_decode_pi_mha": 1e13}).attn_decode_split == "launch"
    with pytest.raises(ValueError, match="attn_decode_pi_mha"):
        hardware_from_dict({**d, "attn_decode_split": "gen"})


@pytest.mark.parametrize(
    "units,kv,sms,want",
    [
        (1, 1000, 108, 7),  # ⌊1000/128⌋ = 7 ≤ round(√56) = 7
        (1, 131072, 108, 91),  # 1024 blocks capped at round(√8192) = 91
        (64, 131072, 108, 13),  # 64·91/108 waves > 8: ⌊91·8/(64·91/108)⌋ = ⌊13.5⌋
        (4096, 1000, 108, 1),  # far beyond 8 waves: one block
        (1, 100, 132, 1),
    ],
)  # under 128 keys: one block
def test_xqa_block_count_follows_tensorrt_llm_heuristic(units, kv, sms, want):
    assert float(xqa_blocks(1.0, float(units), float(kv), sms)) == want


def test_xqa_block_count_respects_the_workspace_of_sub_sequences():
    assert float(xqa_blocks(3000.0, 3000.0, 64 * 1024.0, 100000)) == 2  # 6000 sub-sequences over 3000 sequences


def test_unit_decode_hbm_bandwidth_is_capped_at_the_spec():
    v = [{**DEC_TRUE, "beta_decode": 2 * A100.peak_bandwidth}[p] for p in DEC]
    f = fit(decode_table(v), form="physical", spec=A100)
    assert f.value("attention.beta_decode") <= A100.peak_bandwidth * (1 + 1e-9)
    assert f.value("attention.l2_decode") <= A100.l2_bytes * (1 + 1e-9)
    assert any("attention.beta_decode clamped" in w for w in f.warnings)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 4096),
    kv=st.integers(1, 200_000),
    h=st.sampled_from([8, 32, 64, 128]),
    g=st.sampled_from([1, 2, 4, 8, 64]),
    split=st.sampled_from(["flow", "xqa", "launch", "gen"]),
    sms=st.sampled_from([108, 132]),
    nb=st.sampled_from([3, 4]),
)
def test_unit_decode_float_path_matches_the_array_path(n, kv, h, g, split, sms, nb):
    hkv = max(1, h // g)
    v = [DEC_TRUE[p] for p in DEC]
    F, B = 4.0 * h * 128 * kv * n, 4.0 * 128 * hkv * kv * n
    assert decode_unit_time(v, n, kv, F, B, h, hkv, sms, (2, 32, split, nb)) == pytest.approx(
        float(decode_unit_times(v, n, kv, F, B, h, hkv, sms, (2, 32, split, nb))), rel=1e-12
    )


def test_fitted_profile_prices_decode_as_the_fit_does():
    """A profile from a unit-model fit prices an n-sequence decode batch of a 1-layer model with the
    fit's formula (on the full K + V bytes the serving decode reads), and decode runs agree with time."""
    v = [DEC_TRUE[p] for p in DEC]
    df = decode_table(v)
    pre = pd.DataFrame(
        attention_row(
            "attention",
            np.array([1.0, 2, 4]),
            np.array([512.0, 1024, 2048]),
            0.0,
            32,
            8,
            128,
            2,
            np.array([3e-5, 9e-5, 3e-4]),
        )
    ).assign(op="attention_prefill", seqs=0)
    f = fit(pd.concat([df, pre], ignore_index=True), classes=["attention"], form="physical", spec=A100)
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(f, A100, "synthetic").to_yaml()))
    model = load_model("llama-3.1-8b")
    cm = CostModel(model, hw, 1)
    n, kv = 16, 1000
    got = cm.breakdown(cm.shape([1] * n, [kv] * n)).op("attention_decode").time_s
    h, hkv, La = model.h, model.h_kv, model.L
    fv = [f.value(f"attention.{p}") for p in DEC]
    groups = f.classes["attention"].groups
    assert (
        groups == (2, 32, "flow")
        and (hw.attn_decode_group_min, hw.attn_decode_group_max, hw.attn_decode_split) == groups
    )
    want = La * decode_unit_time(
        fv, n, kv + 1, 4.0 * h * 128 * (kv + 1) * n, 4.0 * 128 * hkv * (kv + 1) * n, h, hkv, 108, groups
    )
    assert got == pytest.approx(want, rel=1e-12)
    for q in (300, 2048):  # prefill: the quantized wave form, priced as the fit predicts a layer
        row = pd.DataFrame(attention_row("attention", np.array([1.0]), np.array([float(q)]), 0.0, h, hkv, 128, 2, 1.0))
        row = row.assign(op="attention_prefill", seqs=0, decode_flops=0.0, decode_bytes=0.0)
        fitted = La * f.classes["attention"].predict(row)[0]
        assert cm.breakdown(cm.shape([q], [0])).op("attention_prefill").time_s == pytest.approx(fitted, rel=1e-9)
    assert hw.attn_wave_form == "quantized"
    run = cm.decode_run(n, n * (kv + 1), 4)
    assert list(run) == [cm.time(cm.shape([1] * n, [kv + j] * n)) for j in range(4)]


def test_drop_floor_removes_failed_runs():
    b = [1, 2, 1, 2, 4, 1, 8]
    q = [16, 16, 512, 512, 512, 1024, 512]
    t = [3e-6, 3.1e-6, 9e-3, 5e-4, 1e-3, 1e-3, 2e-3]
    df = pd.DataFrame({"heads": 8, "kv_heads": 8, "n": 128, "b": b, "prefill_q": q, "time_s": t})
    notes: list[str] = []
    out = drop_floor(df, ["heads", "kv_heads", "n"], ["b", "prefill_q"], "t.csv", notes)
    assert sorted(out["time_s"]) == [5e-4, 1e-3, 1e-3, 2e-3]  # the floor rows; 9 ms beside 0.5 ms for twice the work
    assert "2 rows at the table's timing floor" in notes[0] and "1 slower than 2× a larger" in notes[0]


PRE_TRUE = dict(
    pi_prefill=200e12,
    beta_prefill=1.2e12,
    overhead_prefill=8e-6,
    wave_q=2e-8,
    tail_key=1e-8,
    beta_prefill_l2=4e12,
    l2_prefill=20e6,
    beta_prefill_kv=0.6e12,
    beta_prefill_kv_l2=6e12,
    exposed_prefill=0.6,
)


def pre_true(causal: bool) -> dict:
    """The constants a table of that mask carries: without it no tile runs a causal tail."""
    return PRE_TRUE if causal else {p: v for p, v in PRE_TRUE.items() if p != "tail_key"}


def prefill_table(causal: bool, dims=(128,)) -> pd.DataFrame:
    rows = [
        (b, s, kv, h, hkv, d)
        for h, hkv in ((32, 8), (8, 1), (64, 64), (40, 8))
        for b in (1, 2, 8, 32)
        for s in (64, 200, 1024, 4096, 12288)
        for kv in (0, 8192)
        for d in dims
    ]
    b, s, kv, h, hkv, d = (np.array(x, float) for x in zip(*rows))
    df = pd.DataFrame(attention_row("attention", b, s, kv, h, hkv, d, 2, 1.0, causal=causal))
    return df.assign(op="attention_prefill", seqs=0, decode_flops=0.0, decode_bytes=0.0)


@pytest.mark.parametrize("causal", [True, False])
def test_prefill_wave_model_recovers_known_constants(causal):
    """Context attention timed with the mask on (TensorRT-LLM) or off (the SGLang collector): the
    quantized wave model's constants, with the bytes' L2-resident rate and capacity, come back from
    its own synthetic timings either way, and a
    non-causal prompt costs at least ~twice the causal one once compute dominates."""
    df, true = prefill_table(causal), pre_true(causal)
    rng = np.random.default_rng(11)
    t = attention_times(np.array(list(true.values())), df, tuple(true), 108)
    f = fit(df.assign(time_s=t * np.exp(0.01 * rng.standard_normal(len(df)))), form="physical", spec=A100)
    assert f.classes["attention"].params == tuple(true)
    got = {p: f.value(f"attention.{p}") for p in true}
    per_key = lambda v: 4 * 128 * 64 * 108 / v["pi_prefill"] + v["wave_q"]  # noqa: E731  a full wave's time per key
    for p in true if causal else set(true) - {"pi_prefill", "wave_q"}:
        assert got[p] == pytest.approx(
            true[p],
            rel=0.1 if p in ("l2_prefill", "l2_prefill_kv", "tail_key", "beta_prefill_kv_l2", "row_prefill") else 0.05,
        ), p
    if not causal:  # every tile sees all keys: compute and latency both scale as waves·keys, only their sum shows
        assert per_key(got) == pytest.approx(per_key(true), rel=0.02)
    other, true_other = prefill_table(not causal), pre_true(not causal)
    ratio = attention_times(np.array(list(true_other.values())), other, tuple(true_other), 108) / t
    big = ((df.prefill_q >= 4096) & (df.prefill_kv == 0)).to_numpy()
    ratio = ratio if causal else 1 / ratio  # non-causal over causal
    assert np.all(ratio[big] > 1.7)


def test_drop_floor_compares_across_head_configurations():
    """A problem with at least as many sequences, tokens, heads and KV heads does at least as much
    work: a row more than ``factor`` × slower than one is dropped, whatever its head configuration."""
    df = pd.DataFrame(
        {
            "n": 128,
            "b": [1, 1, 1, 2, 4],
            "prefill_q": [16, 512, 512, 512, 1024],
            "heads": [8, 8, 32, 32, 32],
            "kv_heads": [8, 8, 8, 8, 8],
            "time_s": [2e-6, 3e-3, 1e-3, 2e-3, 4.2e-3],
        }
    )
    notes: list[str] = []
    out = drop_floor(df, ["n"], ["b", "prefill_q", "heads", "kv_heads"], "t.csv", notes, 1.25)
    assert sorted(out["time_s"]) == [1e-3, 2e-3, 4.2e-3]  # the floor row, and 3 ms beside 1 ms for 4× the heads
    assert "1 rows at the table's timing floor" in notes[0] and "1 slower than 1.25× a larger" in notes[0]


def test_profile_prices_chunks_as_the_prefill_fit_does():
    """A kernel-separate profile fitted with the causal tail's per-key latency and the K/V bytes'
    own rates prices a chunk over a cached prefix as the fit's model does, per layer × L, whether
    the chunk runs alone or beside decodes (TensorRT-LLM's context and generation kernels add);
    and each new term makes a long chunk cost more, never less."""
    df = prefill_table(True)
    t = attention_times(np.array(list(PRE_TRUE.values())), df, tuple(PRE_TRUE), 108)
    dec = decode_table([DEC_TRUE[p] for p in DEC])
    f = fit(pd.concat([dec, df.assign(time_s=t)], ignore_index=True), form="physical", spec=A100)
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(f, A100, "synthetic").to_yaml()))
    assert hw.attn_tail_key_s > 0 and hw.attn_prefill_kv_beta > 0 and hw.attn_prefill_kv_l2_beta > 0
    model = load_model("llama-3.1-8b")
    cm = CostModel(model, hw, 1)
    for q, kv in ((100, 0), (512, 3000), (2048, 0), (4096, 12000)):
        row = pd.DataFrame(
            attention_row(
                "attention", np.array([1.0]), np.array([float(q)]), float(kv), model.h, model.h_kv, model.d_h, 2, 1.0
            )
        )
        row = row.assign(op="attention_prefill", seqs=0, decode_flops=0.0, decode_bytes=0.0)
        want = model.L * f.classes["attention"].predict(row)[0]
        alone = cm.breakdown(cm.shape([q], [kv])).op("attention_prefill").time_s
        mixed = (
            cm.breakdown(cm.shape([q] + [1] * 12, [kv] + [700 + 50 * i for i in range(12)]))
            .op("attention_prefill")
            .time_s
        )
        assert alone == pytest.approx(want, rel=1e-9) and mixed == pytest.approx(alone, rel=1e-12)
    base = cm.breakdown(cm.shape([4096], [12000])).op("attention_prefill").time_s
    for fld in ("attn_tail_key_s", "attn_prefill_kv_beta"):
        off = hw.replace(**({fld: 0.0} if fld == "attn_tail_key_s" else {fld: 0.0, "attn_prefill_kv_l2_beta": 0.0}))
        cm_off = CostModel(model, off, 1)
        assert cm_off.breakdown(cm_off.shape([4096], [12000])).op("attention_prefill").time_s < base


def test_softmax_rate_is_fitted_where_head_dims_differ():
    """A table of head dims 64 and 128 whose score elements each cost 1/ρ beside their 4·d FLOPs
    gives ρ back (and π apart from it), and a profile prices a chunk with that rate; a table of one
    head dim leaves ρ out (it is π's to carry there)."""
    true = {**PRE_TRUE, "softmax_prefill": 2e14, "row_prefill": 3e-10, "l2_prefill_kv": 16e6}
    df = prefill_table(True, dims=(64, 128))
    t = attention_times(np.array(list(true.values())), df, tuple(true), 108)
    dec = decode_table([DEC_TRUE[p] for p in DEC])
    f = fit(pd.concat([dec, df.assign(time_s=t)], ignore_index=True), form="physical", spec=A100)
    assert "softmax_prefill" in f.classes["attention"].params
    for p in ("pi_prefill", "softmax_prefill", "exposed_prefill", "row_prefill", "l2_prefill_kv"):
        assert f.value(f"attention.{p}") == pytest.approx(true[p], rel=0.1 if p == "l2_prefill_kv" else 0.05), p
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(f, A100, "synthetic").to_yaml()))
    assert hw.attn_prefill_kv_l2_bytes == pytest.approx(f.value("attention.l2_prefill_kv"))
    model = load_model("llama-3.1-8b")
    cm = CostModel(model, hw, 1)
    row = pd.DataFrame(
        attention_row("attention", np.array([1.0]), np.array([3000.0]), 5000.0, model.h, model.h_kv, model.d_h, 2, 1.0)
    ).assign(op="attention_prefill", seqs=0, decode_flops=0.0, decode_bytes=0.0)
    want = model.L * f.classes["attention"].predict(row)[0]
    assert cm.breakdown(cm.shape([3000], [5000])).op("attention_prefill").time_s == pytest.approx(want, rel=1e-9)
    one = fit(
        pd.concat([dec, df[df.n == 128].assign(time_s=t[(df.n == 128).to_numpy()])], ignore_index=True),
        classes=["attention"],
        form="physical",
        spec=A100,
    )
    assert (
        "softmax_prefill" not in one.classes["attention"].params
        and "row_prefill" not in one.classes["attention"].params
    )


@pytest.mark.parametrize("groups", [(2, 32), (2, 32, "xqa"), (1, 16, "launch")])
def test_attention_jacobian_is_scipys_finite_difference(groups):
    """The fit's row-restricted Jacobian (each column evaluated on the rows its parameter touches)
    is, to the bit, scipy's 2-point finite differences over every row, steps flipped at the bounds."""
    from scipy.optimize._numdiff import approx_derivative

    from costmodel.calibration.operator_models import _Residuals, class_params_for, model_times

    v = [DEC_TRUE[p] for p in DEC]
    df = pd.concat([decode_table(v), prefill_table(True, dims=(64, 128))], ignore_index=True)
    params = class_params_for("attention", df, 108, A100.l2_bytes)
    assert "unit" in params and "tail_key" in params
    t = df["time_s"].to_numpy(float)
    p0 = np.exp(np.random.default_rng(3).uniform(-1, 1, len(params))) * np.array(
        [
            {**DEC_TRUE, **PRE_TRUE, "softmax_prefill": 4e12, "row_prefill": 3e-10, "l2_prefill_kv": 16e6}[p]
            for p in params
        ]
    )
    x = np.random.default_rng(4).uniform(-0.5, 0.5, len(params))
    lo, hi = np.full(len(params), -3.0), np.full(len(params), 3.0)
    hi[::3] = x[::3] + 1e-9  # a step that must turn back at the upper bound
    res = _Residuals(
        lambda y, d: model_times("attention", params, p0 * np.exp(y), d, 108, groups),
        df,
        t,
        params,
        "attention",
        lo,
        hi,
    )
    got = res.jac(x)
    want = approx_derivative(res, x, method="2-point", bounds=(lo, hi))
    assert np.array_equal(got, want)
    assert all(got[:, params.index(p)].any() for p in ("pi_prefill", "tail_key", "beta_decode", "overhead_decode_mha"))


def test_mmha_issued_rows_at_their_own_rate():
    """At many waves MMHA's walk is bound by the rate its issued key rows are served (beta_issue),
    not the L2-resident KV's rate: halving it slows 8,192 units over 15 keys, and 0 falls back to
    beta_l2_decode (profiles fitted before it)."""

    def price(issue):
        v = [{**DEC_TRUE, "unit_mha": 7e-6, "beta_issue": issue}[p] for p in DEC]
        kv, units = 16.0, 8192.0
        return float(
            decode_unit_times(
                v, units, kv, 4.0 * 128 * kv * units, 2.0 * 128 * kv * units, 1.0, 1.0, 108, (2, 32, "launch"), 1.0
            )
        )

    assert price(0.0) == price(DEC_TRUE["beta_l2_decode"])
    assert price(1e12) > price(2e12) > price(4e12)


@pytest.mark.parametrize("d", [64.0, 128.0, 256.0])
def test_xqa_hidden_keys_are_bytes_in_flight(d):
    """A grouped block's loads under its wave's latency are bytes in flight, not keys: at head dim d
    it hides K_h·128/d keys (L40S, the one table with two head dims: XQA at many units over 127-511
    keys priced 10-30 % slow at d = 64 and d = 128 within a few %, with one K_h in keys)."""
    n, h, hkv, kv, hide = 64.0, 32.0, 4.0, 4096.0, 100.0
    v0 = {
        **DEC_TRUE,
        "pi_decode": 1e30,
        "unit": 1e-30,
        "overhead_decode": 0.0,
        "combine": 0.0,
        "combine_fixed": 0.0,
        "unit_q": 0.0,
        "cta_decode": 1e30,
        "l2_decode": 1.0,
    }
    F, B = 4.0 * h * d * kv * n, 2.0 * 2 * d * hkv * kv * n
    price = lambda k: float(
        decode_unit_times(
            [{**v0, "hidden_keys": k}[p] for p in DEC],
            n,
            kv,
            F,
            B,
            h,
            hkv,
            108,  # noqa: E731
            (2, 32, "launch"),
        )
    )
    m = float(xqa_blocks(n, n * hkv, kv, 108))
    assert price(hide) / price(0.0) == pytest.approx(1.0 - hide * (128.0 / d) * m / kv, rel=1e-9)
