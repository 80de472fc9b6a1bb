"""Kernel-level calibration: the AIConfigurator and LLMServingSim importers on upstream-format
fixtures, bad input, the fitted operator models, the physical caps, and the roofline pricing a
fitted profile the way the fit does (and bit for bit in its fast decode paths)."""

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from costmodel import CostModel, InputError, ShapeStats, load_hardware, load_model
from costmodel.calibration.fit import fit, fit_class
from costmodel.calibration.holdout import error_table, split_by_shape
from costmodel.calibration.importers import read_aiconfigurator, read_llmservingsim
from costmodel.calibration.operator_models import attention_times
from costmodel.calibration.profile import profile_from_fit
from costmodel.calibration.timings import attention_row, gemm_row, validate

FIX = Path(__file__).resolve().parent / "fixtures"
AIC = FIX / "aiconfigurator" / "a100_sxm"
LSS = FIX / "llmservingsim" / "RTX4090" / "meta-llama" / "Llama-3.1-8B" / "bf16"


@pytest.fixture(scope="module")
def aic():
    return read_aiconfigurator(AIC)


@pytest.fixture(scope="module")
def lss():
    return read_llmservingsim(LSS)


def test_aiconfigurator_rows_and_units(aic):
    df, notes = aic
    raw = pd.read_csv(AIC / "trtllm" / "1.0.0" / "gemm_perf.txt")
    r = raw[(raw.gemm_dtype == "float16") & (raw.m == 512) & (raw.n == 4096) & (raw.k == 4096)].iloc[0]
    g = df[(df.op_class == "gemm") & (df.m == 512) & (df.n == 4096) & (df.k == 4096)].iloc[0]
    assert g.time_s == pytest.approx(r.latency * 1e-3) and g.flops == 2 * 512 * 4096 * 4096
    c = pd.read_csv(AIC / "trtllm" / "1.0.0" / "generation_attention_perf.txt").iloc[0]
    d = df[
        (df.op == "attention_decode")
        & (df.seqs == c.batch_size)
        & (df.heads == c.num_heads)
        & (df.kv_heads == c.num_key_value_heads)
        & (df.k == c.isl + c.step - 1)
    ].iloc[0]
    kv = c.isl + c.step - 1  # key length s = isl + step: s - 1 cached tokens + the new one
    assert d.flops == 4 * c.num_heads * c.head_dim * c.batch_size * (kv + 1)
    # TensorRT-LLM's collector caches K only (SELFKONLY): one of K, V per token, plus Q read and O written
    assert (
        d.decode_bytes
        == d.bytes
        == 2 * c.head_dim * 2 * c.batch_size * (c.num_key_value_heads * (kv + 1) / 2 + c.num_heads)
    )
    assert set(df.op_class) == {"gemm", "attention", "allreduce"}
    assert any("int8_wo" in n for n in notes) and any("all_gather" in n for n in notes)
    ar = df[(df.op_class == "allreduce") & (df.op != "nccl_reference")]
    assert not ar.duplicated(["workers", "m"]).any()
    assert any("NCCL rows" in n for n in notes)


def test_nccl_reference_rows_only_below_the_engines_nccl_switch(aic, tmp_path):
    """NVLink (the spec sheet's intra-node link faster than its PCIe): the NCCL table's rows where
    TensorRT-LLM's AUTO runs one-shot on more than 2 GPUs (at most 128 tokens of 4096) are kept
    as reference rows, the NCCL table's own times; none on 2 GPUs, none above the switch, none
    without a spec sheet to say the GPUs have NVLink."""
    df, notes = aic
    ref = df[df.op == "nccl_reference"]
    nccl = pd.read_csv(AIC / "nccl" / "2.27.3" / "nccl_perf.txt").query(HALF_ALL_REDUCE)
    want = nccl[(nccl.num_gpus > 2) & (nccl.message_size <= 128 * 4096)]
    assert len(want) > 0 and len(ref) == len(want)
    assert sorted(ref.time_s) == pytest.approx(sorted(want.latency * 1e-3))
    assert set(ref.workers) == set(want.num_gpus) and (ref.tokens <= 128).all()
    assert any("reference rows" in n for n in notes)
    alone, _ = read_aiconfigurator(_copy(tmp_path, AIC))  # no a100_sxm.yaml beside the copy
    assert not (alone.op == "nccl_reference").any()
    assert len(alone[alone.op_class == "allreduce"]) == len(
        df[(df.op_class == "allreduce") & (df.op != "nccl_reference")]
    )


