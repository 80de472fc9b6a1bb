"""Quantized GEMM fits (issue #29): a profile's gemm_dtypes, Hardware.for_gemm_dtype, the tile
model's element bytes and AIConfigurator's GEMM dtype selection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costmodel import load_hardware
from costmodel.errors import InputError
from costmodel.gemm_tiles import GEMM_DTYPES, GemmTiles, element_bytes, grid, times_on
from costmodel.hardware import GEMM_DTYPE_FIELDS, hardware_from_dict

AIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels" / "aiconfigurator"
L40S_GEMM = AIC / "l40s" / "trtllm" / "1.0.0" / "gemm_perf.txt"
SHIPPED = {"h100-sxm": {"fp8", "fp8_block"}, "b200": {"fp8", "nvfp4"}}


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


def test_for_gemm_dtype_replaces_the_gemm_fields(h100):
    q = h100.for_gemm_dtype("fp8")
    assert q is not None and q.name == h100.name and q.gemm_form == "tiles"
    assert q.peak_flops == pytest.approx(1.978e15) and h100.peak_flops == pytest.approx(989e12)
    assert q.pi_eff > h100.pi_eff and q.pi_eff <= q.peak_flops
    for f in ("pi_eff", "beta_eff", "kernel_overhead_s", "gemm_l2_beta", "gemm_cta_beta", "gemm_corr"):
        assert getattr(q, f) != getattr(h100, f), f
    entry = h100.gemm_dtypes["fp8"]
    assert all(getattr(q, f) == entry[f] for f in GEMM_DTYPE_FIELDS)
    assert (entry["weight_bytes"], entry["act_bytes"]) == element_bytes("fp8") == (1.0, 1.0)
    assert q.attn_form == h100.attn_form and q.allreduce_regimes == h100.allreduce_regimes  # the rest as is


def test_for_gemm_dtype_none_without_a_fit(h100):
    assert h100.for_gemm_dtype("int4") is None
    assert h100.for_gemm_dtype("int4_wo") is None  # H100's int4_wo rows are its fp8 rows: not fitted
    assert load_hardware("h100").for_gemm_dtype("fp8") is None  # a spec profile: no gemm_dtypes
    assert GemmTiles.from_profile(h100, "nvfp4") is None


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_profiles_hold_their_dtypes(name):
    hw = load_hardware(name)
    assert SHIPPED[name] <= set(hw.gemm_dtypes)
    for d in hw.gemm_dtypes:
        assert d in GEMM_DTYPES and hw.for_gemm_dtype(d).pi_eff <= hw.gemm_dtypes[d]["peak_flops"]


def test_fp8_faster_than_bf16_by_compute_and_by_weight_bytes(h100):
    bf16, fp8 = GemmTiles.from_profile(h100), GemmTiles.from_profile(h100, "fp8")
    big = bf16.time(8192, 8192, 8192) / fp8.time(8192, 8192, 8192)
    gemv = bf16.time(1, 8192, 8192) / fp8.time(1, 8192, 8192)
    assert 1.3 < big < 2.2  # fp8's peak is twice bf16's
    assert 1.4 < gemv < 2.6  # an m = 1 GEMM streams its weights: 1 byte against 2


def test_element_bytes_leave_16_bit_grid_unchanged():
    m, n, k = np.array([1.0, 64, 4096]), np.array([4096.0, 1024, 8192]), np.array([4096.0, 8192, 1024])
    g0, g1 = grid(m, n, k, 132), grid(m, n, k, 132, 2.0, 2.0, 2.0)
    v = (8e14, 3e12, 2e13, 1e11, 4e-6, 2e-6, 1e-9, 2e7, 5e7, 4e7)
    assert np.array_equal(times_on(g0, v), times_on(g1, v))
    g4 = grid(m, n, k, 132, 2.0, *element_bytes("int4_wo"))
    assert np.allclose(g4["W"], element_bytes("int4_wo")[0] * n * k) and np.allclose(g4["X"], 2.0 * m * k)
    assert (times_on(g4, v) < times_on(g0, v)).all()


def test_gemm_dtypes_validated():
    d = {"name": "x", "memory_bytes": 1e9, "peak_flops": 1e14, "peak_bandwidth": 1e12, "pi_eff": 1e14}
    d["beta_eff"] = 1e12
    with pytest.raises(InputError):
        hardware_from_dict({**d, "gemm_dtypes": {"fp8": {"pi_eff": 1e14, "bogus": 1}}})
    with pytest.raises(InputError):
        hardware_from_dict({**d, "gemm_dtypes": {"fp8": {"pi_eff": -1.0, "beta_eff": 1e12, "peak_flops": 2e14}}})
    ok = hardware_from_dict({**d, "gemm_dtypes": {"fp8": {"pi_eff": 2e14, "beta_eff": 1e12, "peak_flops": 2e14}}})
    assert ok.for_gemm_dtype("fp8").pi_eff == 2e14 and ok.for_gemm_dtype("fp8").peak_flops == 2e14


@pytest.mark.skipif(not L40S_GEMM.is_file(), reason="needs ../shared/data (AIConfigurator's tables)")
def test_importer_selects_one_gemm_dtype():
    from costmodel.calibration.importers import read_aiconfigurator
    from costmodel.calibration.importers.aiconfigurator import spec_dtype_peak

    f16, _ = read_aiconfigurator(L40S_GEMM)
    fp8, notes = read_aiconfigurator(L40S_GEMM, gemm_dtype="fp8")
    int4, _ = read_aiconfigurator(L40S_GEMM, gemm_dtype="int4_wo")
    assert set(f16["dtype"]) == {"float16"} and set(fp8["dtype"]) == {"fp8"} and set(int4["dtype"]) == {"int4_wo"}
    assert 9000 < len(fp8) <= 9240 and 5900 < len(int4) <= 6048
    assert any("float16: 9240" in n for n in notes)  # the other dtypes skipped and said so
    m, n, k = (fp8[c].to_numpy(float) for c in "mnk")
    assert np.allclose(fp8["bytes"], k * n + m * k + 2 * m * n)
    m, n, k = (int4[c].to_numpy(float) for c in "mnk")
    assert np.allclose(int4["bytes"], element_bytes("int4_wo")[0] * k * n + 2 * m * k + 2 * m * n)
    assert spec_dtype_peak(L40S_GEMM, "fp8") == 733e12 and spec_dtype_peak(L40S_GEMM, "int8_wo") == 362.05e12
    assert spec_dtype_peak(AIC / "b200_sxm", "nvfp4") == 9e15
    with pytest.raises(InputError):
        read_aiconfigurator(L40S_GEMM, gemm_dtype="int2")
