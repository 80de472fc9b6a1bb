"""The GEMM model's bounded shape correction (costmodel/gemm_correction.py, fitted in
calibration/gemm_fit.py): a known correction recovered from synthetic timings, none invented where
the tile model is exact, held-out shapes of a real A100 table predicted better with it than
without, and a profile that ships it prices exactly as the fit predicts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from costmodel import CostModel, load_hardware, load_model
from costmodel.calibration import gemm_fit
from costmodel.calibration.fit import fit
from costmodel.calibration.holdout import split_by_shape
from costmodel.calibration.importers import read_aiconfigurator
from costmodel.calibration.profile import profile_from_fit
from costmodel.calibration.timings import gemm_row
from costmodel.errors import InputError
from costmodel.gemm_correction import BOUND, Correction, log_factor
from costmodel.gemm_tiles import GemmTiles
from costmodel.hardware import hardware_from_dict

MiB = 1 << 20
A100 = load_hardware("a100-80gb").replace(sms=108, l2_bytes=40.0 * MiB)
TRUE = dict(
    pi=250e12, beta=1.6e12, beta_l2=6e12, beta_cta=60e9, floor=3e-6, split=2e-6, wave=4e-7, l2=20e6, l2_out=30e6
)
GEMM_FIX = Path(__file__).resolve().parent / "fixtures" / "aiconfigurator_gemm" / "a100_sxm"


def table(seed: int, n_rows: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    m = 2.0 ** rng.integers(0, 14, n_rows)
    n = 2.0 ** rng.integers(7, 15, n_rows)
    k = 2.0 ** rng.integers(7, 15, n_rows)
    return pd.DataFrame({"m": m, "n": n, "k": k})


def known_correction(df: pd.DataFrame, a: float, b: float, c: float):
    """A correction on the knots the fit will choose: linear in log2 m plus an n×k saddle (no
    second differences along any axis, so the smoothness penalty does not bias it)."""
    knots = [gemm_fit._knots(df[col].to_numpy(float)) for col in "mnk"]
    u = [np.linspace(-0.5, 0.5, len(kn)) for kn in knots]
    coef = a * u[0][:, None, None] + b * u[1][None, :, None] + c * 4 * u[1][None, :, None] * u[2][None, None, :]
    return tuple(map(tuple, knots)), tuple(float(v) for v in coef.ravel())


@pytest.mark.parametrize("seed,a,b,c", [(0, 0.2, -0.1, 0.15), (1, -0.3, 0.05, -0.1), (2, 0.1, 0.2, 0.0)])
def test_fit_recovers_a_known_correction(seed, a, b, c):
    df = table(seed)
    tiles = GemmTiles(**TRUE, sms=108)
    base = tiles.times(df.m, df.n, df.k)
    knots, coef = known_correction(df, a, b, c)
    truth = log_factor(knots, coef, df.m, df.n, df.k)
    got_knots, got, _ = gemm_fit.fit_correction(df.assign(time_s=base * np.exp(truth)), base)
    assert got_knots == knots
    np.testing.assert_allclose(got, coef, atol=0.01)
    assert np.max(np.abs(log_factor(got_knots, got, df.m, df.n, df.k) - truth)) < 0.005


def test_no_correction_is_invented_for_an_exact_model():
    df = table(3)
    base = GemmTiles(**TRUE, sms=108).times(df.m, df.n, df.k)
    knots, coef, _ = gemm_fit.fit_correction(df.assign(time_s=base), base)
    assert not coef or np.max(np.abs(coef)) < 1e-3


def test_full_fit_predicts_held_out_shapes_of_a_corrected_model():
    """Timings of the tile model times a known correction: fitted on three quarters of the whole
    (n, k) shapes, the rest are predicted within 2 % (the tile constants and the correction may
    trade a little, the product may not)."""
    df = table(4, 2500)
    knots, coef = known_correction(df, 0.25, -0.15, 0.1)
    truth = GemmTiles(**TRUE, sms=108, corr_knots=knots, corr=coef)
    rows = pd.DataFrame(
        gemm_row("gemm", df.m.to_numpy(), df.k.to_numpy(), df.n.to_numpy(), 2, truth.times(df.m, df.n, df.k))
    )
    train, held = split_by_shape(rows, 0.25, 0)
    f = fit(train, form="physical", spec=A100)
    ape = np.abs(f.predict(held) / held["time_s"].to_numpy() - 1)
    assert f.classes["gemm"].corr and ape.mean() < 0.02


@pytest.fixture(scope="module")
def a100_gemms():
    df, _ = read_aiconfigurator(GEMM_FIX)
    return df[df["op_class"] == "gemm"].reset_index(drop=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correction_improves_held_out_shapes_of_a_real_table(a100_gemms, seed):
    """25 whole (n, k) shapes of AIConfigurator's A100 table (all 21 m each): a quarter held out."""
    train, held = split_by_shape(a100_gemms, 0.25, seed)
    g = fit(train, form="physical", spec=A100).classes["gemm"]
    meas = held["time_s"].to_numpy()
    with_c = np.mean(np.abs(g.predict(held) / meas - 1))
    without = np.mean(np.abs(dataclasses.replace(g, corr=(), corr_knots=(), field=()).predict(held) / meas - 1))
    assert g.corr and with_c < without and with_c < 0.08