HALF_ALL_REDUCE = "op_name == 'all_reduce' and nccl_dtype == 'half'"


def test_allreduce_rows_are_the_engines_dispatch_not_the_faster_table(aic):
    """TensorRT-LLM's AUTO all-reduce (the custom table) is priced even where nccl-tests is faster:
    the engine runs one-shot up to 128 tokens whatever NCCL would take."""
    df, _ = aic
    ar = df[(df.op_class == "allreduce") & (df.op != "nccl_reference")].set_index(["workers", "m"])["time_s"]
    raw = pd.read_csv(AIC / "trtllm" / "1.0.0" / "custom_allreduce_perf.txt")
    assert len(ar) == len(raw[raw.num_gpus > 1])
    for r in raw.itertuples():
        assert ar[(r.num_gpus, 2 * r.message_size)] == pytest.approx(r.latency * 1e-3)
    nccl = pd.read_csv(AIC / "nccl" / "2.27.3" / "nccl_perf.txt").query(HALF_ALL_REDUCE)
    both = raw.merge(nccl, on=["num_gpus", "message_size"], suffixes=("", "_nccl"))
    assert (both.latency > both.latency_nccl).any()  # rows an envelope would have replaced


def test_nccl_table_alone_is_priced_when_no_custom_table(tmp_path):
    d = _copy(tmp_path, AIC / "nccl")
    df, _ = read_aiconfigurator(d)
    raw = pd.read_csv(AIC / "nccl" / "2.27.3" / "nccl_perf.txt").query(HALF_ALL_REDUCE)
    assert len(df) == len(raw) and set(df.op) == {"nccl_all_reduce"}
    assert sorted(df.time_s) == pytest.approx(sorted(raw.latency * 1e-3))


def test_llmservingsim_rows(lss):
    df, _ = lss
    m = load_model("llama-3.1-8b")
    qkv = df[(df.op == "qkv_proj")].iloc[0]
    assert (qkv.k, qkv.n) == (m.H, (m.h + 2 * m.h_kv) * m.d_h)
    lm = df[df.op == "lm_head"].iloc[0]
    assert (lm.k, lm.n, lm.op_class) == (m.H, m.vocab, "gemm")
    raw = pd.read_csv(LSS / "tp1" / "attention.csv")
    r = raw[(raw.prefill_chunk == 512) & (raw.n_decode == 8)].iloc[0]
    a = df[(df.op == "attention_mixed") & (df.m == 512 + 8) & (df.time_s == r.time_us * 1e-6)].iloc[0]
    assert a.decode_flops == 4 * m.h * m.d_h * 8 * (r.kv_decode + 1)
    assert a.flops - a.decode_flops == 4 * m.h * m.d_h * (512 * r.kv_prefill + 512 * 513 / 2)
    assert set(df[df.op_class == "sampler"].m) == set(
        pd.read_csv(LSS / "tp1" / "per_sequence.csv").query("layer == 'sampler'").sequences
    )


def _copy(tmp_path, src: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst) if src.is_dir() else shutil.copy(src, dst)
    return dst


