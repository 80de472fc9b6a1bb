"""benchmarks/steps_data_check.py: the monotone step family, with and without a term on recorded
power, recovers members built with known parameters; the power report says when there is none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.steps_data_check import fit_monotone, isotonic, power_check

GRID = [
    (128, 1),
    (256, 1),
    (512, 1),
    (512, 2),
    (512, 4),
    (512, 8),
    (512, 16),
    (512, 32),
    (512, 64),
    (1024, 1),
    (2048, 1),
    (4096, 1),
    (8192, 1),
]


def test_isotonic_is_the_pooled_mean():
    y, w = np.array([1.0, 3.0, 2.0, 4.0, 0.0]), np.array([1.0, 1.0, 3.0, 1.0, 1.0])
    got = isotonic(y, w)
    assert np.all(np.diff(got) >= 0)
    np.testing.assert_allclose(got, [1.0] + [(3 + 2 * 3 + 4 + 0) / 6] * 4)
    s = np.sort(np.random.default_rng(0).uniform(0, 1, 20))
    np.testing.assert_allclose(isotonic(s, np.ones(20)), s)


def member(F, S, A, g, k=0.0, over=None):
    p, b = np.array(GRID, dtype=float).T
    o = np.zeros(len(p)) if over is None else over
    return pd.DataFrame(
        {"prompt_size": p, "batch_size": b, "median": F + S * b + A * b * p * p + p * b * (1 + k * o) * g(p * b)}
    )


@pytest.mark.parametrize("F,S,A", [(30.0, 0.5, 2e-7), (80.0, 2.0, 0.0)])
def test_a_member_is_reproduced(F, S, A):
    g = lambda r: 0.25 + 0.1 * (r > 2048) + 0.05 * (r > 8192)
    cfg = member(F, S, A, g)
    f = fit_monotone(cfg)
    got = f(cfg.prompt_size.to_numpy(float), cfg.batch_size.to_numpy(float))
    np.testing.assert_allclose(got, cfg["median"], rtol=0.01)


@pytest.mark.parametrize("k,seed", [(6.0, 0)])
def test_the_power_term_is_recovered(k, seed):
    over = np.random.default_rng(seed).uniform(0.0, 0.03, len(GRID))
    cfg = member(40.0, 1.0, 1e-7, lambda r: 0.2 + 0.05 * (r > 1024), k=k, over=over)
    f = fit_monotone(cfg, over)
    got = f(cfg.prompt_size.to_numpy(float), cfg.batch_size.to_numpy(float), over)
    np.testing.assert_allclose(got, cfg["median"], rtol=0.01)
    assert f.k == pytest.approx(k, rel=0.2)


def test_power_check_says_when_power_is_not_recorded():
    raw = pd.DataFrame(
        [("x", p, b, 0.0, 0.0, 100.0 * p * b / 512) for p, b in GRID],
        columns=["hardware", "prompt_size", "batch_size", "peak_power", "average_power", "prompt_time"],
    )
    assert power_check(raw, "x", set()) == ["    power: not recorded for this GPU"]


@pytest.mark.parametrize("F,S,A,W", [(30.0, 0.5, 2e-7, 300.0), (60.0, 1.0, 0.0, 120.0)])
def test_a_power_bound_member_is_in_the_family(F, S, A, W):
    """A GEMM held at the power limit costs max(weights W, rows·c, (E_w + E_r·rows)/TDP), a maximum
    of lines in the rows, so convex: f(0) + r·g(r) with g = (f(r) - f(0))/r rising, a member of the
    monotone family (whose bounds then hold for every such power model)."""
    g = lambda r: np.maximum(np.maximum(W / r, 0.2), (8.0 + 120e-3 * r) / 400.0 * 1e3 / r)
    cfg = member(F, S, A, g)
    f = fit_monotone(cfg)
    got = f(cfg.prompt_size.to_numpy(float), cfg.batch_size.to_numpy(float))
    np.testing.assert_allclose(got, cfg["median"], rtol=0.01)
