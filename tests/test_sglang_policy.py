"""SGLang policy regressions found by the bit-for-bit cohort test, checked in both modes, and the
request-length limit SGLang's scheduler applies (scheduler.py: max_req_len)."""
import numpy as np
import pytest

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from experiments.sglang_chunk_study import agentic_workload
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def sglang_run(flags, prompts, outputs, ff):
    hashes = [tuple(range(p // 32)) for p in prompts]   # every prompt shares one long prefix
    wl = Workload(np.zeros(len(prompts)), prompts, outputs, block_hashes=hashes, block_tokens=32)
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, dict(flags, max_model_len=8192))
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
    return sim, sim.run()


@pytest.mark.parametrize("ff", [True, False])
def test_last_chunk_without_kv_stays_the_chunked_request(ff):
    """The long prompt's last chunk cannot get KV at first; it must not turn into a one-token decode
    with prompt tokens left (the policy's check asserts no decode in a prefill batch)."""
    flags = dict(chunked_prefill_size=64, max_prefill_tokens=256, page_size=1, max_total_tokens=2534, max_running_requests=2)
    sim, res = sglang_run(flags, [1, 28, 1, 2429], [1, 43, 1, 40], ff)
    assert sim.accounted() and res.summary["completed"] == 4


@pytest.mark.parametrize("ff", [True, False])
def test_a_lookup_not_added_pins_nothing(ff):
    """Found as: a retracted request headed the queue, the one behind it matched the cached long
    prefix and was not added, and its match stayed pinned, so the head could not evict and both
    waited forever. Reading rem_total after each lookup now avoids the retraction; whatever the
    path, every request must finish."""
    flags = dict(chunked_prefill_size=-1, max_prefill_tokens=256, page_size=1, max_total_tokens=2523, max_running_requests=3)
    sim, res = sglang_run(flags, [96, 1, 1, 2429], [1, 124, 63, 34], ff)
    assert sim.accounted() and res.summary["completed"] == 4


@pytest.mark.parametrize("total", [3000, 5000])
def test_requests_sglang_would_clip_are_rejected(total):
    """SGLang serves prompt + max_new_tokens ≤ max_total_num_tokens − 2 whole and clips longer outputs."""
    sizes = [(total - 2 - 100, 100), (total - 1 - 100, 100), (total - 100, 100)]
    flags = dict(chunked_prefill_size=512, page_size=1, max_total_tokens=total)
    wl = Workload(np.arange(3) * 10.0, [p for p, _ in sizes], [o for _, o in sizes])
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, dict(flags, max_model_len=8192))
    assert pool.total * pool.block_size == total
    res = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=max_len).run()
    rej = res.requests.rejected.tolist()
    assert not isinstance(rej[0], str) and res.requests.finish_s.notna().tolist() == [True, False, False]
    assert all("max_total_num_tokens-2" in r for r in rej[1:])


def test_mixed_step_that_dissolves_the_cohort_matches_stepping():
    """Closed-loop multi-turn prompts with mixed chunking: a mixed step whose decodes' pages do not
    all fit dissolves the cohort; the decodes then walked must not include the request that the
    same step's prefill just admitted (it ran twice in one step before)."""
    wl = agentic_workload(60, turns=5, concurrency=6, seed=1)
    flags = dict(chunked_prefill_size=2048, enable_mixed_chunk=True, max_total_tokens=300000, max_model_len=131072)
    out = []
    for ff in (True, False):
        sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, flags)
        out.append(Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len).run())
    a, b = out
    assert a.summary["completed"] == b.summary["completed"] == 60
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float), equal_nan=True), col
