"""The fitted fused-MoE layer and the capped all-reduce regimes: parameters recovered from
synthetic timings, the importer's routing, and the roofline pricing a profile as the fit does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import CostModel, load_hardware, load_model
from costmodel.calibration.allreduce_model import ONESHOT_MAX_TOKENS
from costmodel.calibration.fit import fit
from costmodel.calibration.importers import read_aiconfigurator
from costmodel.calibration.profile import profile_from_fit
from costmodel.errors import InputError
from costmodel.hardware import hardware_from_dict

FIX = Path(__file__).parent / "fixtures" / "aiconfigurator" / "h100_sxm"

# --- MoE ---

MOE_TRUTH = dict(pi=4.1e14, beta=2.6e12, floor=21e-6, pad=23.0, depth=140.0)
CONFIGS = ((4096, 14336, 2, 8), (4096, 1536, 8, 128), (7168, 2048, 8, 256), (2048, 768, 4, 64))


def moe_formula(T, H, inter, tp, k, E, u, pi, beta, floor, pad, depth, b=2.0):
    """The layer's time written out from the model's definition (not costmodel.moe_cost)."""
    n = inter / tp
    rows = T * k + pad * u
    flops = 2 * rows * 3 * H * n + 2 * rows * depth * (2 * n + H)
    by = b * 3 * H * n * u + b * 2 * H * T * k
    return floor + np.sqrt((flops / pi) ** 2 + (by / beta) ** 2)


def synthetic_moe(seed: int, noise: float = 0.01, tuned=(), tuned_pi: float = 0.0) -> pd.DataFrame:
    """Timings of the CONFIGS at tp 1, 4, 16; shapes (E, I/tp) in ``tuned`` compute at tuned_pi."""
    rng = np.random.default_rng(seed)
    rows = []
    for H, inter, k, E in CONFIGS:
        for tp in (1, 4, 16):
            T = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384], float)
            u = E * (1 - (1 - k / E) ** T) * rng.uniform(0.6, 1.0, len(T))  # any routing: the fit is told u
            truth = {**MOE_TRUTH, "pi": tuned_pi if (E, inter // tp) in tuned else MOE_TRUTH["pi"]}
            t = moe_formula(T, H, inter, tp, k, E, u, **truth) * np.exp(noise * rng.standard_normal(len(T)))
            rows.append(
                pd.DataFrame(
                    dict(
                        op_class="moe",
                        op="synthetic",
                        tokens=T,
                        m=T,
                        k=H,
                        n=inter,
                        tp=tp,
                        workers=1,
                        flops=2.0 * 3 * H * inter / tp * T * k,
                        bytes=2.0 * 3 * H * inter / tp * u,
                        seqs=u,
                        heads=k,
                        kv_heads=E,
                        time_s=t,
                    )
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_moe_fit_recovers_known_parameters():
    f = fit(synthetic_moe(3), form="physical")
    for p, v in MOE_TRUTH.items():  # within 3σ of the fit's own uncertainty, and within 10 %
        err, sigma = abs(np.log(f.value(f"moe.{p}_moe") / v)), f.rel_sigma(f"moe.{p}_moe")
        assert err < 0.1 and err < 3 * sigma + 0.01, (p, err, sigma)
    assert f.classes["moe"].errors["mape"] < 2.0


def test_moe_fit_finds_the_shapes_with_a_faster_kernel():
    tuned = ((8, 3584), (128, 384))
    f = fit(synthetic_moe(9, tuned=tuned, tuned_pi=2.3 * MOE_TRUTH["pi"]), form="physical")
    assert f.classes["moe"].tuned == tuned
    assert f.value("moe.pi_tuned_moe") == pytest.approx(2.3 * MOE_TRUTH["pi"], rel=0.05)
    assert f.value("moe.pi_moe") == pytest.approx(MOE_TRUTH["pi"], rel=0.05)
    assert f.classes["moe"].errors["mape"] < 2.0
    assert "pi_tuned_moe" not in fit(synthetic_moe(9), form="physical").classes["moe"].params  # one rate: none


def test_moe_fit_caps_bandwidth_at_the_spec():
    spec = load_hardware("h100").replace(peak_bandwidth=2.0e12)
    f = fit(synthetic_moe(4), form="physical", spec=spec)
    assert f.value("moe.beta_moe") <= 2.0e12 * (1 + 1e-9)
    assert any("beta_moe clamped" in w for w in f.warnings)


def test_moe_importer_counts_the_tables_routing():
    df, notes = read_aiconfigurator(FIX / "sglang" / "0.5.1.post1" / "moe_perf.txt")
    assert set(df.dtype) == {"float16"} and any("fp8_block" in n for n in notes)
    T, k, E = df["tokens"].to_numpy(), df["heads"].to_numpy(), df["kv_heads"].to_numpy()
    u = df["seqs"].to_numpy()
    assert ((u >= 1) & (u <= np.minimum(E, T * k))).all()
    uniform = E * (1 - (1 - k / E) ** T)
    small = T <= 4  # power-law loads leave experts empty that uniform routing fills
    assert (u[small] < uniform[small]).all()
    assert np.allclose(u[T >= 1024], E[T >= 1024], rtol=0.2)
    again, _ = read_aiconfigurator(FIX / "sglang" / "0.5.1.post1" / "moe_perf.txt")
    assert np.array_equal(again["seqs"].to_numpy(), u)  # seeded: the same table gives the same counts


@pytest.fixture(scope="module")
def moe_profile():
    hw = load_hardware("h100")
    return hw.replace(
        moe_pi=MOE_TRUTH["pi"],
        moe_beta=MOE_TRUTH["beta"],
        moe_floor_s=MOE_TRUTH["floor"],
        moe_pad_rows=MOE_TRUTH["pad"],
        moe_tile_depth=MOE_TRUTH["depth"],
        roofline_combine="max",
    )


@pytest.mark.parametrize("name,tp", [("mixtral-8x7b", 1), ("qwen1.5-moe-a2.7b", 1), ("mixtral-8x7b", 2)])
def test_moe_layers_priced_from_the_fit_as_batch_grows(moe_profile, name, tp):
    m = load_model(name)
    cm = CostModel(m, moe_profile, tp)
    k, E = m.experts_per_tok, m.num_experts
    prev = None
    for T in (1, 2, 3, 8, 31, 128, 1000, 4096, 16384):
        op = cm.breakdown(cm.shape([T], [0])).op("moe_experts")
        u = E * (1 - (1 - k / E) ** T)  # uniform routing, expected
        want = m.moe_layers * moe_formula(T, m.H, m.expert_ffn, tp, k, E, u, **MOE_TRUTH)
        assert op.time_s == pytest.approx(want, rel=1e-9)
        assert op.flops == pytest.approx(2 * 3 * m.H * m.expert_ffn / tp * T * k * m.moe_layers, rel=1e-12)
        assert prev is None or op.time_s > prev
        prev = op.time_s
    one = cm.breakdown(cm.shape([1], [0])).op("moe_experts")
    assert one.bytes == pytest.approx(m.moe_layers * 2 * (3 * m.H * m.expert_ffn / tp * k + 2 * m.H * k), rel=1e-9)
    # many tokens: every expert touched, the cost per token settles at the compute rate
    t1, t2 = (cm.breakdown(cm.shape([T], [0])).op("moe_experts").time_s for T in (8192, 16384))
    per_token = (
        m.moe_layers * 2 * k * (3 * m.H * m.expert_ffn / tp + MOE_TRUTH["depth"] * (2 * m.expert_ffn / tp + m.H))
    )
    assert (t2 - t1) / 8192 == pytest.approx(per_token / MOE_TRUTH["pi"], rel=0.02)
    # the simulator's step time carries the same operator
    s = cm.shape([512], [0])
    assert cm.time(s) == pytest.approx(cm.breakdown(s).time_s, rel=1e-12)


def test_moe_profile_from_fit_and_defaults(moe_profile):
    f = fit(synthetic_moe(5, tuned=((8, 3584),), tuned_pi=2.3 * MOE_TRUTH["pi"]), form="physical")
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "moe-test")
    assert hw.moe_pi == pytest.approx(f.value("moe.pi_moe")) and hw.moe_tile_depth == pytest.approx(
        f.value("moe.depth_moe")
    )
    assert hw.moe_tuned_shapes == [[8, 3584]] and hw.moe_tuned_pi == pytest.approx(f.value("moe.pi_tuned_moe"))
    m = load_model("mixtral-8x7b")  # 8 experts of 14336: at tp 4 the tuned shape (8, 3584)
    fast, slow = CostModel(m, hw, 4), CostModel(m, hw, 2)
    big = 16384
    t4 = fast.breakdown(fast.shape([big], [0])).op("moe_experts").time_s
    t2 = slow.breakdown(slow.shape([big], [0])).op("moe_experts").time_s
    assert fast.moe_pi == hw.moe_tuned_pi and slow.moe_pi == hw.moe_pi
    assert t2 / t4 == pytest.approx(
        2 * hw.moe_tuned_pi / hw.moe_pi, rel=0.1
    )  # half the work per GPU, at the tuned rate
    back = hardware_from_dict(__import__("yaml").safe_load(hw.to_yaml()), "roundtrip")
    assert back.moe_pad_rows == hw.moe_pad_rows
    dense = CostModel(load_model("mixtral-8x7b"), load_hardware("h100"))  # no MoE fit: the roofline's experts
    assert not dense.moe_fitted
    with pytest.raises(InputError, match="moe_beta"):
        hardware_from_dict({**load_hardware("h100").__dict__, "moe_pi": 1e14}, "bad")
    with pytest.raises(InputError, match="moe_tuned_shapes"):
        hardware_from_dict({**hw.__dict__, "moe_tuned_shapes": [[8, "3584"]]}, "bad")


# --- all-reduce ---


def synthetic_allreduce(seed: int, noise: float = 0.01):
    """Per GPU count: two one-shot lines up to 128 tokens of 4096, two more beyond; a step up at the cap."""
    rng = np.random.default_rng(seed)
    truth = {
        2: [(3e-6, 40e9), (5e-6, 160e9), (12e-6, 180e9), (40e-6, 240e9)],
        8: [(5e-6, 10e9), (8e-6, 45e9), (25e-6, 200e9), (120e-6, 420e9)],
    }
    elems = 2.0 ** np.arange(7, 30)
    rows = []
    for n, lines in truth.items():
        B = 2 * (n - 1) / n * 2 * elems
        tok = np.maximum(1, np.floor(elems / 4096))
        t = np.array(
            [
                min(lat + b / bw for i, (lat, bw) in enumerate(lines) if i >= 2 or tk <= ONESHOT_MAX_TOKENS)
                for b, tk in zip(B, tok)
            ]
        ) * np.exp(noise * rng.standard_normal(len(B)))
        rows.append(
            pd.DataFrame(
                dict(
                    op_class="allreduce",
                    op="all_reduce",
                    tokens=tok,
                    m=2 * elems,
                    workers=n,
                    tp=n,
                    flops=0.0,
                    bytes=B,
                    time_s=t,
                )
            )
        )
    return pd.concat(rows, ignore_index=True), truth


def test_allreduce_fit_recovers_capped_regimes():
    df, truth = synthetic_allreduce(7)
    f = fit(df, form="physical")
    assert f.classes["allreduce"].oneshot_tokens == ONESHOT_MAX_TOKENS
    assert f.classes["allreduce"].errors["mape"] < 2.0
    for n, lines in truth.items():
        assert f.value(f"allreduce.bandwidth_large@{n}") == pytest.approx(lines[3][1], rel=0.05)
        assert f.value(f"allreduce.latency_small@{n}") == pytest.approx(lines[0][0], rel=0.1)
    elems = np.array([64 * 4096, 128 * 4096, 256 * 4096], float)  # both sides of the switch
    probe = pd.DataFrame(
        dict(
            op_class="allreduce",
            op="all_reduce",
            tokens=elems / 4096,
            m=2 * elems,
            workers=2,
            tp=2,
            flops=0.0,
            bytes=2 * elems * 1.0,
            time_s=1.0,
        )
    )
    p = f.predict(probe)
    lines = truth[2]
    want = [
        min(lat + b / bw for i, (lat, bw) in enumerate(lines) if i >= 2 or tk <= 128)
        for b, tk in zip(2 * elems, elems / 4096)
    ]
    assert p == pytest.approx(want, rel=0.05)
    assert p[2] > 1.2 * (lines[1][0] + 2 * elems[2] / lines[1][1])  # past 128 tokens the one-shot line is gone


def test_roofline_prices_the_capped_regimes_as_the_fit(tmp_path):
    df, _ = synthetic_allreduce(8)
    f = fit(df, form="physical")
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "ar-test")
    assert hw.allreduce_oneshot_tokens == ONESHOT_MAX_TOKENS
    m = load_model("llama-3.1-8b")
    for tp in (2, 8):
        cm = CostModel(m, hw, tp)
        for rows in (1, 64, 128, 129, 1024, 8192):
            size = 2.0 * m.H * rows
            probe = pd.DataFrame(
                dict(
                    op_class="allreduce",
                    op="all_reduce",
                    tokens=[float(rows)],
                    m=size,
                    workers=tp,
                    tp=tp,
                    flops=0.0,
                    bytes=2 * (tp - 1) / tp * size,
                    time_s=1.0,
                )
            )
            calls = 2 * m.L + (hw.counting != "seed")  # faithful: the vocab-parallel embedding's too
            assert cm.allreduce_s(rows) == pytest.approx(calls * f.predict(probe)[0], rel=1e-9)
    old = hw.replace(allreduce_oneshot_tokens=0)  # older profiles: every regime at every size
    cm, cm_old = CostModel(m, hw, 2), CostModel(m, old, 2)
    assert cm_old.allreduce_s(256) < cm.allreduce_s(256) and cm_old.allreduce_s(64) == cm.allreduce_s(64)


def test_nccl_reference_rows_fix_the_nccl_lines_below_the_switch():
    """8 GPUs: one-shot up to 128 tokens, then NCCL (three protocol lines); NCCL reference rows at
    the one-shot sizes are priced by the NCCL lines alone, which then get a fifth line and recover
    the low-latency protocol the engine's own rows never show; 2 GPUs, with none, keep four."""
    rng = np.random.default_rng(11)
    oneshot, nccl = [(4e-6, 60e9), (6e-6, 150e9)], [(18e-6, 30e9), (30e-6, 150e9), (90e-6, 450e9)]
    elems = 2.0 ** np.arange(7, 30)
    B, tok = 2 * 7 / 8 * 2 * elems, np.maximum(1, np.floor(elems / 4096))
    line = lambda ls, b: min(lat + b / bw for lat, bw in ls)  # noqa: E731
    os_ = tok <= ONESHOT_MAX_TOKENS
    eng = np.array([line(oneshot + nccl if o else nccl, b) for b, o in zip(B, os_)])
    ref = np.array([line(nccl, b) for b in B[os_]])
    frame = lambda op, t, sel: pd.DataFrame(
        dict(
            op_class="allreduce",
            op=op,
            tokens=tok[sel],
            m=2 * elems[sel],  # noqa: E731
            workers=8,
            tp=8,
            flops=0.0,
            bytes=B[sel],
            time_s=t * np.exp(0.005 * rng.standard_normal(len(t))),
        )
    )
    two = synthetic_allreduce(3)[0].query("workers == 2")
    df = pd.concat(
        [frame("custom_all_reduce", eng, np.ones(len(B), bool)), frame("nccl_reference", ref, os_), two],
        ignore_index=True,
    )
    f = fit(df, form="physical")
    c = f.classes["allreduce"]
    assert sum(p.endswith("@8") for p in c.params) == 10 and sum(p.endswith("@2") for p in c.params) == 8
    assert f.value("allreduce.latency_mid2@8") == pytest.approx(nccl[0][0], rel=0.1)
    r = df[df.op == "nccl_reference"]
    assert f.predict(r) == pytest.approx(ref, rel=0.05)  # the one-shot lines never price them
    assert (f.predict(r) > 1.5 * f.predict(df[(df.op == "custom_all_reduce") & (df.tokens <= 128)])).all()
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "ar-ref")
    assert len(hw.allreduce_regimes[8]) == 10 and len(hw.allreduce_regimes[2]) == 8
    assert hw.allreduce_oneshot_alone == [8]  # AUTO runs one-shot there, whatever NCCL takes
    with pytest.raises(InputError, match="allreduce_oneshot_alone"):
        hardware_from_dict({**hw.__dict__, "allreduce_oneshot_alone": ["8"]}, "bad")
    back = hardware_from_dict(__import__("yaml").safe_load(hw.to_yaml()), "roundtrip")
    assert back.allreduce_oneshot_alone == [8]
    cm = CostModel(load_model("llama-3.1-8b"), hw, 8)
    for rows in (16, 128, 129, 4096):
        size = 2.0 * 4096 * rows
        probe = pd.DataFrame(
            dict(
                op_class="allreduce",
                op="custom_all_reduce",
                tokens=[float(rows)],
                m=size,
                workers=8,
                tp=8,
                flops=0.0,
                bytes=2 * 7 / 8 * size,
                time_s=1.0,
            )
        )
        calls = 2 * cm.model.L + (hw.counting != "seed")  # faithful: the vocab-parallel embedding's too
        assert cm.allreduce_s(rows) == pytest.approx(calls * f.predict(probe)[0], rel=1e-9)


