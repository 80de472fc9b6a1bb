"""applies._apply_lone against the general Replica._apply, plan by plan.

The fast-forward/stepping comparisons see a slip in the lone path only where it changes a
request's figures. Here every plan it applies is also applied by the general path to a deep copy
of the replica's state (queues, KV pool, prefix cache, decode cohort, policy, ITL histogram and
counters) taken just before, and the two must leave the same state, field for field, and hand
the same finished requests on in the same order."""

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st, target

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from policies.base import Plan
from simcore.fastforward import applies
from simcore.fastforward.tops import DeferredTops
from simcore.replica import Replica
from simcore.simulation import Simulation
from workloads.workload import Workload

pytestmark = pytest.mark.usefixtures("sglang_non_overlap")  # the fast paths: SGLang's non-overlap loop

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
BLOCK_TOKENS = 32  # prefix-cache block: a multiple of every engine block size drawn below


def canon(x, seen: dict):
    """A comparable picture of an object graph: scalars exactly, containers in order, objects by
    type and fields (slots and __dict__), an object met before by the order it was first met."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return ("float", "nan" if math.isnan(x) else x.hex())
    if isinstance(x, np.generic):
        return canon(x.item(), seen)
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            return ("ndarray", str(x.dtype), x.shape, [canon(v, seen) for v in x.ravel().tolist()])
        if x.dtype.kind in "fc":
            x = np.where(np.isnan(x), np.nan, x)  # every NaN alike, as for a float scalar
        return ("ndarray", str(x.dtype), x.shape, x.tobytes())
    if callable(x) and not hasattr(x, "__dict__") and not hasattr(type(x), "__slots__"):
        return ("callable", getattr(x, "__qualname__", repr(type(x))))
    if id(x) in seen:
        return ("ref", seen[id(x)][0])
    seen[id(x)] = (len(seen), x)  # x kept alive: its id is not reused while the walk goes on
    if isinstance(x, dict):
        return ("dict", [(canon(k, seen), canon(v, seen)) for k, v in x.items()])
    if isinstance(x, (list, tuple)) or type(x).__name__ == "deque":
        return (type(x).__name__, [canon(v, seen) for v in x])
    assert not isinstance(x, (set, frozenset)), "a set's order would differ between copies"
    fields = {}
    for klass in type(x).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(x, name):
                fields[name] = getattr(x, name)
    fields.update(getattr(x, "__dict__", {}))
    return (type(x).__name__, [(k, canon(v, seen)) for k, v in sorted(fields.items())])


def picture(replica, finished: list):
    replica.tops.settle()  # the lone path's largest gaps are folded into max_itl_s in bulk (fastforward/tops.py)
    return canon(
        (
            replica.state,
            replica.policy,
            replica.itl,
            replica.num_iterations,
            replica._outstanding,
            replica._clock,
            finished,
        ),
        {},
    )


def finishes_of(replica, apply, *args) -> list:
    """The requests ``apply(replica, *args)`` finishes, in on_finish order (which still runs)."""
    mine, on_finish = [], replica.on_finish

    def finished(r):
        mine.append(r)
        on_finish(r)

    replica.on_finish = finished
    try:
        apply(replica, *args)
    finally:
        replica.on_finish = on_finish
    return mine


class LoneChecker:
    """Wraps applies._apply_lone: each call is also applied by the general path to a copy first."""

    def __init__(self, monkeypatch):
        self.calls = self.finishes = self.multi_step = 0
        lone = applies._apply_lone

        def checked(replica, items, start, ends):
            memo = {}
            replica.tops.settle()  # both start from settled max ITLs; the twin gets tops of its own
            state, policy, itl = copy.deepcopy((replica.state, replica.policy, replica.itl), memo)
            twin = object.__new__(Replica)
            twin.__dict__.update(replica.__dict__)
            twin.tops = DeferredTops()
            theirs = []
            twin.state, twin.policy, twin.itl, twin.on_finish = state, policy, itl, theirs.append
            twin.iteration_log = []  # the general path: _apply dispatches to _apply_lone only without a log
            ((req, n),) = items
            Replica._apply(twin, Plan([(memo[id(req)], n)]), start, copy.copy(ends))
            twin.iteration_log = None
            mine = finishes_of(replica, lone, items, start, ends)
            assert picture(replica, mine) == picture(twin, theirs), (req, n, len(ends))
            self.calls += 1
            self.finishes += len(mine)
            self.multi_step += len(ends) > 1

        monkeypatch.setattr(applies, "_apply_lone", checked)


def _flags(policy, budget, block, tight, cache, async_scheduling):
    if policy == "sglang":
        page = (1, 4, 16)[block]
        flags = dict(
            chunked_prefill_size=max(page, budget),
            max_prefill_tokens=max(page, budget),
            page_size=page,
            disable_radix_cache=not cache,
            max_running_requests=8,
        )
        if tight:
            flags["max_total_tokens"] = tight * 16
        return flags
    size = (16, 32)[block % 2]
    flags = dict(block_size=size, max_num_seqs=8, max_num_batched_tokens=max(8, budget), enable_prefix_caching=cache)
    if policy == "vllm":
        flags["async_scheduling"] = async_scheduling
    else:
        flags.pop("max_num_batched_tokens")
    if tight:
        flags["num_gpu_blocks_override"] = max(2, tight * 16 // size)
    return flags


def _workload(reqs, cache):
    heads = [tuple(range(100 * h, 100 * h + 40)) for h in range(2)]
    arrivals, prompts, outputs, hashes = [], [], [], []
    t = 0.0
    for i, (gap, prompt, output, head) in enumerate(reqs):
        t += gap
        arrivals.append(t)
        prompts.append(prompt)
        outputs.append(output)
        own = tuple(10_000 * (i + 1) + j for j in range(prompt // BLOCK_TOKENS))
        hashes.append(((heads[head - 1] if head else ()) + own)[: prompt // BLOCK_TOKENS])
    return Workload(
        np.array(arrivals), prompts, outputs, block_hashes=hashes if cache else None, block_tokens=BLOCK_TOKENS
    )


REQUEST = st.tuples(
    st.sampled_from([0.0, 0.0, 0.005, 0.05, 0.5, 3.0]), st.integers(1, 700), st.integers(1, 90), st.integers(0, 2)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    policy=st.sampled_from(["vllm", "sglang", "nochunk"]),
    ff=st.booleans(),
    reqs=st.lists(REQUEST, min_size=1, max_size=5),
    budget=st.integers(16, 1024),
    block=st.integers(0, 2),
    tight=st.sampled_from([0, 0, 20, 40, 80, 160]),
    cache=st.booleans(),
    async_scheduling=st.booleans(),
)
def test_apply_lone_leaves_the_general_paths_state(
    policy, ff, reqs, budget, block, tight, cache, async_scheduling, monkeypatch
):
    """Lone plans (one request, no cohort, lead, leavers or joiners) in both modes, every policy,
    chunk budgets, block sizes, prefix caching on and off, vLLM async scheduling on and off, pools
    tight enough to cut runs at their blocks and to preempt: the lone and general paths leave
    the same replica state after every such plan."""
    with monkeypatch.context() as m:
        checker = LoneChecker(m)
        engines, _, max_len = build_cluster(
            policy, MODEL, HW, 1, _flags(policy, budget, block, tight, cache, async_scheduling)
        )
        sim = Simulation(engines, _workload(reqs, cache), fast_forward=ff, check=True, max_model_len=max_len)
        res = sim.run()
    assert sim.accounted() and res.summary["completed"] + res.requests.rejected.notna().sum() == len(reqs)
    target(float(checker.calls))


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
def test_the_checker_sees_multi_step_finishing_and_cached_lone_plans(policy, monkeypatch):
    """The comparison above is not vacuous: lone runs of several steps, lone finishes and cache hits occur."""
    checker = LoneChecker(monkeypatch)
    wl = _workload(
        [
            (0.0, 300, 40, 1),
            (3.0, 200, 1, 1),
            (3.0, 90, 30, 0),
            (3.0, 64, 20, 1),
            (3.0, 120, 25, 0),
            (3.0, 80, 1, 1),
            (3.0, 150, 12, 0),
            (3.0, 70, 1, 0),
            (3.0, 64, 5, 1),
        ],
        True,
    )
    for ff in (False, True):
        engines, _, max_len = build_cluster(policy, MODEL, HW, 1, _flags(policy, 256, 1, 0, True, True))
        res = Simulation(engines, wl, fast_forward=ff, max_model_len=max_len).run()
        assert res.requests.num_cached_tokens.iloc[1] > 0
    assert checker.calls >= 8 and checker.finishes >= 4 and checker.multi_step >= 1
