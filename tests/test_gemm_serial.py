"""The unsplit kernel's region of the GEMM model (costmodel/gemm_serial.py, found in
calibration/gemm_fit.py): a known region and its t0 + tau·k recovered from synthetic timings of the
tile model, none invented where the tile model is exact, and a profile that ships it prices as the
fit predicts; bad values refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from costmodel import CostModel, load_hardware, load_model
from costmodel.calibration import gemm_fit
from costmodel.calibration.fit import fit
from costmodel.calibration.holdout import split_by_shape
from costmodel.calibration.profile import profile_from_fit
from costmodel.calibration.timings import gemm_row
from costmodel.errors import InputError
from costmodel.gemm_serial import apply, region
from costmodel.gemm_tiles import GemmTiles
from costmodel.hardware import hardware_from_dict

MiB = 1 << 20
L40S = load_hardware("a100-80gb").replace(sms=142, l2_bytes=96.0 * MiB)
TRUE = dict(
    pi=250e12, beta=1.6e12, beta_l2=6e12, beta_cta=60e9, floor=3e-6, split=2e-6, wave=4e-7, l2=20e6, l2_out=30e6
)


def table(seed: int, n_rows: int = 4000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    m = 2.0 ** rng.integers(0, 12, n_rows)
    n = 2.0 ** rng.integers(5, 14, n_rows)
    k = 2.0 ** rng.integers(5, 15, n_rows)
    return pd.DataFrame({"m": m, "n": n, "k": k})


def rows_of(df: pd.DataFrame, t: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(gemm_row("gemm", df.m.to_numpy(), df.k.to_numpy(), df.n.to_numpy(), 2, t))


def test_region_excludes_one_row_and_prices_the_slower_kernel():
    ser = (2e-6, 4e-9, 2.0**20, 8192.0, 16.0)
    m, n, k = np.array([1.0, 2, 16, 32, 4, 4]), np.array([32.0, 32, 128, 32, 256, 32]), np.array([4096.0] * 5 + [16384])
    np.testing.assert_array_equal(region(m, n, k, ser), [False, True, True, False, False, False])
    t = np.full(6, 5e-6)
    got = apply(t, m, n, k, ser)
    np.testing.assert_allclose(got, np.where(region(m, n, k, ser), np.maximum(t, 2e-6 + 4e-9 * k), t))
    assert apply(t, m, n, k, ()) is t


@pytest.mark.parametrize(
    "seed,t0,tau,s_exp,k_max,m_max", [(0, 2.2e-6, 4.0e-9, 20.0, 8192.0, 16.0), (1, 3.0e-6, 6.0e-9, 19.0, 4096.0, 64.0)]
)
def test_fit_recovers_a_known_region(seed, t0, tau, s_exp, k_max, m_max):
    df = table(seed)
    truth = (t0, tau, 2.0**s_exp, k_max, m_max)
    t = apply(GemmTiles(**TRUE, sms=142).times(df.m, df.n, df.k), df.m, df.n, df.k, truth)
    g = fit(rows_of(df, t), form="physical", spec=L40S).classes["gemm"]
    assert g.serial, "no region found"
    mnk = [df[c].to_numpy(float) for c in "mnk"]  # n·k and m are powers of two: the region as a set of rows
    np.testing.assert_array_equal(region(*mnk, g.serial), region(*mnk, truth))
    assert g.serial[0] == pytest.approx(t0, rel=0.02) and g.serial[1] == pytest.approx(tau, rel=0.02)


def test_fit_recovers_a_wide_branch_beside_the_narrow_region():
    """Wide outputs the library runs unsplit at every k (the L40S at n >= 1,536): the wide branch
    is found with the narrow region and priced on the same line."""
    df = table(4, 6000)
    truth = (2.2e-6, 4.0e-9, 2.0**20, 8192.0, 16.0, 2048.0, 32.0)
    t = apply(GemmTiles(**TRUE, sms=142).times(df.m, df.n, df.k), df.m, df.n, df.k, truth)
    g = fit(rows_of(df, t), form="physical", spec=L40S).classes["gemm"]
    mnk = [df[c].to_numpy(float) for c in "mnk"]
    assert len(g.serial) == 7, g.serial
    np.testing.assert_array_equal(region(*mnk, g.serial), region(*mnk, truth))
    assert g.serial[0] == pytest.approx(2.2e-6, rel=0.02) and g.serial[1] == pytest.approx(4.0e-9, rel=0.02)


def test_held_out_shapes_inside_the_region_are_priced_by_it():
    df = table(2)
    truth = (2.2e-6, 4.0e-9, 2.0**20, 8192.0, 16.0)
    rows = rows_of(df, apply(GemmTiles(**TRUE, sms=142).times(df.m, df.n, df.k), df.m, df.n, df.k, truth))
    train, held = split_by_shape(rows, 0.25, 0)
    f = fit(train, form="physical", spec=L40S)
    inside = region(held.m.to_numpy(float), held.n.to_numpy(float), held.k.to_numpy(float), truth)
    ape = np.abs(f.predict(held) / held["time_s"].to_numpy() - 1)
    assert inside.sum() > 20 and ape[inside].mean() < 0.03 and ape.mean() < 0.03


def test_no_region_is_invented_for_an_exact_tile_model():
    df = table(3)
    t = GemmTiles(**TRUE, sms=142).times(df.m, df.n, df.k)
    assert gemm_fit.fit_serial(df.assign(time_s=t), t) == ()


def test_a_profile_ships_the_region_and_prices_as_the_fit():
    df = table(4)
    truth = (2.2e-6, 4.0e-9, 2.0**20, 8192.0, 16.0)
    rows = rows_of(df, apply(GemmTiles(**TRUE, sms=142).times(df.m, df.n, df.k), df.m, df.n, df.k, truth))
    f = fit(rows, form="physical", spec=L40S)
    hw = profile_from_fit(f, L40S, "synthetic", "serial-test")
    assert hw.gemm_serial == list(f.classes["gemm"].serial)
    again = hardware_from_dict(yaml.safe_load(hw.to_yaml()))
    assert again.gemm_serial == pytest.approx(hw.gemm_serial)
    cm = CostModel(load_model("llama-3.1-8b"), again, 1)
    m, n, k = np.full(3, 4.0), np.array([32.0, 64.0, 4096.0]), np.array([8192.0, 4096.0, 4096.0])
    probe = pd.DataFrame({"m": m, "n": n, "k": k, "time_s": 1.0})
    np.testing.assert_allclose(cm.tiles.times(m, n, k), f.classes["gemm"].predict(probe), rtol=1e-9)


@pytest.mark.parametrize(
    "bad", ["abc", [1.0, 2.0, 3.0], [1e-6, 4e-9, 2.0**20, 8192.0, -16.0], [1e-6, 4e-9, True, 1.0, 2.0]]
)
def test_bad_regions_are_refused_naming_the_field(bad):
    d = yaml.safe_load(load_hardware("a100-sxm").to_yaml())
    with pytest.raises(InputError, match="gemm_serial"):
        hardware_from_dict({**d, "gemm_serial": bad})