def test_a_one_shot_line_seen_at_two_sizes_is_turned_off():
    """8 GPUs over NVLink (NCCL reference rows below the switch): one-shot is one line here and the
    smallest timed size runs 35 % fast (noise). No one-shot line may rest on fewer than three
    sizes (``lone_lines``), so the size below, never timed, is priced by the line every other
    size shows, not by a steep line through the outlier."""
    rng = np.random.default_rng(5)
    oneshot, nccl = (5e-6, 70e9), [(18e-6, 30e9), (30e-6, 150e9), (70e-6, 450e9)]
    elems = 2.0 ** np.arange(8, 30)
    B, tok = 2 * 7 / 8 * 2 * elems, np.maximum(1, np.floor(elems / 4096))
    line = lambda b: min(lat + b / bw for lat, bw in nccl)  # noqa: E731
    t = np.array([oneshot[0] + b / oneshot[1] if k <= 128 else line(b) for b, k in zip(B, tok)])
    t *= np.exp(0.01 * rng.standard_normal(len(t)))
    t[0] *= 0.65
    os_ = tok <= 128
    frame = lambda op, tt, sel: pd.DataFrame(
        dict(
            op_class="allreduce",
            op=op,
            tokens=tok[sel],
            m=2 * elems[sel],  # noqa: E731
            workers=8,
            tp=8,
            flops=0.0,
            bytes=B[sel],
            time_s=tt,
        )
    )
    df = pd.concat(
        [
            frame("custom_all_reduce", t, np.ones(len(B), bool)),
            frame("nccl_reference", np.array([line(b) for b in B[os_]]), os_),
        ],
        ignore_index=True,
    )
    f = fit(df, form="physical")
    lat = [f.value(f"allreduce.latency_{p}@8") for p in ("small", "mid")]
    assert max(lat) > 1.0  # one of the two one-shot lines is off
    b = 2 * 7 / 8 * 2 * 128.0
    probe = df.iloc[[0]].assign(m=2 * 128.0, bytes=b)
    assert f.predict(probe)[0] == pytest.approx(oneshot[0] + b / oneshot[1], rel=0.05)
    assert f.classes["allreduce"].errors["median_ape"] < 2.0


