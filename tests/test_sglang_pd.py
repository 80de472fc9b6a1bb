"""SGLang's decode server under PD disaggregation (policies/sglang_pd.py) on hand-built numbers:
the prealloc budget's arithmetic, a run through the reference loop, and the refusals. The
step-for-step check against SGLang's own queues is tests/conformance/test_sglang_pd_conformance.py."""

import numpy as np
import pytest

from costmodel import load_hardware, load_model
from costmodel.errors import InputError
from experiments.engines import build_engine
from policies.base import SchedulerState
from simcore.kv import BlockPool
from simcore.request import Request
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
FAKE = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "fake", "disable_overlap_schedule": True}


def _policy(**flags):
    return build_engine("sglang", MODEL, HW, flags={**FAKE, **flags})


def test_prealloc_budget_reserves_per_active_request():
    """Pool 1000, reserve 100: the first request needs max(300 + 100, 300 + 50) = 400 of 1000; the
    second then has 1000 - 300 free less 100 for the first = 600, and needs 500 + 100: it fits;
    the third (1 token) finds 200 free less 2 x 100 reserved = 0 < 101 and waits, as does the one behind it."""
    pol, *_ = _policy(max_total_tokens=1000, num_reserved_decode_tokens=100)
    s = SchedulerState(BlockPool(1000, 1))
    s.connector = pol.new_connector()
    reqs = [Request(0, 0.0, 300, 50), Request(1, 0.0, 500, 20), Request(2, 0.0, 1, 1), Request(3, 0.0, 1, 1)]
    s.waiting.extend(reqs)
    plan = pol.schedule(s)
    assert [r.rid for r, _ in plan.items] == [0, 1]  # fake backend: landed and decoding at once
    assert [r.rid for r in s.waiting] == [2, 3]
    assert s.pool.used == 300 + 500 + 2  # the prompts' KV and each first decode's slot


def test_decode_server_alone_runs_every_request_to_its_end():
    """With the fake backend every request lands with the prefill's token (TTFT: the landing),
    decodes the rest, and gives its KV back; a one-token request finishes on landing."""
    rng = np.random.default_rng(3)
    n = 60
    outs = rng.integers(1, 120, n)
    outs[::7] = 1
    wl = Workload(np.sort(rng.uniform(0, 2, n)), rng.integers(50, 2000, n), outs)
    pol, pool, cm, max_len = _policy(max_total_tokens=12000, max_running_requests=8, num_reserved_decode_tokens=64)
    res = Simulation([(pol, pool, cm)], wl, check=True, max_model_len=max_len).run()
    df = res.requests
    assert len(df) == n and df.finish_s.notna().all()
    assert pool.used == 0
    one = df[df.output_len == 1]
    assert (one.finish_s == one.first_token_s).all()
    assert (df.first_token_s >= df.arrival_s).all()


def test_overlap_decodes_a_finishing_request_once_more():
    """event_loop_overlap_disagg_decode (no enable_skip_finishing_decode): a request finishing in
    step n is decoded again in n + 1 (nothing applied), so one request of 3 outputs (the first
    from the prefill) takes 3 steps instead of 2, and finishes at the end of its second."""
    wl = Workload(np.zeros(1), np.array([100]), np.array([3]))
    runs = {}
    for overlap in (False, True):
        pol, pool, cm, _ = _policy(disable_overlap_schedule=not overlap, max_total_tokens=4000)
        res = Simulation([(pol, pool, cm)], wl, check=True).run()
        req = res.requests.iloc[0]
        runs[overlap] = (res.summary["num_iterations"], req.finish_s - req.first_token_s)
        assert pool.used == 0
    assert runs[True][0] == runs[False][0] + 1
    assert runs[True][1] == pytest.approx(runs[False][1], rel=0.05)


def test_refusals_name_the_flag():
    with pytest.raises(InputError, match="enable_hierarchical_cache"):
        build_engine("sglang", MODEL, HW, flags={**FAKE, "enable_hierarchical_cache": True})
    with pytest.raises(InputError, match="disaggregation_mode"):
        build_engine("sglang", MODEL, HW, flags={"disaggregation_transfer_backend": "nixl"})
    pol, pool, cm, _ = _policy(disaggregation_transfer_backend="mooncake")
    wl = Workload(np.zeros(1), np.array([10]), np.array([2]))
    with pytest.raises(InputError, match="prefill servers"):
        Simulation([(pol, pool, cm)], wl)
