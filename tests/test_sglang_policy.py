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
    hashes = [tuple(range(p // 32)) for p in prompts]  # every prompt shares one long prefix
    wl = Workload(np.zeros(len(prompts)), prompts, outputs, block_hashes=hashes, block_tokens=32)
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, dict(flags, max_model_len=8192))
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
    return sim, sim.run()


@pytest.mark.parametrize("ff", [True, False])
def test_last_chunk_without_kv_stays_the_chunked_request(ff):
    """The long prompt's last chunk cannot get KV at first; it must not turn into a one-token decode
    with prompt tokens left (the policy's check asserts no decode in a prefill batch)."""
    flags = dict(
        chunked_prefill_size=64, max_prefill_tokens=256, page_size=1, max_total_tokens=2534, max_running_requests=2
    )
    sim, res = sglang_run(flags, [1, 28, 1, 2429], [1, 43, 1, 40], ff)
    assert sim.accounted() and res.summary["completed"] == 4


@pytest.mark.parametrize("ff", [True, False])
def test_a_lookup_not_added_pins_nothing(ff):
    """Found as: a retracted request headed the queue, the one behind it matched the cached long
    prefix and was not added, and its match stayed pinned, so the head could not evict and both
    waited forever. Reading rem_total after each lookup now avoids the retraction; whatever the
    path, every request must finish."""
    flags = dict(
        chunked_prefill_size=-1, max_prefill_tokens=256, page_size=1, max_total_tokens=2523, max_running_requests=3
    )
    sim, res = sglang_run(flags, [96, 1, 1, 2429], [1, 124, 63, 34], ff)
    assert sim.accounted() and res.summary["completed"] == 4


@pytest.mark.parametrize("total", [3000, 5000])
def test_requests_sglang_would_clip_are_rejected(total):
    """SGLang serves prompt + max_new_tokens ≤ max_total_num_tokens − 2 whole and clips longer outputs;
    it refuses prompts of max_total_num_tokens − 6 tokens or more."""
    sizes = [(total - 2 - 100, 100), (total - 1 - 100, 100), (total - 100, 100), (total - 7, 1), (total - 6, 1)]
    flags = dict(chunked_prefill_size=512, page_size=1, max_total_tokens=total)
    wl = Workload(np.arange(len(sizes)) * 10.0, [p for p, _ in sizes], [o for _, o in sizes])
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, dict(flags, max_model_len=8192))
    assert pool.total * pool.block_size == total
    res = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=max_len).run()
    rej = res.requests.rejected.tolist()
    assert res.requests.finish_s.notna().tolist() == [True, False, False, True, False]
    assert all("max_total_num_tokens-2" in r for r in rej[1:3]) and "max_total_num_tokens-6" in rej[4]


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


@pytest.mark.parametrize("ff", [True, False])
def test_a_one_token_last_chunk_is_an_extend(ff):
    """A retracted request re-prefilled in page-aligned chunks can end on a one-token chunk; it is an
    extend in a prefill batch, not a decode (the policy's check once said otherwise)."""
    flags = dict(
        chunked_prefill_size=64,
        max_prefill_tokens=16384,
        enable_mixed_chunk=False,
        page_size=16,
        max_total_tokens=7895,
        max_running_requests=28,
        disable_radix_cache=True,
        max_model_len=8192,
    )
    arr = [
        0.095103,
        0.095103,
        0.295661,
        0.295661,
        0.295661,
        0.502871,
        0.650658,
        0.735514,
        0.735514,
        0.771097,
        0.996935,
        1.206697,
        1.206697,
        1.206697,
        1.447477,
        1.707934,
        1.848943,
        2.046767,
        2.046767,
        2.239605,
        2.239605,
        2.239605,
        2.239605,
        2.503697,
        2.677188,
        2.900561,
        2.991475,
        2.991475,
        2.996522,
    ]
    prompts = [
        2278,
        2023,
        904,
        2103,
        475,
        144,
        2739,
        2782,
        1709,
        1787,
        2790,
        881,
        1995,
        1910,
        1785,
        2171,
        1925,
        699,
        61,
        378,
        2783,
        182,
        2985,
        2095,
        2005,
        1660,
        169,
        2266,
        479,
    ]
    outputs = [
        253,
        161,
        194,
        206,
        154,
        86,
        99,
        164,
        246,
        198,
        183,
        290,
        297,
        64,
        149,
        4,
        207,
        134,
        99,
        47,
        26,
        196,
        253,
        207,
        165,
        128,
        59,
        91,
        125,
    ]
    wl = Workload(
        np.array(arr), prompts, outputs, closed_loop_concurrency=5, ignore_eos=np.zeros(len(prompts), bool)
    )  # ignore_eos traffic is admitted without over-commit
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
    res = sim.run()
    assert sim.accounted() and res.summary["completed"] == len(prompts) and res.summary["num_preemptions"] > 0
