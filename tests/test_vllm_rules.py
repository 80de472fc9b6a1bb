"""vLLM 0.33's scheduling rules that chunksim's vLLM policy follows, on hand-built queues (the
step-for-step check against vLLM itself is tests/conformance, which needs vLLM installed)."""

from collections import deque

import pytest

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from policies.base import SchedulerState
from policies.vllm import VLLMConfig, VLLMScheduler
from simcore.kv import BlockPool
from simcore.request import Request
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def state(blocks, block_size, running=(), waiting=()):
    s = SchedulerState(BlockPool(blocks, block_size))
    for r in running:
        s.admit(r)
        assert s.pool.grow(r, r.num_computed_tokens + 1)
    s.waiting = deque(waiting)
    return s


@pytest.mark.parametrize("free_blocks", [3, 5, 8])
@pytest.mark.parametrize("full", [True, False])
def test_full_isl_admission(free_blocks, full):
    """A waiting prompt of 5 blocks whose first chunk needs 1 block: admitted with full-ISL only
    when 5 blocks are free, without it whenever 1 is."""
    bs = 16
    runner = Request(0, 0.0, 10 * bs - 2, 100, num_output_tokens=1)
    runner.num_computed_tokens = 10 * bs - 2  # decoding: its next token fits its 10th block
    s = state(10 + free_blocks, bs, running=[runner], waiting=[Request(1, 0.0, 5 * bs, 4)])
    assert s.pool.free == free_blocks
    pol = VLLMScheduler(
        VLLMConfig(max_num_batched_tokens=17, max_num_seqs=4, block_size=bs, scheduler_reserve_full_isl=full)
    )
    plan = pol.schedule(s)
    admitted = any(r.rid == 1 for r, _ in plan.items)
    assert admitted == (free_blocks >= 5 or not full)
    if admitted:
        assert dict((r.rid, n) for r, n in plan.items)[1] == 16


@pytest.mark.parametrize("n", [2, 17, 1000])
def test_null_block(n):
    """vLLM's BlockPool keeps its first block as the null block: N blocks give N - 1."""
    _, pool, _, _ = build_engine("vllm", MODEL, HW, 1, {"num_gpu_blocks_override": n})
    assert pool.total == n - 1


@pytest.mark.parametrize("others", [0, 1, 3])
def test_threshold_skips_a_lone_request(others):
    thr, budget = 512, 2048
    reqs = [Request(i, 0.0, 5000, 3) for i in range(1 + others)]
    s = state(10_000, 16, waiting=reqs)
    plan = VLLMScheduler(VLLMConfig(max_num_batched_tokens=budget, long_prefill_token_threshold=thr)).schedule(s)
    assert plan.items[0][1] == (budget if others == 0 else thr)


def _sim(async_: bool, outs):
    sched, pool, cm, max_len = build_engine("vllm", MODEL, HW, 1, {"max_num_seqs": 2, "async_scheduling": async_})
    wl = Workload([0.0] * len(outs), [100] * len(outs), outs)
    sim = Simulation(
        [(sched, pool, cm)], wl, fast_forward=False, check=True, max_model_len=max_len, record_iterations=True
    )
    res = sim.run()
    return sorted(sim.requests, key=lambda r: r.rid), sorted({e[2] for e in res.iterations})


@pytest.mark.parametrize("out", [1, 2, 7])
def test_async_scheduling_holds_a_finished_slot_one_step(out):
    """max_num_seqs 2: A decodes on while B finishes and C waits. With async scheduling B keeps
    its slot through the next schedule(), so C starts one step after B's finish, not at it; with
    nothing else running that schedule() is empty and C starts at once."""
    (a, b, c), _ = _sim(False, [50, out, 5])
    assert c.first_scheduled_s == b.finish_s
    (a, b, c), ends = _sim(True, [50, out, 5])
    assert c.first_scheduled_s == ends[ends.index(b.finish_s) + 1]
    _, b, c = _sim(True, [out, out, 5])[0]
    assert c.first_scheduled_s == b.finish_s


def test_overlaps_host_follows_async_scheduling():
    assert VLLMScheduler(VLLMConfig()).overlaps_host is True
    assert VLLMScheduler(VLLMConfig(async_scheduling=False)).overlaps_host is False
