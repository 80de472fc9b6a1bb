"""Decode runs under the unit decode model's xqa and launch splits (costmodel/decode_split_runs.py),
priced as arrays and as hoisted loops, against ``time`` on each pass's shape: every duration and
every end time the same bits, over models, tp, batch sizes, KV lengths across the XQA/MMHA
dispatch boundary, group ranges and host terms."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import load_hardware, load_model
from costmodel.decode_launch import xqa_dispatched
from costmodel.roofline import CostModel, ShapeStats

MODELS = (("llama-3.1-8b", 1), ("qwen3-32b", 2), ("llama-2-7b", 1), ("qwen2.5-7b", 1), ("mixtral-8x7b", 2),
          ("qwen3.5-122b-a10b", 8), ("llama-3.1-70b", 4))
GROUPS = ((2, 32), (1, 32), (2, 16), (1, 4), (8, 8))


@lru_cache(maxsize=None)
def _hardware(profile: str):
    return load_hardware(profile)


@lru_cache(maxsize=None)
def _model(profile: str, split: str, groups, host: bool, overlap: bool, model: str, tp: int) -> CostModel:
    fields = dict(attn_decode_split=split, attn_decode_group_min=groups[0], attn_decode_group_max=groups[1])
    if host:
        fields.update(host_step_s=2e-3, host_per_seq_s=3e-6)
    cm = CostModel(load_model(model), _hardware(profile).replace(**fields), tp).with_host_overlap(overlap)
    assert cm.units and not cm.unit_runs
    return cm


def _stepped(cm: CostModel, n: int, kv0: int, steps: int) -> list[float]:
    return [cm.time(ShapeStats(n, n, 0.0, 0.0, float(kv0 + n * j))) for j in range(steps)]


@settings(max_examples=120, deadline=None)
@given(profile=st.sampled_from(["a100-sxm", "l40s"]), split=st.sampled_from(["launch", "xqa"]),
       groups=st.sampled_from(GROUPS), host=st.booleans(), overlap=st.booleans(), model=st.sampled_from(MODELS),
       n=st.one_of(st.integers(1, 8), st.integers(9, 300), st.sampled_from([512, 1024, 3000, 7000])),
       mean_kv=st.one_of(st.integers(0, 700), st.integers(700, 40000)), steps=st.integers(1, 150),
       t0=st.floats(0.0, 1e5))
def test_split_decode_runs_equal_stepping_bit_for_bit(profile, split, groups, host, overlap, model, n, mean_kv, steps, t0):
    cm = _model(profile, split, groups, host, overlap, *model)
    kv0 = n * (mean_kv + 1)
    step = _stepped(cm, n, kv0, steps)
    assert cm.decode_run(n, float(kv0), steps).tolist() == step
    ends, t = [], t0
    for d in step:
        t += d
        ends.append(t)
    assert cm.decode_ends_list(n, float(kv0), steps, t0) == ends
    stop = ends[steps // 2]
    assert cm.decode_ends_list(n, float(kv0), steps, t0, stop=stop) == ends[:steps // 2 + 1]


@pytest.mark.parametrize("profile", ["a100-sxm", "l40s"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_launch_run_across_the_dispatch_boundary(profile, n):
    """A run that starts under MMHA and goes on under XQA (the launch split's dispatch turns with the
    mean KV length): both kernels appear in it, and each pass is priced as ``time`` prices it."""
    cm = CostModel(load_model("llama-3.1-8b"), load_hardware(profile))
    assert cm.unit_groups[2] == "launch"
    kv0, steps = n * 100, 900
    kv = (kv0 + n * np.arange(steps)) / n
    picked = xqa_dispatched(float(n), cm.unit_hkv, kv, cm.hw.sms)
    assert not picked[0] and picked[-1]
    assert cm.decode_run(n, float(kv0), steps).tolist() == _stepped(cm, n, kv0, steps)



@pytest.mark.parametrize("profile,model,tp,n,x", [("l40s", "llama-3.1-8b", 1, 1, 26602), ("a100-sxm", "llama-3.1-8b", 1, 2, 6650),
                                                  ("a100-sxm", "qwen3-32b", 2, 1, 31747)])
def test_python_power_not_numpy_square(profile, model, tp, n, x):
    """Passes whose duration changes by an ulp if (B/C)² is numpy's square rather than Python's float
    power (found by scanning runs for it): the run's pass there is still the bits of ``time``."""
    cm = CostModel(load_model(model), load_hardware(profile), tp)
    b = (cm.kv_coef * float(x)) / cm.unit_layers / cm.unit_v[4]
    assert b ** 2 != float(np.square(np.float64(b)))
    assert cm.decode_run(n, float(x - 40 * n), 80).tolist() == _stepped(cm, n, x - 40 * n, 80)
