"""Replica.least_outstanding, the several-replica router's fast path (an empty replica found by
one float, ``_free_from``; else the first with one request), picks as simcore.router's
least_outstanding, which reads every replica's ``outstanding``, at every arrival: light and heavy
loads, deferred and folded runs, each engine, open and closed loop."""

import numpy as np
import pytest

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from simcore import router as routers
from simcore.replica import Replica
from simcore.simulation import Simulation, fixed_workload

pytestmark = pytest.mark.usefixtures("sglang_non_overlap")  # the fast paths: SGLang's non-overlap loop

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize("rate,replicas,concurrency", [(2.0, 3, None), (9.0, 4, None), (30.0, 5, None), (0, 3, 7)])
def test_fast_router_picks_as_the_router(monkeypatch, policy, rate, replicas, concurrency):
    rng = np.random.default_rng(int(rate) * 7 + replicas)
    n = 500
    prompts = np.where(rng.random(n) < 0.1, 1, rng.integers(2, 1500, n))
    outputs = np.where(rng.random(n) < 0.1, 1, rng.integers(2, 300, n))
    arrivals = np.zeros(n) if concurrency else np.cumsum(rng.exponential(1 / rate, n))
    wl = fixed_workload(arrivals, prompts, outputs, concurrency=concurrency)
    fast, picks = Replica.least_outstanding, {"picks": 0, "empty": 0, "busy": 0}

    def both(req, reps):
        k = fast(req, reps)
        assert k == routers.least_outstanding(req, reps), (req.rid, [r.outstanding for r in reps])
        picks["picks"] += 1
        picks["empty" if reps[k].outstanding == 0 else "busy"] += 1
        return k

    monkeypatch.setattr(Replica, "least_outstanding", staticmethod(both))
    flags = {"chunked_prefill_size": 1024} if policy == "sglang" else {"max_num_batched_tokens": 1024}
    engines, route, max_len = build_cluster(policy, MODEL, HW, 1, flags, replicas, "least_outstanding")
    res = Simulation(engines, wl, router=route, max_model_len=max_len).run()
    assert res.summary["completed"] == n
    assert picks["picks"] == n and picks["empty"] > 0
    if rate >= 9 or concurrency:
        assert picks["busy"] > 0  # the second loop ran too