@pytest.mark.parametrize(
    "mutate, field",
    [
        (
            lambda lines: lines[:5] + [",".join(lines[5].split(",")[:-2])] + lines[6:],
            "gemm_perf.txt:6:k",
        ),  # truncated row
        (lambda lines: [lines[0].replace(",latency", ",lat")] + lines[1:], "gemm_perf.txt:1:latency"),  # missing column
        (lambda lines: lines[:3] + [lines[3].rsplit(",", 1)[0] + ",abc"] + lines[4:], "gemm_perf.txt:4:latency"),
    ],
)
def test_bad_aiconfigurator_table_names_file_line_field(tmp_path, mutate, field):
    p = _copy(tmp_path, AIC / "trtllm" / "1.0.0" / "gemm_perf.txt")
    p.write_text("\n".join(mutate(p.read_text().splitlines())) + "\n")
    with pytest.raises(InputError) as e:
        read_aiconfigurator(p)
    assert e.value.field.endswith(field) and "\n" not in str(e.value)


def test_table_of_another_dtype_only_is_refused(tmp_path):
    p = _copy(tmp_path, AIC / "trtllm" / "1.0.0" / "gemm_perf.txt")
    lines = p.read_text().splitlines()
    p.write_text("\n".join([lines[0]] + [ln for ln in lines[1:] if ",int8_wo," in ln]) + "\n")
    with pytest.raises(InputError, match="modelled dtype") as e:
        read_aiconfigurator(p)
    assert "gemm_dtype" in e.value.field and "int8_wo" in str(e.value)


def test_bad_llmservingsim_folder(tmp_path):
    d = _copy(tmp_path, LSS)
    att = d / "tp1" / "attention.csv"
    lines = att.read_text().splitlines()
    att.write_text("\n".join(lines[:7] + ["0,0,4"] + lines[8:]) + "\n")
    with pytest.raises(InputError) as e:
        read_llmservingsim(d)
    assert e.value.field.endswith("attention.csv:8:kv_decode")
    (d / "tp1" / "dense.csv").unlink()
    with pytest.raises(InputError, match="dense.csv"):
        read_llmservingsim(d)


def test_failed_measurements_are_dropped_and_reported(tmp_path):
    p = _copy(tmp_path, AIC / "trtllm" / "1.0.0" / "context_attention_perf.txt")
    lines = p.read_text().splitlines()
    i = next(j for j, ln in enumerate(lines) if ",16384," in ln and ",float16,float16," in ln)
    lines[i] = lines[i].rsplit(",", 1)[0] + ",0.0029"  # a 16k-token prompt in 2.9 µs
    p.write_text("\n".join(lines) + "\n")
    df, notes = read_aiconfigurator(p)
    assert len(df) == len(lines) - 2 and any("failed measurements" in n for n in notes)


SGL = FIX / "aiconfigurator" / "h100_sxm"


def test_sglang_attention_is_non_causal_and_drops_impossible_rows():
    """AIConfigurator's SGLang collector calls FlashAttention-3's flash_attn_with_kvcache without
    causal (every query sees the whole prompt) and times it with Triton's do_bench, which evicts
    the L2 before each call: a kept row never beats its bytes at the spec HBM bandwidth or its FLOPs
    at the spec peak, and rows that do are counted in the notes."""
    df, notes = read_aiconfigurator(SGL)
    spec = yaml.safe_load((FIX / "aiconfigurator" / "h100_sxm.yaml").read_text())["gpu"]
    pre = df[df.op == "attention_prefill"]
    assert len(pre) and (pre.causal == 0).all()
    assert np.allclose(pre.flops, 4 * pre.heads * pre.n * pre.m * pre.prefill_q)  # b·s² query-key pairs
    assert (df.bytes / df.time_s <= spec["mem_bw"]).all() and (df.flops / df.time_s <= spec["float16_tc_flops"]).all()
    raw = pd.read_csv(SGL / "sglang" / "0.5.1.post1" / "context_attention_perf.txt")
    raw = raw[(raw.attn_dtype == "float16") & (raw.kv_cache_dtype == "float16")]
    d = raw.batch_size * raw.isl
    movable = (2 * 128 * 2 * d * (raw.num_key_value_heads + raw.num_heads) / (raw.latency * 1e-3) <= spec["mem_bw"]) & (
        4 * raw.num_heads * 128 * raw.batch_size * raw.isl**2 / (raw.latency * 1e-3) <= spec["float16_tc_flops"]
    )
    note = next(n for n in notes if "context_attention_perf.txt" in n and "spec sheet's" in n)
    assert f"skipped {int((~movable).sum())} rows faster than their bytes" in note
    assert len(pre) <= int(movable.sum())
    dec = df[df.op == "attention_decode"]
    assert len(dec) and (dec.causal == 1).all() and (dec.decode_flops == dec.flops).all()


