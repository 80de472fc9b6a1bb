"""Host time per step (costmodel/host.py): serial adds, overlap takes the max, zero changes
nothing to the bit, and every fast path prices it exactly as stepping does."""

import math

import numpy as np
import pytest

from costmodel import CostModel, cost, load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100")
HOST = H100.replace(host_step_s=2.0e-3, host_per_seq_s=40e-6, host_per_prefill_seq_s=0.3e-3, host_prefill_step_s=1.1e-3)


@pytest.mark.parametrize("q,kv", [([2016, 1, 1], [0, 2048, 2048]), ([1] * 7, [900] * 7), ([300, 200], [0, 50])])
@pytest.mark.parametrize("overlap", [False, True])
def test_host_combines_with_gpu(q, kv, overlap):
    gpu = CostModel(MODEL, H100).step_time(q, kv)
    cm = CostModel(MODEL, HOST, overlap_host=overlap)
    host = 2.0e-3 + 40e-6 * len(q) + 0.3e-3 * sum(x > 1 for x in q) + 1.1e-3 * any(x > 1 for x in q)
    want = max(gpu, host) if overlap else gpu + host
    assert cm.step_time(q, kv) == pytest.approx(want, rel=1e-12)
    assert cm.time(cm.shape(q, kv)) == cm.step_time(q, kv)
    b = cost(MODEL, HOST, q, kv, overlap_host=overlap)
    assert b.time_s == pytest.approx(want, rel=1e-12)
    assert b.op("host").time_s == pytest.approx(max(host - gpu, 0.0) if overlap else host, abs=1e-15)


def test_zero_host_is_bit_identical_and_has_no_operator():
    cm0, cm1 = CostModel(MODEL, H100), CostModel(MODEL, H100, overlap_host=True)
    assert not cm0.has_host and cm1.with_host_overlap(False) is cm1
    for q, kv in (([512, 1], [0, 100]), ([1] * 30, list(range(30)))):
        assert cm0.step_time(q, kv) == cm1.step_time(q, kv)
    assert "host" not in [o.name for o in cost(MODEL, H100, [5], [0]).operators]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("hw", [HOST, HOST.replace(host_step_s=30e-3)])  # host above the GPU time too
def test_decode_fast_paths_price_host_like_time(overlap, hw):
    cm = CostModel(MODEL, hw, overlap_host=overlap)
    n, kv0, steps = 5, 5 * 1001, 300
    each = [cm.step_time((), (), n, kv0 + n * j) for j in range(steps)]
    assert np.array_equal(cm.decode_run(n, float(kv0), steps), np.array(each))
    ends, t = [], 0.25
    for d in each:
        t += d
        ends.append(t)
    assert cm.decode_ends_list(n, float(kv0), steps, 0.25) == ends


def _run(hw, policy, ff, overlap, flags):
    overlap_flag = {"vllm": {"async_scheduling": overlap}, "sglang": {"disable_overlap_schedule": not overlap}}
    sched, pool, cm, max_len = build_engine(policy, MODEL, hw, 1, {**flags, **overlap_flag.get(policy, {})})
    if policy == "nochunk":
        sched.overlaps_host = overlap
    rng = np.random.default_rng(3)
    n = 60
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(20, 3000, n), rng.integers(1, 300, n))
    return Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=max_len).run()


@pytest.mark.parametrize(
    "policy,flags",
    [
        ("vllm", dict(max_num_batched_tokens=1024, num_gpu_blocks_override=3000)),
        ("sglang", dict(chunked_prefill_size=1024)),
        ("nochunk", {}),
    ],
)
@pytest.mark.parametrize("overlap", [False, True])
def test_fast_forward_exact_with_host_terms(policy, flags, overlap):
    a, b = _run(HOST, policy, True, overlap, flags), _run(HOST, policy, False, overlap, flags)
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float)), col
    base = _run(H100, policy, True, overlap, flags)
    mean, ref = a.requests.finish_s.mean(), base.requests.finish_s.mean()
    assert (mean >= ref if overlap else mean > ref) and not math.isnan(a.summary["mean_tpot_ms"])


def test_overlap_hides_host_behind_gpu():
    serial = _run(HOST, "vllm", True, False, {})
    overlapped = _run(HOST, "vllm", True, True, {})
    plain = _run(H100, "vllm", True, False, {})
    assert plain.summary["mean_tpot_ms"] <= overlapped.summary["mean_tpot_ms"] < serial.summary["mean_tpot_ms"]
