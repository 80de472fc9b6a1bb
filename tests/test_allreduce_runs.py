"""NCCL over PCIe as runs of lines (calibration/allreduce_runs.py): recovery on synthetic
non-concave curves, the blend across a switch, the importer's routing of a PCIe spec sheet, the
profile round trip and the roofline pricing it as the fit does."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import CostModel, load_hardware, load_model
from costmodel.allreduce import run_times
from costmodel.calibration.allreduce_model import ONESHOT_MAX_TOKENS
from costmodel.calibration.allreduce_runs import NCCL_PCIE, latency_bound
from costmodel.calibration.fit import fit
from costmodel.calibration.importers import read_aiconfigurator
from costmodel.calibration.profile import profile_from_fit
from costmodel.errors import InputError
from costmodel.hardware import hardware_from_dict

FIX = Path(__file__).parent / "fixtures" / "aiconfigurator"
ELEMS = 2.0 ** np.arange(7, 30)


def pcie_truth(n: int, scale: float):
    """Runs (first size in elements, ℓ, bw) below and above the token switch: a slower run per byte
    between two faster ones, as NCCL's tuner over PCIe runs it."""
    return [
        (0, 20e-6 * scale, 1e9 * scale, True),
        (2**17, 90e-6, 2.0e9 * scale, True),
        (0, 50e-6, 1.0e9 * scale, False),
        (2**24, 60e-6, 2.1e9 * scale, False),
    ]


def pcie_time(n: int, scale: float, elems: np.ndarray) -> np.ndarray:
    B, tok = 2 * (n - 1) / n * 2 * elems, np.maximum(1, np.floor(elems / 4096))
    out = []
    for b, e, k in zip(B, elems, tok):
        side = [r for r in pcie_truth(n, scale) if r[3] == (k <= ONESHOT_MAX_TOKENS)]
        lat, bw = [(r[1], r[2]) for r in side if e >= r[0]][-1]
        out.append(lat + b / bw)
    return np.array(out)


def pcie_rows(seed: int, counts=(2, 8), scale=1.0, elems=ELEMS, noise=0.01) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for n in counts:
        t = pcie_time(n, scale, elems) * np.exp(noise * rng.standard_normal(len(elems)))
        rows.append(
            pd.DataFrame(
                dict(
                    op_class="allreduce",
                    op=NCCL_PCIE,
                    tokens=np.maximum(1, np.floor(elems / 4096)),
                    m=2 * elems,
                    workers=n,
                    tp=n,
                    flops=0.0,
                    bytes=2 * (n - 1) / n * 2 * elems,
                    time_s=t,
                )
            )
        )
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("seed,scale", [(1, 1.0), (2, 1.7), (3, 0.6)])
def test_runs_recover_a_curve_no_minimum_of_lines_follows(seed, scale):
    """The held-out sizes inside a run come back within noise, where the slower run per byte
    lies between two faster ones (a minimum of lines would take the faster everywhere)."""
    held = np.isin(ELEMS, 2.0 ** np.array([10, 15, 21, 27]))
    df = pcie_rows(seed, scale=scale, elems=ELEMS[~held])
    f = fit(df, form="physical")
    c = f.classes["allreduce"]
    assert set(c.switches) == {2, 8} and c.errors["mape"] < 2.0
    assert any(p.startswith("latency_run") for p in c.params)
    for n in (2, 8):
        e = ELEMS[held]
        probe = pd.DataFrame(
            dict(
                op_class="allreduce",
                op=NCCL_PCIE,
                tokens=np.maximum(1, np.floor(e / 4096)),
                m=2 * e,
                workers=n,
                tp=n,
                flops=0.0,
                bytes=2 * (n - 1) / n * 2 * e,
                time_s=1.0,
            )
        )
        assert f.predict(probe) == pytest.approx(pcie_time(n, scale, e), rel=0.04)
        lat = [v for p, v in zip(c.params, c.values) if p.startswith("latency_run") and p.endswith(f"@{n}")]
        assert max(lat) <= latency_bound(n) * (1 + 1e-9)