def test_roofline_prices_oneshot_alone_where_the_profile_says():
    """A tp in allreduce_oneshot_alone takes its one-shot lines alone up to the token cap, even
    where a later line is cheaper; past the cap, and for other tps, the lines' minimum as before."""
    slow, fast = [50e-6, 1e11, 60e-6, 1e11], [5e-6, 1e12, 6e-6, 1e12, 7e-6, 1e12]
    hw = load_hardware("h100").replace(allreduce_regimes={8: slow + fast}, allreduce_oneshot_tokens=128)
    m = load_model("llama-3.1-8b")
    plain, alone = CostModel(m, hw, 8), CostModel(m, hw.replace(allreduce_oneshot_alone=[8]), 8)
    size = lambda rows: 2 * 7 / 8 * 2.0 * m.H * rows  # noqa: E731     bus bytes of a pass
    assert plain.allreduce_s(64) == pytest.approx(2 * m.L * (5e-6 + size(64) / 1e12))
    assert alone.allreduce_s(64) == pytest.approx(2 * m.L * (50e-6 + size(64) / 1e11))
    assert alone.allreduce_s(256) == plain.allreduce_s(256) == pytest.approx(2 * m.L * (5e-6 + size(256) / 1e12))
    other = CostModel(m, hw.replace(allreduce_oneshot_alone=[4], allreduce_regimes={8: slow + fast}), 8)
    assert other.allreduce_s(64) == plain.allreduce_s(64)
    from costmodel.calibration.step_pricing import _allreduce  # the step fit's vectorized copy

    rows = np.array([1, 64, 128, 129, 256, 4096])
    for cm in (plain, alone, other):
        assert list(_allreduce(cm, rows)) == [cm.allreduce_s(int(r)) for r in rows]
