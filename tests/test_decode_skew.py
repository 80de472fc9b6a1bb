"""The decode skew (``Hardware.attn_decode_skew``): a decode batch of uneven contexts costs
t_mean + α·(t_max - t_mean), the form LLMServingSim's profiler times and fits (its skew.csv and
meta.yaml ``skew_fit``), checked against the same profile priced at the longest context and at
the mean, for each fitted decode kernel model, alone and beside a prefill chunk."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml

from costmodel import CostModel, InputError, load_hardware, load_model
from costmodel.calibration.importers import skew_alpha
from costmodel.shape import ShapeStats
from experiments.engines import build_cluster
from simcore.simulation import Simulation, fixed_workload
from simcore.stepping import SteppingReplica

M = load_model("llama-3.1-8b")


def profile(kind: str, alpha: float):
    """l40s's fitted profile: separate kernels with the unit decode model, or a varlen variant
    (decodes beside a chunk ride the prefill kernel; alone, the quadrature decode model)."""
    hw = load_hardware("l40s")
    if kind == "varlen":
        hw = hw.replace(attn_form="varlen", attn_mixed_pi=2e12, attn_mixed_seq_s=1e-6, attn_decode_unit_s=0.0)
    return hw.replace(attn_decode_skew=alpha)


@pytest.mark.parametrize("kind", ["separate", "varlen"])
@pytest.mark.parametrize("chunk", [0, 512])
@pytest.mark.parametrize("n", [3, 60])
def test_skew_is_alpha_of_the_gap_to_the_longest_context(kind, chunk, n):
    a = 0.3
    on, off = CostModel(M, profile(kind, a)), CostModel(M, profile(kind, 0.0))
    kv = np.random.default_rng(n).integers(50, 4000, n).tolist()
    kv[-1] += n - sum(kv) % n  # Σ kv a multiple of n: the batch at its mean context is a whole batch
    q0, kv0 = ([chunk], [1000]) if chunk else ([], [])
    ragged = off.step_time(q0 + [1] * n, kv0 + kv)
    longest = off.step_time(q0 + [1] * n, kv0 + [max(kv)] * n)
    mean = off.step_time(q0 + [1] * n, kv0 + [sum(kv) // n] * n)
    got = on.step_time(q0 + [1] * n, kv0 + kv)
    assert ragged == pytest.approx(mean, rel=1e-12)  # without the skew a price linear in Σ kv
    assert longest > ragged
    assert got - ragged == pytest.approx(a * (longest - ragged), rel=1e-9)
    assert on.step_time(q0 + [1] * n, kv0 + [sum(kv) // n] * n) == mean  # even contexts: no skew
    s = on.shape(q0 + [1] * n, kv0 + kv)
    assert s.decode_kv_max == max(kv) + 1
    assert on.breakdown(s).time_s == pytest.approx(got, rel=1e-12)


def test_longest_decode_of_small_and_wide_batches():
    rng = np.random.default_rng(0)
    for n in (5, 200):
        q = [1] * n + [300]
        kv = rng.integers(0, 9000, n + 1).tolist()
        s = ShapeStats.of(q, kv, decode_max=True)
        assert s.decode_kv_max == max(kv[:n]) + 1  # the chunk (compute-bound) is not a decode
        assert dataclasses.replace(s, decode_kv_max=0) == ShapeStats.of(q, kv)  # the sums as without it


def test_decodes_as_totals_are_refused_and_zero_skew_is_unchanged():
    on = CostModel(M, profile("separate", 0.2))
    with pytest.raises(InputError, match="decodes"):
        on.step_time([], [], 4, 4000)
    off = CostModel(M, profile("separate", 0.0))
    assert not off.needs_stepping and on.needs_stepping
    assert off.step_time([], [], 4, 4000) == off.step_time([1] * 4, [999] * 4)


def test_a_skewed_profile_runs_the_reference_loop():
    engine = {"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096, "num_gpu_blocks_override": 900}
    rng = np.random.default_rng(3)
    arr, p, o = np.cumsum(rng.exponential(0.05, 40)), rng.integers(20, 1500, 40), rng.integers(2, 200, 40)

    def run(alpha, ff):
        engines, _, L = build_cluster("vllm", M, profile("separate", alpha), 1, engine, 1, "least_outstanding")
        sim = Simulation(engines, fixed_workload(arr, p, o), max_model_len=L, fast_forward=ff)
        return sim, sim.run().requests

    sim, skewed = run(0.5, True)
    assert all(isinstance(r, SteppingReplica) for r in sim.replicas)
    pd.testing.assert_frame_equal(skewed, run(0.5, False)[1])
    plain = run(0.0, True)[1]
    assert skewed["e2el_s"].mean() > plain["e2el_s"].mean()  # uneven batches cost more


def test_skew_alpha_from_the_profilers_meta(tmp_path):
    meta = {"skew_fit": {"per_tp": {1: {"alpha_default": 0.057}, 2: {"alpha_default": 0.0649}}}}
    (tmp_path / "tp2").mkdir()
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    assert skew_alpha(tmp_path, 2) == 0.0649 and skew_alpha(tmp_path / "tp2", 1) == 0.057
    assert skew_alpha(tmp_path, 4) == 0.0  # not profiled at that tp
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump({"skew_fit": {"per_tp": {2: {"alpha_default": -0.1}}}}))
    assert skew_alpha(tmp_path, 2) == 0.0


def test_negative_skew_is_refused(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(load_hardware("l40s").replace(name="x", attn_decode_skew=-0.1).to_yaml())
    with pytest.raises(InputError, match="attn_decode_skew"):
        load_hardware(str(f))