H100_GEN = FIX.parents[2] / "shared" / "data" / "kernels" / "aiconfigurator" / "h100_sxm" / "sglang" / "0.5.1.post1"


def _interleaved(rows: list[tuple]) -> pd.DataFrame:
    cols = [
        "framework",
        "version",
        "device",
        "op_name",
        "kernel_source",
        "batch_size",
        "isl",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "beam_width",
        "attn_dtype",
        "kv_cache_dtype",
        "step",
        "latency",
    ]
    return pd.DataFrame(
        [
            (
                "SGLang",
                "0.5.1.post1",
                "H100",
                "generation_attention",
                "default",
                b,
                1,
                h,
                hkv,
                128,
                1,
                "float16",
                "float16",
                s,
                t,
            )
            for b, h, hkv, s, t in rows
        ],
        columns=cols,
    )


def test_sglang_generation_keeps_the_rows_written_in_case_order(tmp_path):
    """Blocks of (batch, heads, KV heads) in the collector's order are kept; from the first block
    that comes back after another began, nothing is (what several workers writing at once leave)."""
    rows = [(2, 8, 8, s, 0.01 * s) for s in (1, 3, 7)] + [(4, 8, 8, s, 0.02 * s) for s in (1, 3)]
    rows += [(2, 8, 8, 15, 0.003), (4, 8, 8, 7, 0.5), (8, 8, 8, 1, 0.003)]
    p = tmp_path / "generation_attention_perf.txt"
    _interleaved(rows).to_csv(p, index=False)
    df, notes = read_aiconfigurator(p)
    assert sorted(zip(df.seqs, df.k)) == [(2, 1), (2, 3), (2, 7), (4, 1), (4, 3)]
    assert any("kept the first 5 rows" in n for n in notes)
    _interleaved(rows[:5]).to_csv(p, index=False)
    assert len(read_aiconfigurator(p)[0]) == 5


@pytest.mark.skipif(not H100_GEN.is_dir(), reason="needs ../shared/data")
def test_h100_generation_rows_measure_one_kernel():
    """What is kept of the H100 SGLang generation table is a kernel: within each configuration time
    never falls by more than 10 % as the keys grow, and log time follows log bytes (correlation over
    0.8 where the bytes span 64x) — the interleaved rows run at a 3 µs floor and 0.01-3 TB/s within
    one configuration."""
    df, _ = read_aiconfigurator(H100_GEN / "generation_attention_perf.txt")
    assert len(df) >= 60
    for _, g in df.groupby(["seqs", "heads", "kv_heads"]):
        g = g.sort_values("k")
        t = g.time_s.to_numpy()
        assert (t[1:] >= 0.9 * np.maximum.accumulate(t)[:-1]).all()
        big = g[g.bytes >= g.bytes.max() / 64]
        if len(big) >= 4:
            assert np.corrcoef(np.log(big.bytes), np.log(big.time_s))[0, 1] > 0.8


def test_trtllm_context_attention_stays_causal(aic):
    df, _ = aic
    pre = df[df.op == "attention_prefill"]
    q = pre.prefill_q
    assert (pre.causal == 1).all() and np.allclose(pre.flops, 4 * pre.heads * pre.n * pre.m / q * q * (q + 1) / 2)


# --- fitted models ---


def _gemms(pi, beta, floor, rng, noise=0.02):
    df = pd.DataFrame(
        [
            gemm_row("g", m, k, n, 2, 0.0)
            for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
            for k, n in ((4096, 4096), (4096, 14336), (14336, 4096), (1024, 8192), (8192, 8192))
        ]
    )
    a = df["flops"] * np.ceil(df["m"] / 16) * 16 / df["m"] / pi
    return df.assign(
        time_s=(np.sqrt(a**2 + (df["bytes"] / beta) ** 2) + floor) * np.exp(noise * rng.standard_normal(len(df)))
    )