def test_blend_across_a_switch_is_geometric():
    lat, bw = np.array([1e-5, 2e-4]), np.array([1e9, 4e9])
    a, b = 1e6, 4e6
    B = np.array([a, 2e6, b, 0.5 * a, 2 * b])
    t = run_times(lat, bw, [a, b], B)
    line = lambda i, x: lat[i] + x / bw[i]  # noqa: E731
    assert t[0] == pytest.approx(line(0, a)) and t[2] == pytest.approx(line(1, b))
    assert t[1] == pytest.approx(np.sqrt(line(0, 2e6) * line(1, 2e6)), rel=1e-12)
    assert t[3] == pytest.approx(line(0, 0.5 * a)) and t[4] == pytest.approx(line(1, 2 * b))


def test_lines_crossing_inside_a_gap_switch_at_their_crossing():
    """Where the next run's line is the slower at the gap's start and the faster at its end, the
    two cross inside the gap: the price there is their minimum (NCCL's tuner switching where the
    protocols cross), not the blend, which would price the faster line's sizes above it."""
    lat, bw = np.array([2e-5, 9e-5]), np.array([1e9, 2e9])
    a, b = 5e4, 5e5
    cross = (lat[1] - lat[0]) / (1 / bw[0] - 1 / bw[1])
    B = np.array([a, 0.6 * cross, 1.5 * cross, b])
    t = run_times(lat, bw, [a, b], B)
    line = lambda i, x: lat[i] + x / bw[i]  # noqa: E731
    assert a < cross < b
    assert t[0] == pytest.approx(line(0, a)) and t[3] == pytest.approx(line(1, b))
    assert t[1] == pytest.approx(line(0, B[1]), rel=1e-12) and t[2] == pytest.approx(line(1, B[2]), rel=1e-12)


def test_held_out_sizes_where_two_runs_cross_come_back_within_noise():
    """NCCL over PCIe switching from LL to Simple where their lines cross (8 GPUs: 40K elements):
    with 32K and 64K elements held out, the gap between the runs spans the crossing and both
    sizes come back within noise (the blend across the gap missed 64K by 7 %)."""
    n, e = 8, ELEMS[ELEMS <= 2**19]
    B = 2 * (n - 1) / n * 2 * e
    truth = np.minimum(2e-5 + B / 1e9, 9e-5 + B / 2e9)
    held = np.isin(e, [2**15, 2**16])
    rng = np.random.default_rng(7)
    t = truth * np.exp(0.003 * rng.standard_normal(len(e)))
    df = pd.DataFrame(
        dict(
            op_class="allreduce",
            op=NCCL_PCIE,
            tokens=np.maximum(1, np.floor(e / 4096)),
            m=2 * e,
            workers=n,
            tp=n,
            flops=0.0,
            bytes=B,
            time_s=t,
        )
    )
    f = fit(df[~held].reset_index(drop=True), form="physical")
    assert f.classes["allreduce"].switches
    assert f.predict(df[held]) == pytest.approx(truth[held], rel=0.02)


def test_roofline_prices_switched_runs_as_the_fit():
    f = fit(pcie_rows(4), form="physical")
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "pcie-test")
    assert set(hw.allreduce_switches) == {2, 8}
    back = hardware_from_dict(hw.__dict__, "round trip")
    m = load_model("llama-3.1-8b")
    from costmodel.calibration.step_pricing import _allreduce

    for tp in (2, 8):
        cm = CostModel(m, back, tp)
        rows = np.array([1, 3, 64, 128, 129, 700, 1024, 8192, 30000])
        for r in rows:
            size = 2.0 * m.H * r
            probe = pd.DataFrame(
                dict(
                    op_class="allreduce",
                    op=NCCL_PCIE,
                    tokens=[float(r)],
                    m=size,
                    workers=tp,
                    tp=tp,
                    flops=0.0,
                    bytes=2 * (tp - 1) / tp * size,
                    time_s=1.0,
                )
            )
            calls = 2 * m.L + (back.counting != "seed")  # faithful: the vocab-parallel embedding's too
            assert cm.allreduce_s(int(r)) == pytest.approx(calls * f.predict(probe)[0], rel=1e-9)
        assert list(_allreduce(cm, rows)) == [cm.allreduce_s(int(r)) for r in rows]
    bad = {**hw.__dict__, "allreduce_switches": {8: [1.0, 2.0]}}
    with pytest.raises(InputError, match="allreduce_switches:8"):
        hardware_from_dict(bad, "bad")
    good = [float(x) for x in hw.allreduce_switches[8]]
    gap = next(i for i in range(0, len(good), 2) if good[i : i + 2] != [0.0, 0.0])
    a, b = good[gap], good[gap + 1]
    opened = good[:gap] + [0.0, b or 1.0] + good[gap + 2 :]  # log(B / 0): NaN step times
    flipped = good[:gap] + [b + 1.0, a] + good[gap + 2 :]
    cases = [opened, flipped]
    if any(good[i : i + 2] == [0.0, 0.0] for i in range(0, len(good), 2)):
        cases.append(None)  # a token switch with no one-shot cap
    for v in cases:
        bad = {**hw.__dict__, "allreduce_switches": {8: v if v is not None else good}}
        if v is None:
            bad["allreduce_oneshot_tokens"] = 0
        with pytest.raises(InputError, match="allreduce_switches:8"):
            hardware_from_dict(bad, "bad")


