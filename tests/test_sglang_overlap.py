"""SGLang's overlap scheduler (policies/sglang_overlap.py): under KV pressure, with the radix cache
on and off, the fast-forward replica (which steps: every fast path declines) equals the
reference loop to the bit, and the lag changes the schedule against event_loop_normal."""

import numpy as np
import pytest

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from policies.sglang import SGLangConfig, SGLangScheduler
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def _workload(seed: int = 6, n: int = 60) -> Workload:
    rng = np.random.default_rng(seed)
    prompts = rng.integers(50, 600, n)
    groups = rng.integers(0, 6, n)
    hashes = [
        tuple(1000 * int(g) + j for j in range(min(p // 32, 8)))
        + tuple(10**6 + 1000 * i + j for j in range(p // 32 - 8))
        for i, (g, p) in enumerate(zip(groups, prompts))
    ]
    return Workload(
        np.cumsum(rng.exponential(0.01, n)),
        prompts,
        rng.integers(100, 600, n),
        block_hashes=hashes,
        block_tokens=32,
        ignore_eos=rng.random(n) < 0.2,
    )


def _run(flags, wl, ff):
    sched, pool, cm, max_len = build_engine("sglang", MODEL, HW, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
    return sim, sim.run()


def _flags(mixed: bool, radix: bool, overlap: bool) -> dict:
    return dict(
        chunked_prefill_size=256,
        max_prefill_tokens=1024,
        enable_mixed_chunk=mixed,
        page_size=16,
        max_total_tokens=4000,
        max_running_requests=48,
        disable_radix_cache=not radix,
        disable_overlap_schedule=not overlap,
        max_model_len=8192,
    )


@pytest.mark.parametrize("radix", [False, True])
@pytest.mark.parametrize("mixed", [False, True])
def test_overlap_fast_forward_equals_stepping_under_pressure(mixed, radix):
    wl = _workload()
    sim, a = _run(_flags(mixed, radix, True), wl, True)
    _, b = _run(_flags(mixed, radix, True), wl, False)
    assert sim.accounted()
    for col in ("first_scheduled_s", "first_token_s", "finish_s", "max_itl_s"):
        assert np.array_equal(a.requests[col].to_numpy(float), b.requests[col].to_numpy(float), equal_nan=True), col
    for col in ("num_output_tokens", "num_preemptions", "num_cached_tokens"):
        assert a.requests[col].equals(b.requests[col]), col
    assert a.requests.num_preemptions.sum() > 0
    _, normal = _run(_flags(mixed, radix, False), wl, False)
    assert not np.array_equal(a.requests.finish_s.to_numpy(float), normal.requests.finish_s.to_numpy(float))


def test_overlap_declines_every_fast_path():
    on = SGLangScheduler(SGLangConfig(disable_overlap_schedule=False))
    off = SGLangScheduler(SGLangConfig(disable_overlap_schedule=True))
    assert on.overlapped and on.holds_finished and not on.lazy_decodes
    assert not off.overlapped and not off.holds_finished and off.lazy_decodes