def test_physical_form_recovers_a_memory_regime_below_spec():
    df = _gemms(250e12, 1.6e12, 5e-6, np.random.default_rng(3))
    c = fit_class(df, "gemm", "physical")
    assert c.values == pytest.approx([250e12, 1.6e12, 5e-6], rel=0.03)


def test_fit_above_the_spec_is_clamped_and_says_so():
    spec = load_hardware("a100-80gb")  # 312 TFLOP/s, 2.039 TB/s
    df = _gemms(450e12, 2.6e12, 5e-6, np.random.default_rng(4))
    free = fit(df, form="physical")
    assert free.value("gemm.pi") > spec.peak_flops and not any("clamped" in w for w in free.warnings)
    capped = fit(df, form="physical", spec=spec)
    assert capped.value("gemm.pi") <= spec.peak_flops and capped.value("gemm.beta") <= spec.peak_bandwidth
    assert capped.value("gemm.pi") == pytest.approx(spec.peak_flops, rel=1e-6)
    assert any(w.startswith("gemm.pi clamped") for w in capped.warnings)
    assert any(w.startswith("gemm.beta clamped") for w in capped.warnings)


ATT = dict(
    pi_prefill=150e12,
    beta_prefill=0.6e12,
    overhead_prefill=12e-6,
    pi_decode=25e12,
    beta_decode=1.8e12,
    seq=2e-7,
    overhead_decode=9e-6,
)


def _attention_rows(rng, mixed: bool):
    rows = []
    for h, hkv in ((32, 8), (64, 8), (16, 16), (40, 8)):
        for q, kv in ((128, 0), (512, 0), (512, 2048), (2048, 0), (2048, 8192), (8192, 0)):
            rows.append(attention_row("attention", 1, q, kv, h, hkv, 128, 2, 0.0))
        for n in (1, 8, 64, 256):
            for kv in (16, 512, 4096, 32768):
                rows.append({**attention_row("attention", n, 1, kv, h, hkv, 128, 2, 0.0), "op": "attention_decode"})
    df = pd.DataFrame(rows)
    dec = df["op"] == "attention_decode"
    df.loc[dec, "decode_flops"], df.loc[dec, "decode_bytes"] = df.loc[dec, "flops"], df.loc[dec, "bytes"]
    df.loc[~dec, "seqs"] = 0
    if mixed:
        p = attention_row("attention", 1, 512, 1024, 32, 8, 128, 2, 0.0)
        extra = []
        for n in (1, 16, 128):
            for kv in (64, 2048, 16384):
                d = attention_row("attention", n, 1, kv, 32, 8, 128, 2, 0.0)
                extra.append(
                    {
                        **d,
                        "flops": p["flops"] + d["flops"],
                        "bytes": p["bytes"] + d["bytes"],
                        "decode_flops": d["flops"],
                        "decode_bytes": d["bytes"],
                        "op": "attention_mixed",
                    }
                )
        df = pd.concat([df, pd.DataFrame(extra)], ignore_index=True)
    df = validate(df.assign(time_s=1.0))
    return df


@pytest.mark.parametrize("mixed", [False, True])
def test_attention_model_recovers_known_parameters(mixed):
    rng = np.random.default_rng(5)
    df = _attention_rows(rng, mixed)
    truth = dict(ATT, **({"pi_mixed": 2e12, "seq_mixed": 1.2e-6} if mixed else {}))
    t = attention_times(np.array(list(truth.values())), df, tuple(truth))
    f = fit(df.assign(time_s=t * np.exp(0.01 * rng.standard_normal(len(df)))), form="physical")
    c = f.classes["attention"]
    assert c.params == tuple(truth)
    for p, v in truth.items():
        assert f.value(f"attention.{p}") == pytest.approx(v, rel=0.1), p