def test_profile_ships_the_correction_and_prices_like_the_fit(a100_gemms):
    f = fit(a100_gemms, form="physical", spec=A100)
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(f, A100, "fixture").to_yaml()))
    assert len(hw.gemm_corr) == np.prod([len(kn) for kn in hw.gemm_corr_knots]) > 0
    tiles = CostModel(load_model("llama-3.1-8b"), hw, 1).tiles
    got = tiles.times(a100_gemms.m, a100_gemms.n, a100_gemms.k)
    np.testing.assert_allclose(got, f.predict(a100_gemms), rtol=1e-12)


def test_profiles_without_a_correction_still_load_and_bad_ones_are_refused():
    d = yaml.safe_load(A100.to_yaml())
    for key in ("gemm_corr", "gemm_corr_knots"):
        d.pop(key)
    assert hardware_from_dict(d).gemm_corr == []
    knots = [[0.0, 13.0], [5.0, 16.0], [5.0, 16.0]]
    with pytest.raises(InputError, match="gemm_corr"):
        hardware_from_dict({**d, "gemm_corr_knots": knots, "gemm_corr": [0.0] * 7})
    with pytest.raises(InputError, match="gemm_corr"):
        hardware_from_dict({**d, "gemm_corr_knots": knots, "gemm_corr": [0.0] * 7 + [BOUND + 0.01]})
    with pytest.raises(InputError, match="gemm_corr_knots"):
        hardware_from_dict({**d, "gemm_corr_knots": [[0.0, 13.0], [16.0, 5.0], [5.0, 16.0]], "gemm_corr": [0.0] * 8})


@settings(max_examples=40, deadline=None)
@given(
    coef=st.lists(st.floats(-BOUND, BOUND), min_size=27, max_size=27),
    m=st.integers(1, 1 << 16),
    n=st.integers(1, 1 << 16),
    k=st.integers(1, 1 << 16),
)
def test_factor_is_bounded_and_interpolates_the_knots(coef, m, n, k):
    knots = ((0.0, 6.0, 12.0), (5.0, 10.0, 15.0), (5.0, 9.0, 13.0))
    c = log_factor(knots, coef, [m], [n], [k])[0]
    assert abs(c) <= BOUND + 1e-12
    i, j, l = 1, 2, 0
    at = log_factor(knots, coef, [2 ** knots[0][i]], [2 ** knots[1][j]], [2 ** knots[2][l]])[0]
    assert at == pytest.approx(coef[(i * 3 + j) * 3 + l], abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 1 << 15), seed=st.integers(0, 10**6))
def test_one_m_short_path_matches_the_general_one(m, seed):
    """A pass's weight GEMMs (one m, several (n, k)) take the cached short path; it gives the
    general path's values, and the fit's design matrix agrees with both."""
    rng = np.random.default_rng(seed)
    knots = [tuple(np.sort(rng.uniform(0, 16, 5)) + np.arange(5)) for _ in range(3)]
    coef = rng.uniform(-BOUND, BOUND, 125)
    ms = np.array([m, 2 * m + 1, 3, m], float)
    n, k = 2.0 ** rng.uniform(0, 18, 4), 2.0 ** rng.uniform(0, 18, 4)
    c = Correction(knots, coef)
    general = c(ms, n, k)
    short = [c(np.full(2, ms[i]), n[[i, i]], k[[i, i]])[0] for i in range(4)]
    design = gemm_fit._design(knots, pd.DataFrame({"m": ms, "n": n, "k": k})) @ coef
    np.testing.assert_allclose(general, design, atol=1e-12)
    np.testing.assert_allclose(short, design, atol=1e-12)


def test_step_fit_prices_a_corrected_profile_on_its_fast_path(a100_gemms):
    """The step fit's vectorized GEMM pricing (calibration/step_pricing.py) applies the correction
    too: it installs itself (it matches CostModel._tiled_time) and prices every batch alike."""
    from costmodel.calibration.step_pricing import _tiled_lookup, step_shapes
    from costmodel.calibration.step_timings import uniform_steps

    hw = profile_from_fit(fit(a100_gemms, form="physical", spec=A100), A100, "fixture")
    assert hw.gemm_corr
    model = load_model("llama-3.1-8b")
    rng = np.random.default_rng(5)
    n = 40
    npf, q, kvp = rng.integers(0, 3, n), rng.integers(1, 2048, n), rng.integers(0, 4096, n)
    nd, kvd = rng.integers(0, 64, n) + (npf == 0), rng.integers(1, 4096, n)
    shapes = step_shapes(uniform_steps(npf, q, kvp, nd, kvd, np.ones(n), "x"))
    cm = CostModel(model, hw, 1)
    used = np.unique(shapes.inv)
    _tiled_lookup(cm, shapes, used)
    assert "_tiled_time" in vars(cm)
    ref = CostModel(model, hw, 1)
    for j in used:
        assert cm.step_time(*shapes.batches[j]) == pytest.approx(ref.step_time(*shapes.batches[j]), rel=1e-12)
