"""benchmarks/bench_kernels.py ``pair_scatter``: a GEMM table's own repeatability, on synthetic
tables whose timing noise is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.bench_kernels import pair_scatter


def table(noise, seed=0, shapes=400):
    """Rows m in (48, 64, 80, 96) of ``shapes`` (n, k) shapes; the true time of a shape is the same
    for the rows of a pair up to a fixed ratio (1.1 from 48 to 64, 1.0 from 80 to 96), each row
    timed once with a factor exp(noise(rng))."""
    rng = np.random.default_rng(seed)
    n, k = rng.integers(7, 15, (2, shapes))
    rows = []
    for i in range(shapes):
        base = 1e-6 * 2.0 ** (n[i] + k[i] - 20)
        for m, ratio in ((48, 1.0), (64, 1.1), (80, 2.0), (96, 2.0)):
            rows.append((m, 2.0 ** n[i] + i, 2.0 ** k[i], base * ratio * np.exp(noise(rng))))
    return pd.DataFrame(rows, columns=["m", "n", "k", "time_s"])


def test_exact_timings_scatter_nothing():
    assert pair_scatter(table(lambda r: 0.0)) == pytest.approx(0.0, abs=1e-9)


def test_gaussian_noise_gives_its_pair_difference():
    """ln t of each row off by N(0, s²): a pair's log ratio is N(0, 2 s²), whose mean |exp - 1|
    is computed here by quadrature; the scatter is about √2 x a row's own mean |error|."""
    s = 0.05
    got = pair_scatter(table(lambda r: r.normal(0.0, s), shapes=4000))
    x = np.linspace(-8, 8, 20001) * s * np.sqrt(2)
    pdf = np.exp(-0.5 * (x / (s * np.sqrt(2))) ** 2) / (s * np.sqrt(2) * np.sqrt(2 * np.pi))
    want = 100 * np.trapezoid(np.abs(np.expm1(x)) * pdf, x)
    assert got == pytest.approx(want, rel=0.05)
    row = 100 * np.trapezoid(np.abs(np.expm1(x / np.sqrt(2))) * pdf, x)  # one row's own mean |error|
    assert got / row == pytest.approx(np.sqrt(2), rel=0.06)


def test_no_pair_is_nan():
    df = table(lambda r: 0.0)
    assert np.isnan(pair_scatter(df[df["m"].isin([48, 80])]))