def test_allreduce_regimes_recover_a_concave_curve():
    rng = np.random.default_rng(6)
    size = np.geomspace(256, 2**30, 23)
    rows = []
    for n, reg in (
        (2, [(4e-6, 20e9), (15e-6, 120e9), (60e-6, 200e9)]),
        (8, [(6e-6, 8e9), (30e-6, 90e9), (150e-6, 230e9)]),
    ):
        B = 2 * (n - 1) / n * size
        t = np.min([lat + B / bw for lat, bw in reg], axis=0) * np.exp(0.01 * rng.standard_normal(len(B)))
        rows.append(
            pd.DataFrame(
                dict(op_class="allreduce", op="all_reduce", m=size, workers=n, tp=n, flops=0.0, bytes=B, time_s=t)
            )
        )
    df = pd.concat(rows, ignore_index=True)
    f = fit(df, form="physical")
    assert error_table(f, df)["mape"].max() < 3.0
    assert f.value("allreduce.bandwidth_large@8") == pytest.approx(230e9, rel=0.1)


# --- the roofline prices a fitted profile as the fit does ---


@pytest.fixture(scope="module")
def fitted_hw(lss):
    df, _ = lss
    f = fit(df, form="physical", spec=load_hardware("rtx4090"))
    return profile_from_fit(f, load_hardware("rtx4090"), "fixture", "rtx4090-test"), f


def test_profile_from_llmservingsim_is_varlen_and_prices_like_the_fit(fitted_hw, lss):
    hw, f = fitted_hw
    assert hw.attn_form == "varlen" and hw.sampler_seq_s > 0 and hw.attn_wave_s > 0 and hw.sms == 128
    m = load_model("llama-3.1-8b")
    cm = CostModel(m, hw)
    df = lss[0]
    att = df[df.op_class == "attention"].sample(40, random_state=0)
    for r in att.itertuples():
        q, kv = [], []
        if r.op != "attention_decode":
            chunk = int(r.m - r.seqs)
            pre = (r.flops - r.decode_flops) / (4 * m.h * m.d_h)  # q·kv + q(q+1)/2
            q.append(chunk)
            kv.append(int(round((pre - chunk * (chunk + 1) / 2) / chunk)))
        q += [1] * int(r.seqs)
        kv += [
            int(r.k) if r.op == "attention_decode" else int(round(r.decode_flops / (4 * m.h * m.d_h * r.seqs) - 1))
        ] * int(r.seqs)
        s = cm.shape(q, kv)
        roof = sum(o.time_s for o in cm.breakdown(s).operators if o.name.startswith("attention"))
        model = f.classes["attention"].predict(pd.DataFrame([r._asdict()]))[0]
        assert roof == pytest.approx(m.kv_layers * model, rel=1e-9)


