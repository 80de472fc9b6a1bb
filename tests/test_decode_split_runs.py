"""Decode runs under the unit decode model's xqa, launch and gen splits (costmodel/decode_split_runs.py),
priced as arrays and as hoisted loops, against ``time`` on each pass's shape: every duration and
every end time the same bits, over profiles, models, tp, batch sizes, KV lengths across the
XQA/MMHA dispatch boundary, group ranges, MMHA's blocks per SM, hidden keys, the split launch's
reduction, MMHA's issue rate and host terms."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel import load_hardware, load_model
from costmodel.decode_launch import xqa_dispatched
from costmodel.roofline import CostModel, ShapeStats

MODELS = (
    ("llama-3.1-8b", 1),
    ("qwen3-32b", 2),
    ("llama-2-7b", 1),
    ("qwen2.5-7b", 1),
    ("mixtral-8x7b", 2),
    ("qwen3.5-122b-a10b", 8),
    ("llama-3.1-70b", 4),
    ("qwen3.5-122b-a10b", 1),
)
GROUPS = ((2, 32), (1, 32), (2, 16), (1, 16), (1, 4), (8, 8))
PROFILES = ("a100-sxm", "l40s", "b200")


@cache
def _hardware(profile: str):
    return load_hardware(profile)


def _model(profile, split, groups, blocks, hidden, comb0, host, overlap, model, tp, l2=None, issue=0.0) -> CostModel:
    hw = _hardware(profile)
    fields = dict(
        attn_decode_split=split,
        attn_decode_group_min=groups[0],
        attn_decode_group_max=groups[1],
        attn_decode_mmha_blocks=blocks,
        attn_decode_hidden_keys=hidden,
        attn_decode_combine_fixed_s=comb0,
        attn_decode_issue_beta=issue,
    )
    if not hw.attn_decode_pi_mha:  # b200's shipped (flow) fit has no MMHA terms: give its fallback some
        fields.update(attn_decode_pi_mha=hw.attn_decode_pi / 3, attn_decode_loop_mha_s=6e-7)
    if host:
        fields.update(host_step_s=2e-3, host_per_seq_s=3e-6)
    if l2:
        fields.update(attn_decode_l2_bytes=l2)
    cm = CostModel(load_model(model), hw.replace(**fields), tp).with_host_overlap(overlap)
    assert cm.units and not cm.unit_runs
    return cm


def _stepped(cm: CostModel, n: int, kv0: int, steps: int) -> list[float]:
    return [cm.time(ShapeStats(n, n, 0.0, 0.0, float(kv0 + n * j))) for j in range(steps)]


@settings(max_examples=200, deadline=None)
@given(
    profile=st.sampled_from(PROFILES),
    split=st.sampled_from(["launch", "xqa", "gen"]),
    groups=st.sampled_from(GROUPS),
    blocks=st.sampled_from([3, 4]),
    hidden=st.one_of(st.just(0.0), st.floats(1.0, 400.0)),
    comb0=st.one_of(st.just(0.0), st.floats(1e-8, 4e-6)),
    host=st.booleans(),
    overlap=st.booleans(),
    model=st.sampled_from(MODELS),
    n=st.one_of(st.integers(1, 8), st.integers(9, 300), st.sampled_from([512, 1024, 3000, 7000])),
    mean_kv=st.one_of(st.integers(0, 700), st.integers(700, 40000)),
    steps=st.integers(1, 150),
    t0=st.floats(0.0, 1e5),
    issue=st.one_of(st.just(0.0), st.floats(3e11, 2e13)),
)
def test_split_decode_runs_equal_stepping_bit_for_bit(
    profile, split, groups, blocks, hidden, comb0, host, overlap, model, n, mean_kv, steps, t0, issue
):
    cm = _model(profile, split, groups, blocks, hidden, comb0, host, overlap, *model, issue=issue)
    kv0 = n * (mean_kv + 1)
    step = _stepped(cm, n, kv0, steps)
    assert cm.decode_run(n, float(kv0), steps).tolist() == step
    ends, t = [], t0
    for d in step:
        t += d
        ends.append(t)
    assert cm.decode_ends_list(n, float(kv0), steps, t0) == ends
    stop = ends[steps // 2]
    assert cm.decode_ends_list(n, float(kv0), steps, t0, stop=stop) == ends[: steps // 2 + 1]


@pytest.mark.parametrize("profile", ["a100-sxm", "l40s"])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("hidden,comb0,blocks", [(0.0, 0.0, 4), (95.0, 1.7e-6, 3)])
def test_launch_run_across_the_dispatch_boundary(profile, n, hidden, comb0, blocks):
    """A run that starts under MMHA and goes on under XQA (the launch split's dispatch turns with the
    mean KV length): both kernels appear in it, and each pass is priced as ``time`` prices it."""
    hw = load_hardware(profile).replace(
        attn_decode_hidden_keys=hidden, attn_decode_combine_fixed_s=comb0, attn_decode_mmha_blocks=blocks
    )
    cm = CostModel(load_model("llama-3.1-8b"), hw)
    assert cm.unit_groups[2] == "launch"
    kv0, steps = n * 100, 900
    kv = (kv0 + n * np.arange(steps)) / n
    picked = xqa_dispatched(float(n), cm.unit_hkv, kv, cm.hw.sms)
    assert not picked[0] and picked[-1]
    assert cm.decode_run(n, float(kv0), steps).tolist() == _stepped(cm, n, kv0, steps)


@pytest.mark.parametrize(
    "model,groups,grouped",
    [("llama-3.1-8b", (1, 16), True), ("llama-2-7b", (2, 16), False), ("qwen3-32b", (1, 4), False)],
)
def test_gen_split_grouped_and_fallback(model, groups, grouped):
    """The gen split on b200: trtllm-gen's grouped rows (flow with hidden keys, which change the
    price) or the MMHA fallback, each run the bits of ``time`` per pass."""
    cm = _model("b200", "gen", groups, 3, 140.0, 1e-6, False, False, model, 1)
    assert (groups[0] <= cm.unit_h / cm.unit_hkv <= groups[1]) == grouped
    plain = _model("b200", "gen", groups, 3, 0.0, 1e-6, False, False, model, 1)
    for n, kv0 in ((1, 300), (64, 64 * 2000), (700, 700 * 90)):
        run = cm.decode_run(n, float(kv0), 120).tolist()
        assert run == _stepped(cm, n, kv0, 120)
        assert (run != plain.decode_run(n, float(kv0), 120).tolist()) == grouped


L2_BYTES = {
    "a100-sxm": 23467876.891913023,
    "l40s": 100663223.65125926,
}  # a capacity where these runs meet such passes (not the
# shipped profile's, which moves with each refit)


@pytest.mark.parametrize(
    "profile,model,tp,n",
    [
        ("l40s", "llama-3.1-8b", 1, 1),
        ("a100-sxm", "llama-3.1-8b", 1, 2),
        ("a100-sxm", "qwen3-32b", 2, 1),
        ("a100-sxm", "mixtral-8x7b", 2, 3),
    ],
)
def test_python_power_not_numpy_square(profile, model, tp, n):
    """Where a layer's KV bytes B near the L2's C (where (B/C)² moves the resident share r by its
    last bits), some passes' (B/C)² differ by an ulp between Python's float power and numpy's
    square: a run over all of them is still the bits of ``time`` pass by pass."""
    cm = _model(profile, "launch", (2, 32), 4, 50.0, 1e-6, False, False, model, tp, L2_BYTES[profile])
    knee = cm.unit_v[4] * cm.unit_layers / cm.kv_coef  # Σ(kv + 1) where B = C
    x0, steps = n * int(0.5 * knee / n), int(1.5 * knee / n)
    b = (cm.kv_coef * (x0 + n * np.arange(steps, dtype=np.float64))) / cm.unit_layers / cm.unit_v[4]
    assert any(bb**2 != float(np.square(np.float64(bb))) for bb in b.tolist())
    assert cm.decode_run(n, float(x0), steps).tolist() == _stepped(cm, n, x0, steps)
