"""Seed 001 §七's runtime change against what a larger chunk can save: the cost model's per-pass
saving checked against SGLang's measured fused-MoE layer, and the bounds against the seed's 900 s."""

from pathlib import Path

import pandas as pd
import pytest

from costmodel import CostModel, load_hardware, load_model
from experiments.sglang_chunk_bounds import (
    SMALL,
    _pass_s,
    bounds,
    format_bounds,
    prefill_ceiling_s,
    saving_per_avoided_pass_s,
    wait_share_needed,
)

MOE = (
    Path(__file__).resolve().parents[2] / "shared/data/kernels/aiconfigurator/h100_sxm/sglang/0.5.1.post1/moe_perf.txt"
)


@pytest.mark.skipif(not MOE.is_file(), reason="needs ../shared/data")
def test_measured_moe_layer_gains_little_from_a_doubled_pass():
    """SGLang's fused MoE, measured (AIConfigurator, H100): one 16,384-token pass against two of
    8,192 saves at most 17 % of the layer's time at every moe_tp 8 shape (the thinnest experts,
    384 of them, the most): a pass fewer saves a fixed part, not a share of the work."""
    d = pd.read_csv(MOE)
    d = d[d.moe_tp_size == 8]
    keys = ["hidden_size", "inter_size", "topk", "num_experts", "moe_dtype", "distribution"]
    t = d.pivot_table(index=keys, columns="num_tokens", values="latency")[[SMALL, 2 * SMALL]]
    saving = 1 - t[2 * SMALL] / (2 * t[SMALL])
    assert len(saving) >= 8 and (saving > -0.02).all() and (saving < 0.17).all()


def test_cost_model_pass_saving_is_the_fixed_part_of_a_pass():
    """On the calibrated profile one pass fewer saves at most a few % of a full 8,192-token pass (the
    measured MoE layer's order), and it is positive: the larger pass is the cheaper per token."""
    m = load_model("qwen3.5-122b-a10b")
    cm = CostModel(m, load_hardware("h100-sxm"), tp=8)
    full = _pass_s(cm, [SMALL], [0])
    per = saving_per_avoided_pass_s(hardware="h100-sxm")
    assert 0 < per < 0.2 * full
    assert per < 0.05  # seconds; the seed's rows read as a + b · batches need b ≈ 2.1 s


def test_neither_bound_reaches_the_seeds_runtime_change():
    """The 429 avoided passes save seconds, and even a free prefill saves less than the seed's
    900 s: the table's runtime change is not prefill work."""
    df = bounds()
    assert (df.avoided_passes_saving_s < 0.05 * df.seed_runtime_saved_s).all()
    assert (df.prefill_ceiling_s < df.seed_runtime_saved_s).all()
    # the ceiling is the dearest pass: 8,192 tokens at the context's end cost more than at its start
    m = load_model("qwen3.5-122b-a10b")
    cm = CostModel(m, load_hardware("h100"), tp=8)
    assert prefill_ceiling_s(hardware="h100") / 2214 > _pass_s(cm, [SMALL], [0])
    assert "avoided prefill batches" in format_bounds(df)


def test_wait_share_needed_solves_the_closed_loop():
    """Rebuild the seed's two runtimes from a closed loop at that wait share: e2e = wait + decode,
    decode ∝ TPOT, the larger chunk's wait zero; runtimes ∝ e2e give 91/106."""
    w = wait_share_needed()
    e2e_small = 1.0
    decode_small = e2e_small * (1 - w)
    e2e_large = decode_small * 19.9 / 19.6
    assert e2e_large / e2e_small == pytest.approx(91 / 106, rel=1e-12)
    assert 0.1 < w < 0.2


def test_with_equal_pools_the_runtime_saved_is_the_prefill_time_saved():
    """One KV pool for both chunk sizes (``equal_pools``): the larger chunk runs fewer prefill passes,
    decode is untouched, and the runtime falls by the prefill time it saves, which stays within the
    per-pass bound times the passes avoided."""
    from experiments.sglang_chunk_study import agentic_workload, equal_pools, run_one

    w = agentic_workload(160, concurrency=8, seed=1)
    a, b = (run_one(c, w, flags=equal_pools()) for c in (8192, 16384))
    assert a["kv_pool_tokens"] == b["kv_pool_tokens"]
    assert b["prefill_batches"] < 0.9 * a["prefill_batches"]
    saved_prefill = a["prefill_time_s"] - b["prefill_time_s"]
    saved_runtime = (a["runtime_min"] - b["runtime_min"]) * 60
    assert saved_runtime == pytest.approx(saved_prefill, abs=2e-3 * a["runtime_min"] * 60)
    avoided = a["prefill_batches"] - b["prefill_batches"]
    assert 0 < saved_prefill <= avoided * saving_per_avoided_pass_s(hardware="h100")
