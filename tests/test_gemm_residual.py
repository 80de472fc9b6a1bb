"""The GEMM residual field (costmodel/gemm_residual.py, fitted in calibration/gemm_fit.py): a
measured shape keeps its own residual, a missing one takes the mean of its equidistant grid
neighbours, the field fades away from the table and never bridges a shape's missing rows; a
residual constant along k is found from synthetic timings and carried to held-out shapes; a
profile ships it (NaN included) and prices like the fit; bad fields are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings, strategies as st
from test_gemm_correction import A100, TRUE

from costmodel import CostModel, load_model
from costmodel.calibration import gemm_fit
from costmodel.calibration.fit import Fit
from costmodel.calibration.gemm_fit import GemmTilesFit
from costmodel.calibration.profile import profile_from_fit
from costmodel.errors import InputError
from costmodel.gemm_residual import BOUND, Field, build
from costmodel.gemm_tiles import PARAMS, GemmTiles
from costmodel.hardware import hardware_from_dict


def grid_rows(ns, ks, ms, r):
    """Rows over the full grid and their residual r(m, n, k)."""
    m, n, k = (a.ravel() for a in np.meshgrid(ms, ns, ks, indexing="ij"))
    return m, n, k, np.array([r(a, b, c) for a, b, c in zip(m, n, k)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_measured_shapes_keep_their_residual_and_a_missing_one_averages_its_neighbours(seed):
    rng = np.random.default_rng(seed)
    ns, ks, ms = 2.0 ** np.arange(5, 10), 2.0 ** np.arange(6, 11), np.array([1.0, 16.0, 256.0])
    table = {(a, b, c): rng.uniform(-0.3, 0.3) for a in ms for b in ns for c in ks}
    m, n, k, r = grid_rows(ns, ks, ms, lambda a, b, c: table[(a, b, c)])
    hole = (n == ns[2]) & (k == ks[2])
    f = Field(*build(m[~hole], n[~hole], k[~hole], r[~hole]), h=(0.1, 0.1), shrink=1.0)
    np.testing.assert_allclose(f(m[~hole], n[~hole], k[~hole]), r[~hole], atol=1e-9)
    for mm in ms:
        want = np.mean([table[(mm, ns[2] * a, ks[2] * b)] for a, b in ((2, 1), (0.5, 1), (1, 2), (1, 0.5))])
        assert f(np.array([mm]), np.array([ns[2]]), np.array([ks[2]]))[0] == pytest.approx(want, abs=1e-6)
    half = Field(*build(m, n, k, r), h=(0.1, 0.1), shrink=0.5)
    np.testing.assert_allclose(half(m, n, k), 0.5 * r, atol=1e-9)


def test_the_field_fades_away_from_the_table_and_skips_missing_rows():
    ns, ks, ms = 2.0 ** np.arange(5, 9), 2.0 ** np.arange(5, 9), np.array([1.0, 64.0, 4096.0])
    m, n, k, r = grid_rows(ns, ks, ms, lambda a, b, c: 0.3 if b == ns[1] else -0.1)
    f = Field(*build(m, n, k, r), h=(0.5, 0.5), shrink=1.0)
    assert abs(f(np.array([64.0]), np.array([2.0**16]), np.array([64.0]))[0]) < 1e-6
    assert abs(f(np.array([64.0]), np.array([64.0]), np.array([2.0**20]))[0]) < 1e-6
    gap = (n == ns[1]) & (k == ks[1]) & (m == 64.0)  # a shape with its middle row missing
    f = Field(*build(m[~gap], n[~gap], k[~gap], r[~gap]), h=(0.05, 0.05), shrink=1.0)
    assert f(np.array([64.0]), np.array([ns[1]]), np.array([ks[1]]))[0] == pytest.approx(
        0.1, abs=1e-6
    )  # its 4 neighbours
    assert f(np.array([1.0]), np.array([ns[1]]), np.array([ks[1]]))[0] == pytest.approx(0.3, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), m=st.integers(1, 1 << 15))
def test_field_is_bounded_and_its_cached_path_matches(seed, m):
    rng = np.random.default_rng(seed)
    ns, ks, ms = (
        2.0 ** np.sort(rng.uniform(4, 16, 6)),
        2.0 ** np.sort(rng.uniform(4, 16, 6)),
        2.0 ** np.arange(0, 14, 3),
    )
    mm, n, k, r = grid_rows(ns, ks, ms, lambda a, b, c: rng.uniform(-1, 1))
    f = Field(*build(mm, n, k, r), h=tuple(rng.uniform(0.1, 2, 2)), shrink=float(rng.uniform(0, 1)))
    qn, qk = 2.0 ** rng.uniform(0, 18, 5), 2.0 ** rng.uniform(0, 18, 5)
    many = f(np.full(5, float(m)), qn, qk)
    one = [f(np.array([float(m)]), qn[[i]], qk[[i]])[0] for i in range(5)]
    assert np.all(np.abs(many) <= BOUND + 1e-12)
    np.testing.assert_allclose(many, one, atol=1e-12)


def synthetic(seed):
    """Tile-model timings times a residual drawn per (m, n), the same at every k: the kernel
    choice follows the output grid."""
    rng = np.random.default_rng(seed)
    ns = np.round(2.0 ** np.linspace(7, 14, 12))
    ks = np.round(2.0 ** np.linspace(7, 14, 12))
    ms = 2.0 ** np.arange(0, 13, 2)
    u = {(a, b): rng.uniform(-0.25, 0.25) for a in ms for b in ns}
    m, n, k, r = grid_rows(ns, ks, ms, lambda a, b, c: u[(a, b)])
    base = GemmTiles(**TRUE, sms=108).times(m, n, k)
    return pd.DataFrame({"m": m, "n": n, "k": k, "time_s": base * np.exp(r), "r": r}), base


@pytest.mark.parametrize("seed", [0, 1])
def test_fit_finds_a_residual_that_follows_n_and_carries_it_to_held_out_shapes(seed):
    df, base = synthetic(seed)
    shapes = np.unique(df[["n", "k"]].to_numpy(), axis=0)
    pick = shapes[np.random.default_rng(seed + 10).choice(len(shapes), len(shapes) // 4, replace=False)]
    held = (df[["n", "k"]].to_numpy()[:, None, :] == pick[None]).all(2).any(1)
    tr = df[~held].reset_index(drop=True)
    grid_, shp, vals, (hn, hk), a = gemm_fit.fit_field(tr, base[~held], None, base[~held])
    assert hn < hk
    got = Field(grid_, shp, vals, (hn, hk), a)(*(df[c].to_numpy()[held] for c in "mnk"))
    err = np.abs(got - df["r"].to_numpy()[held])
    assert err.mean() < 0.3 * np.abs(df["r"].to_numpy()[held]).mean()  # without the field: 1×


def test_profile_ships_the_field_and_prices_like_the_fit():
    df, _ = synthetic(3)
    df = df[~((df["n"] == df["n"].max()) & (df["m"] == 4.0))].reset_index(drop=True)  # a NaN in the field
    df.loc[::50, "time_s"] *= 3.0  # residuals beyond the bound: stored at it, rounding included
    base = GemmTiles(**TRUE, sms=108).times(df.m, df.n, df.k)
    field = gemm_fit.fit_field(df, base, None, base)
    assert field and np.isnan(np.asarray(field[2], float)).any()
    assert np.nanmax(np.abs(np.asarray(field[2], float))) == pytest.approx(BOUND)
    values = np.array([TRUE[p] for p in PARAMS[:9]] + [0.0])
    g = GemmTilesFit(
        "gemm",
        "physical",
        PARAMS,
        values,
        np.zeros((10, 10)),
        0.0,
        dict.fromkeys(PARAMS, 0),
        {},
        (),
        units={},
        sms=108,
        field=field,
    )
    fit = Fit({"gemm": g}, 0.0, ("synthetic",))
    hw = hardware_from_dict(yaml.safe_load(profile_from_fit(fit, A100, "synthetic").to_yaml()))
    assert len(hw.gemm_field) == len(hw.gemm_field_shapes) and hw.gemm_field_h == list(field[3])
    tiles = CostModel(load_model("llama-3.1-8b"), hw, 1).tiles
    np.testing.assert_allclose(tiles.times(df.m, df.n, df.k), g.predict(df), rtol=1e-12)


def test_bad_fields_are_refused():
    d = yaml.safe_load(A100.to_yaml())
    ok = dict(
        gemm_field_m=[0.0, 4.0],
        gemm_field_shapes=[[5.0, 5.0], [6.0, 5.0]],
        gemm_field=[[0.1, float("nan")], [0.0, -0.2]],
        gemm_field_h=[0.3, 1.0],
        gemm_field_shrink=0.75,
    )
    assert hardware_from_dict({**d, **ok}).gemm_field_shrink == 0.75
    for bad in (
        dict(gemm_field=[[0.1, 0.2]]),
        dict(gemm_field=[[0.1, 0.9], [0.0, 0.0]]),
        dict(gemm_field_h=[0.0, 1.0]),
        dict(gemm_field_shrink=1.5),
        dict(gemm_field_m=[4.0, 0.0]),
    ):
        with pytest.raises(InputError, match="gemm_field"):
            hardware_from_dict({**d, **ok, **bad})
