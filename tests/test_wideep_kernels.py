"""Wide-EP kernel models against AIConfigurator's measured H200 SGLang tables, held out by shape
(a quarter of each family's distinct shapes never seen by the fit, seeds 0-2), and the shipped
constants' physics against arithmetic done here."""

from __future__ import annotations

from math import comb
from pathlib import Path

import numpy as np
import pytest

from costmodel import deepep, mla, moe_cost
from costmodel.wideep import constants

AIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels" / "aiconfigurator"
needs_data = pytest.mark.skipif(not (AIC / "h200_sxm").is_dir(), reason="needs ../shared/data")

# Issue #30's bars (docs/kernel-notes.md: the figures, the split, what is left).
BARS = {
    "deepep_normal_dispatch": 10.0,
    "deepep_normal_combine": 10.0,
    "deepep_low_latency_dispatch": 10.0,
    "deepep_low_latency_combine": 10.0,
    "moe_generation": 8.0,
    "moe_context": 8.0,
    "mla_generation": 8.0,
    "mla_context": 8.0,
}


@pytest.fixture(scope="module")
def held():
    from costmodel.calibration import wideep_fit

    return wideep_fit.summary(wideep_fit.load(AIC)).set_index("family")


@needs_data
@pytest.mark.parametrize("family", sorted(BARS))
def test_held_out_mape(held, family):
    assert held.loc[family, "n"] > 0
    assert held.loc[family, "mape"] <= BARS[family]


@needs_data
def test_held_out_shapes_are_unseen():
    """Every held-out row's shape is absent from the fit's rows (two tp labels of one per-GPU MLA
    shape are one shape)."""
    from costmodel.calibration import wideep_fit

    df = wideep_fit.load(AIC)
    sub = df[df["family"] == "mla_context"]
    shapes = np.unique(sub["shape"])
    pick = np.random.default_rng(0).choice(shapes, size=round(0.25 * len(shapes)), replace=False)
    held = sub["shape"].isin(pick)
    assert not set(sub[held]["shape"]) & set(sub[~held]["shape"])
    assert held.sum() > 0.2 * len(sub)


def test_distinct_remote_matches_enumeration():
    """Expected distinct remote nodes of k experts drawn from E without replacement, by hand."""
    E, k, G = 16, 3, 4
    per = E // G
    total = comb(E, k)
    # P(a given other node is hit) = 1 - C(E-per, k)/C(E, k), times G-1 other nodes
    assert deepep.distinct_remote(G, k, E) == pytest.approx((G - 1) * (1 - comb(E - per, k) / total))
    assert deepep.distinct_remote(1, k, E) == 0.0
    assert deepep.copies("low_latency", 4, 8, 8, 256) == pytest.approx(8 * 3 / 4)


def test_deepep_time_is_latency_plus_bytes_over_rate():
    p = constants()["deepep_low_latency_dispatch"]
    T, nodes = 96, 4
    c = deepep.copies("low_latency", nodes, 8, 8, 256)
    nb = deepep.dispatch_bytes(7168)
    assert nb == 7168 + 4 * 7168 / 128
    want = p["t0"] + p["hop"] * 2 + T * c * nb / p["bw"]
    assert float(deepep.a2a_time(T, nodes, 0, c, nb, p)) == pytest.approx(want)
    # fitted rates are physical: NIC under 50 GB/s per GPU's 400 Gb/s, NVLink under 450 GB/s
    assert 30e9 < p["bw"] <= 50e9 and 100e9 < p["bw_intra"] <= 450e9


def test_grouped_moe_hot_rank():
    """Uniform routing: T·k/ep rows per rank; a skewed law puts more on the hottest rank, and EPLB
    brings its rows back to the uniform share."""
    T, k, E, ep = 4096, 8, 256, 16
    rows, touched = moe_cost.hot_rank_load(T, k, E, ep)
    assert rows == T * k / ep
    assert touched == pytest.approx(E / ep * (1 - (1 - k / E) ** T))
    hot, _ = moe_cost.hot_rank_load(T, k, E, ep, skew=1.0)
    w = np.arange(1, E + 1) ** -1.0
    assert hot == pytest.approx(T * k * w[: E // ep].sum() / w.sum())
    assert moe_cost.hot_rank_load(T, k, E, ep, skew=1.0, eplb=True)[0] == pytest.approx(rows)


def test_mla_decode_reads_one_latent_per_token():
    """A memory-bound decode (few heads, long context) costs the latent's bytes over β, plus each
    head's q in and output out, plus one sequence's latent at beta_one."""
    p = dict(pi=1e30, beta=2e12, beta_fp8=1e12, beta_one=4e12, floor=0.0, cta_s=0.0, sms=132.0)
    b, kv, h = 8, 10_000, 16
    qo = b * 2 * h * (576 + 512) / 2e12
    t = mla.time_generation(h, b, kv, 2.0, p)
    assert float(t) == pytest.approx(b * kv * 576 * 2 / 2e12 + qo + kv * 576 * 2 / 4e12)
    assert float(mla.time_generation(h, b, kv, 1.0, p)) == pytest.approx(b * kv * 576 / 1e12 + qo + kv * 576 / 4e12)


def test_mla_prefill_counts_causal_tiles():
    """One long sequence of many heads: compute-bound at n(n+1)/2 full 128² blocks of 2·320 FLOPs."""
    p = dict(pi=5e14, pi_fp8=1e15, beta=1e30, floor=0.0, cta_s=0.0, solo=1e30, sms=132.0)
    s, h = 8192, 128
    n = s // 128
    want = h * n * (n + 1) / 2 * 2 * 320 * 128 * 128 / 5e14
    assert float(mla.time_context(h, 1, s, 2.0, p)) == pytest.approx(want)
    assert float(mla.time_context(h, 1, s, 1.0, p)) == pytest.approx(want / 2)