def test_fitted_decode_runs_are_bit_exact(fitted_hw):
    hw, _ = fitted_hw
    for name, tp in (("llama-3.1-8b", 1), ("qwen3-32b", 2)):
        cm = CostModel(load_model(name), hw.replace(allreduce_regimes={2: [5e-6, 2e10, 3e-5, 1e11]}), tp)
        for n, kv0 in ((1, 17), (7, 7 * 3001), (64, 64 * 900)):
            step = [cm.time(ShapeStats(n, n, 0.0, 0.0, kv0 + n * j)) for j in range(30)]
            assert list(cm.decode_run(n, kv0, 30)) == step
            ends, t = cm.decode_ends_list(n, kv0, 30, 1.5), 1.5
            for j, d in enumerate(step):
                t += d
                assert ends[j] == t
            qs, kvs = [1] * n, [kv0 // n - 1] * n
            assert cm.step_time(qs, kvs) == cm.time(cm.shape(qs, kvs))


def test_mixed_step_time_matches_shape_and_breakdown(fitted_hw):
    hw, _ = fitted_hw
    cm = CostModel(load_model("llama-3.1-8b"), hw)
    q, kv = [512] + [1] * 30, [1024] + [300 + 7 * i for i in range(30)]
    s = cm.shape(q, kv)
    assert cm.step_time(q, kv) == cm.time(s) == cm.step_time([512], [1024], 30, sum(k + 1 for k in kv[1:]))
    assert cm.breakdown(s).time_s == pytest.approx(cm.time(s), rel=1e-12)
    alone = cm.time(cm.shape([1] * 30, kv[1:]))
    assert cm.time(s) > alone  # a chunk beside decodes costs more than the decodes


@pytest.mark.parametrize("name", ["h100-sxm", "a100-sxm", "b200", "l40s"])
def test_shipped_calibrated_profiles_respect_their_spec(name):
    hw = load_hardware(name)
    assert hw.pi_eff <= hw.peak_flops and hw.beta_eff <= hw.peak_bandwidth
    assert (hw.pi_attn or 0) <= hw.peak_flops and (hw.beta_attn or 0) <= hw.peak_bandwidth * (1 + 1e-9)
    for tp, reg in (hw.allreduce_regimes or {}).items():
        assert max(reg[1::2]) <= hw.interconnect_bandwidth * (1 + 1e-9) or tp
    cm = CostModel(load_model("llama-3.1-8b"), hw)
    assert 0 < cm.step_time([1] * 32, [1000] * 32) < cm.step_time([2048], [0])
    assert hw.calibration["errors_percent"]


def test_split_by_shape_holds_out_whole_shapes(aic):
    df, _ = aic
    train, held = split_by_shape(df, 0.25, 0)
    for cls, cols in (("gemm", ["n", "k"]), ("attention", ["heads", "kv_heads"])):
        a = set(map(tuple, train[train.op_class == cls][cols].to_numpy()))
        b = set(map(tuple, held[held.op_class == cls][cols].to_numpy()))
        assert b and not (a & b)
    assert math.isclose(len(train) + len(held), len(df))


def test_elementwise_operator_prices_the_fitted_kernels(fitted_hw, lss):
    hw, f = fitted_hw
    assert hw.elementwise_beta > 0
    m = load_model("llama-3.1-8b")
    cm = CostModel(m, hw)
    df = lss[0]
    el = df[df.op_class == "elementwise"]
    common = set.intersection(*(set(el[el.op == op].m) for op in ("layernorm", "act_fn", "rotary_emb")))
    assert len(common) >= 2
    for T in sorted(common)[:: max(1, len(common) // 4)]:
        rows = el[el.m == T]
        per_layer = sum(
            f.classes["elementwise"].predict(rows[rows.op == op])[0] * (2 if op == "layernorm" else 1)
            for op in ("layernorm", "act_fn", "rotary_emb")
        )
        op = cm.breakdown(cm.shape([T], [0])).op("elementwise")
        assert op.time_s == pytest.approx(m.L * per_layer, rel=1e-9)


def test_tile_sums_agree_between_the_loop_and_numpy():
    rng = np.random.default_rng(7)
    q = list(rng.integers(1, 700, 40)) + [1] * 8
    kv = list(rng.integers(0, 9000, 48))
    loop = ShapeStats.of(q, kv, 1.0, tile=64)
    wide = ShapeStats._of_wide(np.array(q), np.array(kv), 1.0, 64)
    assert loop == wide
    hot = [(a, b) for a, b in zip(q, kv) if a > 1]
    assert loop.prefill_tiles == sum(-(-a // 64) for a, _ in hot) and loop.prefill_kv_max == max(b for _, b in hot)
    assert (
        loop.prefill_q_max == max(a for a, _ in hot)
        and loop._plus_decodes(5, 500, 1.0).prefill_q_max == loop.prefill_q_max
    )


# --- attention timings of one kind only ---

SIDE_FIELDS = {
    "decode": ("attn_decode_pi", "beta_attn", "attn_decode_seq_s", "attn_decode_overhead_s", "attn_decode_unit_s"),
    "prefill": ("pi_attn", "attn_prefill_beta", "attn_prefill_overhead_s", "attn_wave_s"),
}


@pytest.mark.parametrize("missing", ["decode", "prefill"])
@pytest.mark.parametrize("base_name", ["a100-80gb", "a100-sxm"])
def test_attention_timings_of_one_kind_price_the_other_as_the_base(aic, tmp_path, missing, base_name):
    """A table of prefill chunks alone (or decodes alone) gives a profile that loads and prices the
    missing kind as its base does: a fitted base's kernels to the bit; a roofline base's rates in
    the fitted form (decodes √((F/π_attn)² + (B/β_attn)²), a prefill F/π_attn + B/β_attn), at a
    compute-bound and a memory-bound shape; the fitted kind is the fit's; the warnings say which
    kind; draws from the fit's covariance leave the missing kind's fields alone."""
    df, _ = aic
    att = df[df.op_class == "attention"]
    keep = att[(att.prefill_seqs > 0) if missing == "decode" else (att.prefill_seqs == 0)]
    base = load_hardware(base_name)
    f = fit(keep, form="physical", spec=base)
    hw = profile_from_fit(f, base, "fixture", "one-kind")
    path = tmp_path / "fitted.yaml"
    path.write_text(hw.to_yaml())
    back = load_hardware(str(path))
    assert any(f"no {missing} timings" in w for w in back.calibration["warnings"])
    m = load_model("llama-3.1-8b")
    shapes = {
        "decode": [([1] * 16, [3000 + 97 * i for i in range(16)]), ([1] * 2, [40, 90])],
        "prefill": [([1500], [2500]), ([16], [32000])],
    }[missing]
    op = f"attention_{missing}"
    for shape in shapes:
        mine = CostModel(m, back).breakdown(CostModel(m, back).shape(*shape)).op(op)
        if base.attn_form != "roofline":
            assert mine.time_s == CostModel(m, base).breakdown(CostModel(m, base).shape(*shape)).op(op).time_s, shape
        else:
            a, b = mine.flops / base.pi_attention, mine.bytes / base.beta_attention
            assert mine.time_s == pytest.approx(math.hypot(a, b) if missing == "decode" else a + b, rel=1e-9), shape
    other = "prefill" if missing == "decode" else "decode"
    field, param = ("attn_prefill_beta", "beta_prefill") if missing == "decode" else ("beta_attn", "beta_decode")
    assert getattr(back, field) == pytest.approx(f.value(f"attention.{param}"))
    assert not any(f"no {other} timings" in w for w in back.calibration["warnings"])
    from costmodel.calibration.predict import sample_hardware

    for draw in sample_hardware(back, 5, np.random.default_rng(0)):
        assert [getattr(draw, x) for x in SIDE_FIELDS[missing]] == [getattr(back, x) for x in SIDE_FIELDS[missing]]
    assert any(
        getattr(draw, field) != getattr(back, field) for draw in sample_hardware(back, 5, np.random.default_rng(1))
    )


def test_varlen_table_without_a_batch_of_decodes_alone_prices_decodes_as_the_base(lss):
    """LLMServingSim's attention table without its decode-only rows (prefills and mixed batches
    left): the decode kernel's parameters fit no point, so decodes alone are priced at the base's
    rates and the fit's mixed pricing stays."""
    df, _ = lss
    att = df[df.op_class == "attention"].reset_index(drop=True)
    base = load_hardware("rtx4090")
    f = fit(att[att.flops > att.decode_flops].reset_index(drop=True), form="physical", spec=base)
    hw = profile_from_fit(f, base, "fixture", "no-decodes-alone")
    assert hw.attn_form == "varlen" and hw.attn_mixed_pi == pytest.approx(f.value("attention.pi_mixed"))
    assert any("no decode timings" in w for w in hw.calibration["warnings"])
    m = load_model("llama-3.1-8b")
    dec = CostModel(m, hw).breakdown(CostModel(m, hw).shape([1] * 16, [3000] * 16)).op("attention_decode")
    assert dec.time_s == pytest.approx(
        math.hypot(dec.flops / base.pi_attention, dec.bytes / base.beta_attention), rel=1e-9
    )
