"""The one-shot all-reduce past the SM count (``allreduce_model.wave_rows``): TensorRT-LLM's fusion
kernel caps its grid at the SMs, so more tokens than SMs take a second round that the one-shot
lines of the smaller sizes do not follow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import CostModel, load_hardware, load_model
from costmodel.calibration.allreduce_model import NCCL_REFERENCE, ONESHOT_MAX_TOKENS
from costmodel.calibration.fit import fit
from costmodel.calibration.holdout import split_by_shape
from costmodel.calibration.importers import read_aiconfigurator
from costmodel.calibration.profile import profile_from_fit
from costmodel.errors import InputError
from costmodel.hardware import hardware_from_dict

A100 = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels" / "aiconfigurator" / "a100_sxm"
needs_data = pytest.mark.skipif(not A100.is_dir(), reason="AIConfigurator tables ../shared/data/kernels absent")


@pytest.fixture(scope="module")
def a100():
    df = read_aiconfigurator(A100, classes=["allreduce"])[0]
    return df, load_hardware("a100-80gb").replace(sms=108)  # A100 SXM: 108 SMs (Ampere whitepaper)


@needs_data
def test_a100_held_out_sizes_at_8_gpus_with_the_second_round_apart(a100):
    """A quarter of A100's message sizes held out (the draw of seed 0: 1K, 16K, 32K, 256K, 4M and
    16M elements), 8 GPUs: the 128-token row (83.2 µs, 2.9x the 64-token one) no longer bends the
    one-shot lines that price the held-out sizes (MAPE 15.6 % with it priced by those lines)."""
    df, hw = a100
    train, held = split_by_shape(df, 0.25, 0)
    assert (train["tokens"] > hw.sms).any()
    f = fit(train, form="physical", spec=hw)
    h = held[(held["workers"] == 8) & (held["op"] != NCCL_REFERENCE)]
    ape = 100 * np.abs(f.predict(h) / h["time_s"].to_numpy() - 1)
    assert len(h) == 6 and ape.mean() < 8.0
    assert ape.max() < 15.0


@needs_data
def test_profile_prices_the_second_round_as_the_fit(a100):
    """The fitted A100 profile carries each count's second-round time and prices 109 to 128 tokens
    with it (8 GPUs: about the measured 83 µs at 128), fewer tokens and NCCL's sizes without it;
    the simulator's scalar and vectorized prices are the fit's."""
    df, hw = a100
    f = fit(df, form="physical", spec=hw)
    prof = profile_from_fit(f, hw, "a100 all-reduce", "a100-ar")
    assert set(prof.allreduce_wave_s) == {2, 4, 8} and prof.sms == 108
    assert prof.allreduce_wave_s[8] > 10e-6 > prof.allreduce_wave_s[2]
    back = hardware_from_dict(__import__("yaml").safe_load(prof.to_yaml()), "roundtrip")
    assert back.allreduce_wave_s == prof.allreduce_wave_s
    m = load_model("llama-3.1-8b")  # hidden 4096: the collector's layout
    cm = CostModel(m, prof, 8)
    calls = 2 * m.L + (prof.counting != "seed")
    rows = np.array([1, 64, 108, 109, 128, 129, 4096])
    size = 2.0 * m.H * rows
    probe = pd.DataFrame(
        dict(
            op_class="allreduce",
            op="custom_all_reduce",
            tokens=rows.astype(float),
            m=size,
            workers=8,
            tp=8,
            flops=0.0,
            bytes=2 * 7 / 8 * size,
            time_s=1.0,
        )
    )
    want = calls * f.predict(probe)
    got = np.array([cm.allreduce_s(int(r)) for r in rows])
    assert got == pytest.approx(want, rel=1e-9)
    assert want[4] / calls == pytest.approx(83.2e-6, rel=0.05)
    assert want[3] - want[2] > 0.5 * calls * prof.allreduce_wave_s[8]
    from costmodel.calibration.step_pricing import _allreduce

    assert list(_allreduce(cm, rows)) == list(got)


def test_wave_time_is_checked_and_added_only_past_the_sm_count():
    """A wave time on a tp prices sms < rows <= the one-shot cap only, on the one-shot lines only;
    it needs sms and a tp of allreduce_regimes."""
    lines = [5e-6, 1e12, 6e-6, 1e12, 7e-6, 1e11, 9e-6, 1e12]
    hw = load_hardware("h100").replace(
        allreduce_regimes={8: lines}, allreduce_oneshot_tokens=ONESHOT_MAX_TOKENS, sms=100
    )
    m = load_model("llama-3.1-8b")
    plain, waved = CostModel(m, hw, 8), CostModel(m, hw.replace(allreduce_wave_s={8: 40e-6}), 8)
    for rows in (1, 100, 129, 4096):
        assert waved.allreduce_s(rows) == plain.allreduce_s(rows)
    for rows in (101, 128):  # one-shot 5 µs + 40: NCCL's 9 µs line is cheaper
        size = 2 * 7 / 8 * 2.0 * m.H * rows
        assert waved.allreduce_s(rows) == pytest.approx(waved.ar_calls * (9e-6 + size / 1e12))
    alone = CostModel(m, hw.replace(allreduce_wave_s={8: 40e-6}, allreduce_oneshot_alone=[8]), 8)
    size = 2 * 7 / 8 * 2.0 * m.H * 128
    assert alone.allreduce_s(128) == pytest.approx(alone.ar_calls * (45e-6 + size / 1e12))
    assert alone.allreduce_s(100) == pytest.approx(alone.ar_calls * (5e-6 + 2 * 7 / 8 * 2.0 * m.H * 100 / 1e12))
    with pytest.raises(InputError, match="allreduce_wave_s"):
        hardware_from_dict({**hw.__dict__, "allreduce_wave_s": {8: 1e-6}, "sms": 0}, "bad")
    with pytest.raises(InputError, match="allreduce_wave_s"):
        hardware_from_dict({**hw.__dict__, "allreduce_wave_s": {4: 1e-6}}, "bad")


def test_convex_one_shot_sizes_are_fitted_as_a_floor_then_a_rate():
    """8 GPUs, one-shot a flat 5 µs floor up to about 32K elements, then 3 µs + B / 60 GB/s (convex:
    no minimum of two lines follows it), NCCL beyond 128 tokens; sizes 4K and 64K elements held
    out. The fit takes the two one-shot lines' maximum (``hinged``) and prices both held-out sizes
    to 3 %; the profile and the simulator price them the same way."""
    rng = np.random.default_rng(2)
    nccl = [(18e-6, 30e9), (30e-6, 150e9), (90e-6, 450e9)]
    elems = 2.0 ** np.arange(7, 30)
    B, tok = 2 * 7 / 8 * 2 * elems, elems / 4096
    os_ = tok <= ONESHOT_MAX_TOKENS
    line = lambda b: min(lat + b / bw for lat, bw in nccl)  # noqa: E731
    t = np.array([max(5e-6, 3e-6 + b / 60e9) if o else line(b) for b, o in zip(B, os_)])
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
            time_s=tt * np.exp(0.005 * rng.standard_normal(len(tt))),
        )
    )
    df = pd.concat(
        [
            frame("custom_all_reduce", t, np.ones(len(B), bool)),
            frame("nccl_reference", np.array([line(b) for b in B[os_]]), os_),
        ],
        ignore_index=True,
    )
    held = df["m"].isin([2 * 4096.0, 2 * 65536.0]) & (df["op"] == "custom_all_reduce")
    f = fit(df[~df["m"].isin([2 * 4096.0, 2 * 65536.0])], form="physical")
    assert "latency_floor@8" in f.classes["allreduce"].params
    want = t[np.isin(elems, [4096.0, 65536.0])]
    assert f.predict(df[held]) == pytest.approx(want, rel=0.03)
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "ar-hinge")
    assert hw.allreduce_oneshot_max == [8]
    assert hardware_from_dict(__import__("yaml").safe_load(hw.to_yaml()), "roundtrip").allreduce_oneshot_max == [8]
    m = load_model("llama-3.1-8b")
    cm = CostModel(m, hw, 8)
    rows = np.array([1, 8, 16, 64, 128, 129, 4096])
    size = 2.0 * m.H * rows
    probe = pd.DataFrame(
        dict(
            op_class="allreduce",
            op="custom_all_reduce",
            tokens=rows.astype(float),
            m=size,
            workers=8,
            tp=8,
            flops=0.0,
            bytes=2 * 7 / 8 * size,
            time_s=1.0,
        )
    )
    got = np.array([cm.allreduce_s(int(r)) for r in rows])
    assert got == pytest.approx(cm.ar_calls * f.predict(probe), rel=1e-9)
    from costmodel.calibration.step_pricing import _allreduce

    assert list(_allreduce(cm, rows)) == list(got)
    with pytest.raises(InputError, match="allreduce_oneshot_max"):
        hardware_from_dict({**hw.__dict__, "allreduce_oneshot_max": ["8"]}, "bad")


H100 = A100.parent / "h100_sxm"


@pytest.mark.skipif(not H100.is_dir(), reason="AIConfigurator tables ../shared/data/kernels absent")
def test_h100_8_gpus_held_out_sizes_within_8_percent():
    """H100, 8 GPUs (issue 14's bar: 8 %): the one-shot sizes sit at a noisy 3.4-5.3 µs floor up to
    32K elements, then rise at a rate (8.2 µs at 64K, 31.2 at 512K), and NCCL's curve turns
    gradually from 1M to 32M elements. The held-out sizes of the three draws: MAPE 10.3 % with
    the one-shot lines' minimum and NCCL's hard minimum, 8.2 % with the floor then a rate, under
    8 % with NCCL's soft minimum too; the draw of seed 0 holds out 8M elements (125.2 µs), which
    the hard minimum priced where two lines cross (138.8 µs)."""
    df = read_aiconfigurator(H100, classes=["allreduce"])[0]
    hw = load_hardware("h100").replace(sms=132)
    ape = []
    for seed in (0, 1, 2):
        train, held = split_by_shape(df, 0.25, seed)
        f = fit(train, form="physical", spec=hw)
        h = held[(held["workers"] == 8) & (held["op"] != NCCL_REFERENCE)]
        e = 100 * np.abs(f.predict(h) / h["time_s"].to_numpy() - 1)
        ape += list(e)
        if seed == 0:
            assert e[h["m"].to_numpy() == 2 * 8388608.0] == pytest.approx(0.0, abs=4.0)
    assert np.mean(ape) < 8.0


def test_soft_minimum_of_lines():
    """Two lines that cross: 2^(-1/p) of their time there; far from a crossing the smaller line;
    lines at infinity (not allowed) count for nothing, and all of them give infinity."""
    from costmodel.allreduce import SOFT_P, soft_min

    assert soft_min(np.array([10.0, 10.0])) == pytest.approx(10.0 * 2 ** (-1 / SOFT_P))
    assert soft_min(np.array([10.0, 100.0])) == pytest.approx(10.0, rel=1e-7)
    assert soft_min(np.array([[10.0, np.inf], [np.inf, np.inf]]), axis=1).tolist() == [10.0, np.inf]
    hw = load_hardware("h100")
    with pytest.raises(InputError, match="allreduce_soft"):
        hardware_from_dict({**hw.__dict__, "allreduce_soft": [1]}, "bad")


@pytest.mark.parametrize("lines", [1, 2])
@pytest.mark.parametrize("oneshot_tokens", [0, 128])
def test_array_pricing_of_one_or_two_lines_is_the_scalar_one(lines, oneshot_tokens):
    """A tp with one or two all-reduce lines (a valid profile: one pair per regime) is priced by
    the step fit's array form as by ``call_time``, whatever the new flags say."""
    from costmodel.allreduce import call_time, call_times

    r = [8e-6, 2e11, 2e-5, 4e11][: 2 * lines]
    rows = np.array([1, 64, 120, 200, 4096])
    size = rows * 16384.0
    for soft in (False, True):
        vec = call_times(r, size, rows, oneshot_tokens, False, None, 1e-5, 108, True, soft)
        ref = [
            call_time(r, float(s), int(n), oneshot_tokens, False, None, 1e-5, 108, True, soft)
            for s, n in zip(size, rows)
        ]
        assert vec.tolist() == ref


@pytest.mark.parametrize("wave", [True, float("inf")])
def test_wave_time_must_be_a_finite_number(wave):
    hw = load_hardware("a100-sxm")
    with pytest.raises(InputError, match="allreduce_wave_s"):
        hardware_from_dict({**hw.__dict__, "allreduce_wave_s": {8: wave}}, "bad")
