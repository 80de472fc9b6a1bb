"""The conformance drivers' unit-second cost model (tests/conformance/unit_cost.py) runs in the
default suite too: every pricing call the fast-forward paths make must exist on it and keep its
clock (a step's start is its index), or the engine suites, which run only where the engines
install, are the first to notice."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.simulation import Simulation
from tests.conformance.unit_cost import UnitCost
from workloads.workload import Workload

FLAGS = {
    "vllm": dict(max_num_batched_tokens=64, max_num_seqs=8, block_size=16, num_gpu_blocks_override=400),
    "sglang": dict(
        chunked_prefill_size=64, max_prefill_tokens=64, page_size=1, max_total_tokens=6400, max_running_requests=8
    ),
    "nochunk": dict(max_num_seqs=8, block_size=16, num_gpu_blocks_override=400),
}


class CountedUnitCost(UnitCost):
    def __init__(self):
        self.calls = {}

    def __getattribute__(self, name):
        attr = object.__getattribute__(self, name)
        if callable(attr) and not name.startswith("_"):
            calls = object.__getattribute__(self, "calls")
            calls[name] = calls.get(name, 0) + 1
        return attr


def run(policy, wl, fast_forward):
    sched, pool, _, max_len = build_engine(
        policy, load_model("llama-3.1-8b"), load_hardware("h100"), flags=dict(FLAGS[policy], max_model_len=4096)
    )
    cost = CountedUnitCost()
    sim = Simulation([(sched, pool, cost)], wl, fast_forward=fast_forward, check=True, max_model_len=max_len)
    return sim.run().requests, cost.calls


@pytest.mark.parametrize("policy", sorted(FLAGS))
@settings(max_examples=15, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 300), st.integers(1, 30)), min_size=1, max_size=12))
def test_unit_cost_runs_fast_forward_on_the_unit_clock(policy, reqs):
    reqs.sort()
    wl = Workload([float(a) for a, _, _ in reqs], [p for _, p, _ in reqs], [o for _, _, o in reqs])
    fast, calls = run(policy, wl, True)
    step, _ = run(policy, wl, False)
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        a, b = fast[col].to_numpy(float), step[col].to_numpy(float)
        assert np.array_equal(a, b), col
        assert np.array_equal(a, np.round(a)), col
    assert (fast["num_output_tokens"] == [o for _, _, o in reqs]).all()
    # a run that is one step of several one-token requests has nothing to fast-forward: it is
    # priced by step_time alone (Hypothesis draws it, e.g. [(0, 1, 1), (0, 1, 1)])
    one_batch = len(reqs) > 1 and step["finish_s"].max() - reqs[0][0] <= 1
    if not one_batch:
        assert set(calls) - {"with_host_overlap", "step_time"}, calls
