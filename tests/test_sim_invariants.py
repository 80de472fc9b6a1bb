"""Hypothesis drives random engine configurations and workloads through the conservation checks
that the replica runs every step (check=True): free + used blocks == total, blocks held match
the running requests, scheduled tokens within the budgets, num_computed <= num_tokens, and at
the end every arrived request finished or was rejected with a reason."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
@given(wl=workloads(), budget=st.integers(8, 4096), seqs=st.integers(1, 64), thr=st.sampled_from([0, 0, 64, 500]),
       blocks=st.integers(200, 3000), block=st.sampled_from([1, 16, 32]), chunked=st.booleans(), ff=st.booleans())
def test_vllm_invariants(wl, budget, seqs, thr, blocks, block, chunked, ff):
    seqs = min(seqs, budget)
    flags = dict(max_num_batched_tokens=budget if chunked else 8192, max_num_seqs=seqs, long_prefill_token_threshold=thr,
                 num_gpu_blocks_override=max(blocks // block, 1), block_size=block, enable_chunked_prefill=chunked,
                 max_model_len=8192)
    run_and_check("vllm", flags, wl, ff)


@SETTINGS
@given(wl=workloads(), chunk=st.sampled_from([-1, 64, 256, 2048]), prefill=st.integers(64, 16384),
       mixed=st.booleans(), page=st.sampled_from([1, 16, 64]), total=st.integers(3500, 40000),
       running=st.integers(1, 64), ff=st.booleans())
def test_sglang_invariants(wl, chunk, prefill, mixed, page, total, running, ff):
    flags = dict(chunked_prefill_size=max(chunk, page) if chunk > 0 else chunk, max_prefill_tokens=prefill,
                 enable_mixed_chunk=mixed, page_size=page, max_total_tokens=total, max_running_requests=running)
    run_and_check("sglang", flags, wl, ff)


@SETTINGS
@given(wl=workloads(), seqs=st.integers(1, 64), blocks=st.integers(200, 3000), ff=st.booleans())
def test_nochunk_invariants(wl, seqs, blocks, ff):
    run_and_check("nochunk", dict(max_num_seqs=seqs, num_gpu_blocks_override=blocks // 16), wl, ff)