def test_pcie_spec_sheet_routes_rows_to_runs(tmp_path):
    """A folder whose spec sheet links the GPUs by PCIe alone: the engine runs NCCL at every size,
    so its all-reduce rows are labelled NCCL_PCIE and fitted as runs; the same tables under an
    NVLink sheet keep the custom rows and their regimes."""
    src = FIX / "a100_sxm"
    gpu = tmp_path / "pcie_gpu"
    shutil.copytree(src, gpu)
    sheet = (FIX / "a100_sxm.yaml").read_text().replace("intra_node_bw: 300000000000", "intra_node_bw: 32000000000")
    (tmp_path / "pcie_gpu.yaml").write_text(sheet)
    df, notes = read_aiconfigurator(gpu, classes=["allreduce"])
    assert set(df["op"]) == {NCCL_PCIE} and any("NCCL at every size" in n for n in notes)
    nv, _ = read_aiconfigurator(src, classes=["allreduce"])
    assert NCCL_PCIE not in set(nv["op"])
    f = fit(df, form="physical")
    assert f.classes["allreduce"].switches


def test_logits_gather_on_a_switched_tp_takes_the_runs_of_its_bus_bytes():
    """Over PCIe the engine's all-reduce is NCCL at every size, its price a function of the bus
    bytes (the token switch stands for NCCL's own switch by size): the logits all-gather (PyNCCL)
    of B bus bytes costs what the fit prices for an all-reduce row of B bus bytes, each run only in
    its own sizes (a minimum over the lines past the token switch would price a one-sequence
    gather on a line fitted to messages of megabytes)."""
    f = fit(pcie_rows(5), form="physical")
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "pcie-test")
    m = load_model("llama-3.1-8b")
    from costmodel.calibration.step_pricing import _gather

    for tp in (2, 8):
        cm = CostModel(m, hw, tp, counting="faithful")
        seqs = np.array([1, 2, 8, 64, 500, 4000])
        for s in seqs:
            B = (tp - 1) / tp * m.vocab * m.b * s
            tok = B / (2 * (tp - 1) / tp * m.H * m.b)
            probe = pd.DataFrame(
                dict(
                    op_class="allreduce",
                    op=NCCL_PCIE,
                    tokens=[tok],
                    m=B * tp / (2 * (tp - 1)),
                    workers=tp,
                    tp=tp,
                    flops=0.0,
                    bytes=B,
                    time_s=1.0,
                )
            )
            assert cm.gather_s(int(s)) == pytest.approx(f.predict(probe)[0], rel=1e-9)
        assert list(_gather(cm, seqs)) == [cm.gather_s(int(s)) for s in seqs]


def test_fallback_link_latency_is_the_small_messages_line():
    """The profile's per-hop latency (the all-reduce of a tp without regimes: 2(tp-1) hops) comes
    from the largest count's smallest-message line, so a small message costs about what the
    table measured there; a later run's latency (messages of megabytes, where the latency is
    whatever the line's intercept lands on) would not."""
    df = pcie_rows(6)
    f = fit(df, form="physical")
    hw = profile_from_fit(f, load_hardware("h100"), "synthetic", "pcie-test")
    big = max(hw.allreduce_regimes)
    assert hw.interconnect_latency_s * 2 * (big - 1) == pytest.approx(hw.allreduce_regimes[big][0], rel=1e-12)
    small = df[(df["workers"] == big)].sort_values("m").iloc[0]
    assert hw.interconnect_latency_s * 2 * (big - 1) == pytest.approx(small["time_s"], rel=0.1)
