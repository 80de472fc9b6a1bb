"""Hypothesis drives random engine configurations and workloads through the conservation checks
that the replica runs every step (check=True): free + used blocks == total, blocks held match
the running requests, scheduled tokens within the budgets, num_computed <= num_tokens, and at
the end every arrived request finished or was rejected with a reason."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation, fixed_workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    return fixed_workload(np.cumsum(gaps), prompts, outputs)


def run_and_check(policy, flags, wl, ff):
    sched, pool, cm, max_len = build_engine(policy, MODEL, HW, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
    res = sim.run()
    assert sim.accounted()
    df = res.requests
    assert (df.finish_s.notna() | df.rejected.notna()).all(), "a request was lost"
    done = df[df.finish_s.notna()]
    assert (done.num_output_tokens == done.output_len).all()
    assert (done.first_token_s >= done.arrival_s).all() and (done.finish_s >= done.first_token_s).all()
    assert pool.used == 0


@SETTINGS
@given(
    wl=workloads(),
    budget=st.integers(8, 4096),
    seqs=st.integers(1, 64),
    thr=st.sampled_from([0, 0, 64, 500]),
    blocks=st.integers(200, 3000),
    block=st.sampled_from([1, 16, 32]),
    chunked=st.booleans(),
    ff=st.booleans(),
)
def test_vllm_invariants(wl, budget, seqs, thr, blocks, block, chunked, ff):
    seqs = min(seqs, budget)
    flags = dict(
        max_num_batched_tokens=budget if chunked else 8192,
        max_num_seqs=seqs,
        long_prefill_token_threshold=thr,
        num_gpu_blocks_override=max(blocks // block, 1),
        block_size=block,
        enable_chunked_prefill=chunked,
        max_model_len=8192,
    )
    run_and_check("vllm", flags, wl, ff)


@SETTINGS
@given(
    wl=workloads(),
    chunk=st.sampled_from([-1, 64, 256, 2048]),
    prefill=st.integers(64, 16384),
    mixed=st.booleans(),
    page=st.sampled_from([1, 16, 64]),
    total=st.integers(3500, 40000),
    running=st.integers(1, 64),
    ff=st.booleans(),
)
def test_sglang_invariants(wl, chunk, prefill, mixed, page, total, running, ff):
    flags = dict(
        chunked_prefill_size=max(chunk, page) if chunk > 0 else chunk,
        max_prefill_tokens=prefill,
        enable_mixed_chunk=mixed,
        page_size=page,
        max_total_tokens=total,
        max_running_requests=running,
    )
    run_and_check("sglang", flags, wl, ff)


@SETTINGS
@given(wl=workloads(), seqs=st.integers(1, 64), blocks=st.integers(200, 3000), ff=st.booleans())
def test_nochunk_invariants(wl, seqs, blocks, ff):
    run_and_check("nochunk", dict(max_num_seqs=seqs, num_gpu_blocks_override=blocks // 16), wl, ff)


_OUR_ROOTS = ("simcore", "policies", "costmodel", "workloads", "experiments", "simpy")


def _cyclic_garbage_of_ours() -> list[str]:
    """The cyclic garbage a full collection finds now, kept to what the simulator (or SimPy, which
    it drives) allocated: instances of its classes, and its functions, frames and generators. Other
    threads (a Dask IO loop an earlier test left behind) may shed cycles of their own meanwhile."""
    import gc
    import os
    import types

    import simpy

    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(simpy.__file__)]

    def mine(o) -> bool:
        if type(o).__module__.split(".")[0] in _OUR_ROOTS:
            return True
        code = (
            getattr(o, "__code__", None)
            if isinstance(o, types.FunctionType)
            else getattr(o, "gi_code", None) or getattr(o, "f_code", None)
        )
        return code is not None and any(code.co_filename.startswith(r) for r in roots)

    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [repr(type(o)) for o in gc.garbage if mine(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


@pytest.mark.parametrize(
    "policy,flags",
    [
        ("vllm", dict(num_gpu_blocks_override=400, enable_prefix_caching=True)),
        ("vllm", dict(max_num_batched_tokens=512, long_prefill_token_threshold=200)),
        ("sglang", dict(max_total_tokens=12000)),
        ("sglang", dict(chunked_prefill_size=256, enable_mixed_chunk=True)),
        ("nochunk", dict(num_gpu_blocks_override=400, enable_prefix_caching=True)),
    ],
)
@pytest.mark.parametrize("concurrency,replicas,ff", [(None, 1, True), (6, 1, True), (None, 3, True), (None, 1, False)])
def test_a_run_leaves_no_cyclic_garbage(policy, flags, concurrency, replicas, ff):
    """Simulation.run pauses the cyclic collector while its events run: that is sound only if
    nothing a run allocates (requests, plans, prefix-cache nodes and blocks, SimPy events) forms a
    reference cycle that reference counting cannot free. Prefix sharing, a tight pool (preemption
    and eviction), closed loop, several replicas, stepping. The collector's state is restored."""
    import gc

    from workloads.workload import Workload

    rng = np.random.default_rng(3)
    n = 200
    prompts = rng.integers(300, 3000, n)
    hashes = [
        (int(g),) * min(p // 32, 12) + tuple(range(1000 * i, 1000 * i + p // 32 - 12))
        for i, (g, p) in enumerate(zip(rng.integers(0, 4, n), prompts))
    ]
    wl = Workload(
        np.cumsum(rng.exponential(1 / 8.0, n)),
        prompts,
        rng.integers(20, 300, n),
        block_hashes=hashes,
        block_tokens=32,
        closed_loop_concurrency=concurrency,
    )
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    engines = [build_engine(policy, m, hw, 1, flags) for _ in range(replicas)]
    from simcore.router import make_router

    sim = Simulation(
        [e[:3] for e in engines],
        wl,
        fast_forward=ff,
        max_model_len=engines[0][3],
        router=make_router("least_outstanding") if replicas > 1 else None,
    )
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        res = sim.run()
        assert not gc.isenabled()  # left as the caller had it
        ours = _cyclic_garbage_of_ours()
        assert not ours, f"{len(ours)} objects of the simulator in reference cycles: {ours[:10]}"
    finally:
        if was:
            gc.enable()
    assert res.summary["completed"] == n
    sim2 = Simulation([build_engine(policy, m, hw, 1, flags)[:3]], wl, max_model_len=engines[0][3])
    sim2.run()
    assert gc.isenabled() == was
