"""The beside fast path (runs._beside_ends, applies._apply_beside) against the general
paths, plan by plan, in clusters (the path needs a replica that does not know its next arrival).

A slip in the fast path shows in the fast-forward/stepping comparisons only where a cluster
test happens to meet it. Here every plan of one prompt beside a cohort of one is priced twice:
by ``_beside_ends`` and by the general ``_step_ends`` on a deep copy of the replica's state taken
just before (the copy's fast path turned off); the end times must be the same bits and both
must leave the same state and leavers. Every plan ``_apply_beside`` applies is also applied by
the general ``_apply`` to a deep copy, and the two must leave the same state, field for field,
and hand the same finished requests on in the same order (tests/test_apply_lone.py's picture)."""

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st, target
from test_apply_lone import HW, MODEL, REQUEST, _flags, _workload, canon, finishes_of, picture

from experiments.engines import build_cluster
from policies.base import Plan
from simcore.fastforward import applies, runs
from simcore.fastforward.tops import DeferredTops
from simcore.replica import Replica
from simcore.simulation import Simulation

pytestmark = pytest.mark.usefixtures("sglang_non_overlap")  # the fast paths: SGLang's non-overlap loop


def _twin(replica):
    """A replica sharing `replica`'s cost model and flags over a deep copy of its state, policy
    and histogram; memo maps the originals' ids to the copies."""
    memo = {}
    replica.tops.settle()  # both start from settled max ITLs; the twin gets tops of its own
    state, policy, itl, leaving = copy.deepcopy((replica.state, replica.policy, replica.itl, replica._leaving), memo)
    twin = object.__new__(Replica)
    twin.__dict__.update(replica.__dict__)
    twin.state, twin.policy, twin.itl, twin._leaving = state, policy, itl, leaving
    twin.tops = DeferredTops()
    return twin, memo


def _bits(ends):
    return np.asarray(ends, dtype=np.float64).tobytes()


class BesideChecker:
    """Wraps _beside_ends and _apply_beside: each call is also made by the general path on a copy."""

    def __init__(self, monkeypatch, slack: int = 0):
        self.priced = self.applied = self.folded = self.plain = self.two_left = self.member_first = self.arrays = 0
        self.cut = 0
        priced_steps = {}  # replica → steps its last beside run was priced with
        beside, apply = runs._beside_ends, applies._apply_beside

        def checked_ends(replica, item, start):
            if getattr(replica, "_general", False):  # the twin takes the general path
                return None
            replica.state.cohort.last_finish += slack  # still an upper bound (DecodeCohort.steps_to_empty)
            twin, memo = _twin(replica)
            twin._general = True
            plan = Plan([(memo[id(item[0])], item[1])])
            plan.cohort = 1
            ends = beside(replica, item, start)
            if ends is None:
                return None
            theirs = runs._step_ends(twin, plan, start)
            assert _bits(ends) == _bits(theirs), (item, start, len(ends), len(theirs))
            assert canon((replica.state, replica._leaving, replica._lead), {}) == canon(
                (twin.state, twin._leaving, twin._lead), {}
            )
            self.priced += 1
            self.folded += bool(replica._leaving)
            self.plain += len(ends) > 1 and not replica._leaving
            self.two_left += len(replica._leaving) == 2
            self.member_first += bool(replica._leaving) and replica._leaving[0][1] is not item[0]
            self.arrays += type(ends) is not list
            priced_steps[replica] = len(ends)
            return ends

        def checked_apply(replica, plan, start, ends):
            twin, memo = _twin(replica)
            theirs = []
            twin.on_finish = theirs.append
            twin_plan = Plan([(memo[id(r)], n) for r, n in plan.items])
            twin_plan.cohort = plan.cohort
            Replica._apply(twin, twin_plan, start, copy.copy(ends))
            mine = finishes_of(replica, apply, plan, start, ends)
            assert picture(replica, mine) == picture(twin, theirs), (plan.items, len(ends))
            assert canon(replica._leaving, {}) == canon(twin._leaving, {})
            self.applied += 1
            self.cut += len(ends) < priced_steps.pop(replica, 0)

        monkeypatch.setattr(runs, "_beside_ends", checked_ends)
        monkeypatch.setattr(applies, "_apply_beside", checked_apply)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    policy=st.sampled_from(["vllm", "sglang", "nochunk"]),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
    reqs=st.lists(REQUEST, min_size=2, max_size=10),
    budget=st.integers(16, 1024),
    block=st.integers(0, 2),
    tight=st.sampled_from([0, 0, 20, 40, 80, 160]),
    cache=st.booleans(),
    async_scheduling=st.booleans(),
    replicas=st.integers(2, 3),
)
def test_the_beside_path_prices_and_applies_as_the_general_path(
    policy, router, reqs, budget, block, tight, cache, async_scheduling, replicas, monkeypatch
):
    """Clusters of every policy, chunk budgets, block sizes, prefix caching on and off, vLLM async
    scheduling on and off, pools tight enough to cut runs at their blocks and to preempt: each
    beside plan's end times and leavers, and the state it leaves once applied, are the general
    paths'."""
    with monkeypatch.context() as m:
        checker = BesideChecker(m)
        engines, route, max_len = build_cluster(
            policy, MODEL, HW, 1, _flags(policy, budget, block, tight, cache, async_scheduling), replicas, router
        )
        sim = Simulation(engines, _workload(reqs, cache), router=route, check=True, max_model_len=max_len)
        res = sim.run()
    assert sim.accounted() and res.summary["completed"] + res.requests.rejected.notna().sum() == len(reqs)
    target(float(checker.priced))


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize("slack", [0, 1, 200])
def test_the_checker_sees_every_kind_of_beside_run(policy, slack, monkeypatch):
    """The comparison above is not vacuous. Two replicas, round robin: the odd requests keep the
    second busy; on the first, each prompt arrives while one request decodes: its run beside it
    with no leaver (both finish in one step) and cut by an arrival, folded through the request's
    finish in plain floats and in one array, folded through the member's. The cohort's last
    finish is only an upper bound (a member that left in a dissolve keeps it up; rarely met in a
    short simulation): raised by `slack`, the runs fold through both leavers, one after the other
    (by 1: the second leaves a step before the run's end). SGLang's decodes sit out a prefill
    step, so it has no beside runs to price, only such plans to apply."""
    checker = BesideChecker(monkeypatch, slack)
    reqs = [
        (0.0, 100, 80, 0),
        (0.0, 50, 3, 0),
        (0.2, 60, 47, 0),
        (0.0, 50, 3, 0),
        (0.15, 60, 12, 0),
        (0.0, 50, 3, 0),
        (2.0, 100, 12, 0),
        (0.0, 50, 3, 0),
        (0.03, 60, 5, 0),
        (0.0, 50, 3, 0),
        (2.0, 100, 60, 0),
        (0.0, 50, 3, 0),
        (0.1, 60, 20, 0),
        (0.0, 50, 3, 0),
        (2.0, 100, 20, 0),
        (0.0, 50, 3, 0),
        (0.05, 60, 60, 0),
    ]
    engines, route, max_len = build_cluster(
        policy, MODEL, HW, 1, _flags(policy, 512, 1, 0, False, True), 2, "round_robin"
    )
    Simulation(engines, _workload(reqs, False), router=route, max_model_len=max_len).run()
    assert checker.applied >= 4
    if policy != "sglang":
        assert checker.priced >= 4 and checker.folded >= 3 and checker.plain >= (0 if slack else 1) and checker.cut >= 1
        assert 1 <= checker.arrays < checker.priced and checker.member_first >= 1
        assert checker.two_left >= (3 if slack else 0)
