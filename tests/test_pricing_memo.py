"""Memoized pricing terms change no bit: a tile-model profile's GEMM times memoized by the count
each reads (``CostModel._tiled_part``) give every step the price a cost model that never saw
another shape gives it, in any order of shapes."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings, strategies as st

from costmodel import load_hardware, load_model
from costmodel.roofline import CostModel


@cache
def _hardware(profile: str):
    return load_hardware(profile)


@cache
def _models(profile: str, model: str, tp: int, counting: str | None):
    hw = _hardware(profile)
    assert hw.gemm_form == "tiles"
    return CostModel(load_model(model), hw, tp, counting), CostModel(load_model(model), hw, tp, counting)


@settings(max_examples=30, deadline=None)
@given(
    profile=st.sampled_from(["a100-sxm", "l40s", "b200", "h100-sxm"]),
    model=st.sampled_from([("llama-3.1-8b", 1), ("qwen3-32b", 2), ("mixtral-8x7b", 2)]),
    counting=st.sampled_from([None, "seed", "faithful"]),
    batches=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 9000)), min_size=1, max_size=12),
)
def test_memoized_gemm_times_change_no_bit(profile, model, counting, batches):
    warm, cold = _models(profile, *model, counting)
    shapes = []  # each with one sharing its rows (fewer sequences) and one sharing its sequences (more rows)
    for seqs, extra in batches:
        half = max(1, seqs // 2)
        shapes += [(seqs, extra), (half, seqs + extra - half), (seqs, extra + 7)]
    for seqs, extra in shapes:  # a step of seqs sequences, `extra` more prompt tokens: rows = seqs + extra
        q, kv = [1] * (seqs - 1) + [1 + extra], [100 * i for i in range(seqs)]
        cold._tiled_memo.clear()
        cold._fixed.clear()
        assert warm.step_time(q, kv) == cold.step_time(q, kv)
        cold._tiled_memo.clear()
        assert warm._fixed_time(seqs + extra, seqs) == cold._fixed_time(seqs + extra, seqs)
