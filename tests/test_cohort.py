"""The decode cohort (every policy, fast-forward mode) against one-event-per-step stepping, where
every request is advanced explicitly: same per-request metrics to the bit, same ITL histogram."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from simcore.cohort import DecodeCohort
from simcore.fastforward import runs
from simcore.request import Request
from simcore.simulation import Simulation
from workloads.workload import Workload

pytestmark = pytest.mark.usefixtures("sglang_non_overlap")  # the fast paths: SGLang's non-overlap loop

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def run(flags, wl, ff, check=False, policy="vllm"):
    sched, pool, cm, max_len = build_engine(policy, MODEL, HW, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, check=check, max_model_len=max_len)
    return sim, sim.run()


@st.composite
def workloads(draw):
    n = draw(st.integers(2, 40))
    gaps = draw(st.lists(st.floats(0, 0.2), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 2500), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    shared = draw(st.booleans())
    hashes = [tuple(range(p // 32)) for p in prompts]  # one long common prefix
    concurrency = draw(st.sampled_from([None, None, 2, 5]))  # closed loop: a finish sends the next request
    eos = draw(st.sampled_from(["default", "off", "mixed"]))  # SGLang reserves ignore_eos requests' outputs whole
    ignore_eos = (
        None
        if eos == "default"
        else np.zeros(n, bool)
        if eos == "off"
        else np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    )
    return Workload(
        np.cumsum(gaps),
        prompts,
        outputs,
        block_hashes=hashes if shared else None,
        block_tokens=32,
        closed_loop_concurrency=concurrency,
        ignore_eos=ignore_eos,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=workloads(),
    budget=st.integers(16, 4096),
    seqs=st.integers(1, 48),
    thr=st.sampled_from([0, 0, 100]),
    blocks=st.integers(300, 4000),
    block=st.sampled_from([1, 16, 32]),
    async_=st.booleans(),
    full=st.booleans(),
)
def test_cohort_matches_stepping(wl, budget, seqs, thr, blocks, block, async_, full):
    flags = dict(
        max_num_batched_tokens=budget,
        max_num_seqs=min(seqs, budget),
        long_prefill_token_threshold=thr,
        num_gpu_blocks_override=max(blocks // block, 2),
        block_size=block,
        max_model_len=8192,
        async_scheduling=async_,
        scheduler_reserve_full_isl=full,
    )
    assert_matches_stepping("vllm", flags, wl)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=workloads(),
    cap=st.sampled_from([0, 0, 500, 1500, 3000]),
    seqs=st.integers(1, 48),
    blocks=st.integers(300, 4000),
    block=st.sampled_from([1, 16, 32]),
    caching=st.booleans(),
)
def test_nochunk_cohort_matches_stepping(wl, cap, seqs, blocks, block, caching):
    flags = dict(
        max_num_batched_tokens=cap,
        max_num_seqs=seqs,
        num_gpu_blocks_override=max(blocks // block, 1),
        block_size=block,
        max_model_len=8192,
        enable_prefix_caching=caching,
    )
    assert_matches_stepping("nochunk", flags, wl)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wl=workloads(),
    chunk=st.sampled_from([-1, 64, 512, 2048]),
    prefill=st.sampled_from([256, 4096, 16384]),
    mixed=st.booleans(),
    page=st.sampled_from([1, 16, 32]),
    total=st.integers(2000, 60000),
    running=st.integers(1, 48),
    radix=st.booleans(),
)
def test_sglang_cohort_matches_stepping(wl, chunk, prefill, mixed, page, total, running, radix):
    flags = dict(
        chunked_prefill_size=max(chunk, page) if chunk > 0 else chunk,
        max_prefill_tokens=prefill,
        enable_mixed_chunk=mixed,
        page_size=page,
        max_total_tokens=total,
        max_running_requests=running,
        disable_radix_cache=not radix,
        max_model_len=8192,
    )
    assert_matches_stepping("sglang", flags, wl)


def assert_matches_stepping(policy, flags, wl):
    sim, a = run(flags, wl, True, check=True, policy=policy)
    _, b = run(flags, wl, False, policy=policy)
    assert sim.accounted()
    for col in ("first_token_s", "finish_s", "max_itl_s"):
        x, y = a.requests[col].to_numpy(float), b.requests[col].to_numpy(float)
        assert np.array_equal(x, y, equal_nan=True), col
    for col in ("num_output_tokens", "num_preemptions", "rejected"):
        assert a.requests[col].equals(b.requests[col]), col
    ha, hb = a.replicas[0].itl, b.replicas[0].itl
    assert ha.count == hb.count and (ha.counts == hb.counts).all()


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
def test_cohort_carries_the_decodes(policy):
    """A busy run keeps most decodes in the cohort: far fewer events than steps."""
    rng = np.random.default_rng(2)
    n = 300
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(100, 1500, n), rng.integers(50, 300, n))
    sched, pool, cm, max_len = build_engine(policy, MODEL, HW, 1, {})
    sim = Simulation([(sched, pool, cm)], wl, max_model_len=max_len)
    rep = sim.replicas[0]
    widths = []
    schedule = sched.schedule

    def spy(state):
        plan = schedule(state)
        widths.append((plan.cohort, len(plan.items)))
        return plan

    sched.schedule = spy
    sched.arrival_chunks = lambda *a: (
        [],
        0,
    )  # a run that folds arrivals carries them outside the cohort (test_arrival_folds.py)
    res = sim.run()
    assert res.summary["completed"] == n
    assert max(c for c, _ in widths) > 10
    assert sum(c for c, _ in widths) > 5 * sum(i for _, i in widths)
    assert len(widths) < rep.num_iterations / 2


@given(
    joins=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 40)), min_size=1, max_size=30),
    bs=st.sampled_from([1, 2, 16, 32]),
    start=st.integers(0, 40),
    steps=st.integers(0, 200),
)
def test_new_blocks_counts_boundary_crossings(joins, bs, start, steps):
    c = DecodeCohort(bs)
    members = []
    for i, (computed, wait) in enumerate(joins):
        c.tick += wait
        r = Request(i, 0.0, computed + 1, 10**9, num_computed_tokens=computed, num_output_tokens=0, seq=i)
        c.join(r)
        members.append(r)
    c.tick += start
    brute = sum(-(-(c.current(r) + steps) // bs) - -(-c.current(r) // bs) for r in members)
    assert c.new_blocks(c.tick, steps) == brute


@given(
    outs=st.lists(st.integers(1, 300), min_size=1, max_size=8),
    ran=st.integers(0, 50),
    stepped=st.integers(0, 20),
    back=st.integers(1, 8),
)
def test_steps_to_empty_after_a_dissolve_is_the_rejoined_members(outs, ran, stepped, back):
    """steps_to_empty bounds the members' remaining steps; after a dissolve (members stepped
    explicitly, then some rejoin) it is the largest remaining among those back, not the
    dissolved members' old finish."""
    c = DecodeCohort(16)
    members = [
        Request(i, 0.0, 10, 10 + o + ran + stepped, num_computed_tokens=10, num_output_tokens=1, seq=i)
        for i, o in enumerate(outs)
    ]
    for r in members:
        c.join(r)
    c.advance(ran, 0.01, 1.0)
    c.dissolve(lambda r: 0)
    assert c.steps_to_empty() == 0
    for r in members[:back]:
        r.num_computed_tokens += stepped
        r.num_output_tokens += stepped
        c.join(r)
    assert c.steps_to_empty() == max(r.output_len - r.num_output_tokens for r in members[:back])


def test_outstanding_mid_run_matches_stepping():
    """Folded runs apply finishes at their end; `outstanding` must still read as stepping has it."""
    rng = np.random.default_rng(4)
    n = 200
    wl = Workload(np.cumsum(rng.exponential(0.1, n)), rng.integers(50, 800, n), rng.integers(20, 400, n))
    seen = {}
    for ff in (True, False):
        sched, pool, cm, max_len = build_engine("vllm", MODEL, HW, 1, {})
        sim = Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=max_len)
        samples = seen[ff] = []

        def monitor(env, sim=sim, samples=samples):
            while True:
                yield env.timeout(0.0137)
                samples.append(sim.replicas[0].outstanding)

        sim.env.process(monitor(sim.env))
        sim.run(until=float(wl.arrival_s[-1]) + 5)
    assert seen[True] == seen[False] and max(seen[True]) > 5


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("ff", [True, False])
def test_outstanding_is_arrived_and_not_finished(replicas, ff):
    """Read mid-run, `outstanding` is what the results table says was in the system then: arrived
    by now and not finished (a sole replica collects its arrivals only when it plans; reading must
    not miss the ones stamped since)."""
    from experiments.engines import build_cluster

    rng = np.random.default_rng(5)
    n = 300
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(50, 3000, n), rng.integers(20, 300, n))
    engines, route, max_len = build_cluster("vllm", MODEL, HW, 1, {}, replicas, "least_outstanding")
    sim = Simulation(engines, wl, router=route, fast_forward=ff, max_model_len=max_len)
    samples = []

    def monitor(env):
        while True:
            yield env.timeout(0.0137)
            samples.append((env.now, sum(r.outstanding for r in sim.replicas)))

    sim.env.process(monitor(sim.env))
    end = float(wl.arrival_s[-1]) + 2
    df = sim.run(until=end).requests
    arrival, finish = wl.arrival_s, df.set_index("rid").finish_s.reindex(range(n)).fillna(np.inf).to_numpy()
    truth = [int(((arrival <= t) & (finish > t)).sum()) for t, _ in samples]
    assert [k for _, k in samples] == truth and max(truth) > 5


@pytest.mark.parametrize("policy", ["vllm", "sglang", "nochunk"])
@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("until", [3.3, 9.71, 16.0])
def test_stopping_mid_run_reports_what_stepping_does(policy, replicas, until):
    """`run(until=t)` with a fast-forward run in flight applies the steps that ended before t:
    tokens, first tokens, finishes and max ITL as stepping reports them at t."""
    from experiments.engines import build_cluster

    rng = np.random.default_rng(6)
    n = 300
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(50, 3000, n), rng.integers(20, 300, n))
    frames = []
    for ff in (True, False):
        engines, route, max_len = build_cluster(policy, MODEL, HW, 1, {}, replicas, "least_outstanding")
        sim = Simulation(engines, wl, router=route, fast_forward=ff, max_model_len=max_len)
        frames.append(sim.run(until=until).requests)
        assert sim.accounted()
    cols = ["num_output_tokens", "first_token_s", "finish_s", "max_itl_s", "first_scheduled_s"]
    a, b = frames
    assert len(a) == len(b) > 0 and a.num_output_tokens.sum() > 40
    assert a[cols].equals(b[cols])


def test_a_simulation_runs_once():
    sim, _ = run({}, Workload(np.array([0.0]), np.array([10]), np.array([5])), True)
    with pytest.raises(ValueError, match="runs once"):
        sim.run()


@given(
    computed=st.integers(0, 5000),
    q=st.integers(1, 3000),
    bs=st.sampled_from([1, 16, 32]),
    spare=st.integers(0, 40),
    k=st.integers(2, 3000),
)
def test_single_request_kv_limit_closed_form(computed, q, bs, spare, k):
    """The one-request shortcut equals the search: the most steps whose blocks fit."""
    from policies.base import PolicyHooks, SchedulerState
    from simcore.kv import BlockPool
    from simcore.replica import Replica

    pool = BlockPool(10_000, bs)
    r = Request(0, 0.0, computed + q, 10**6, num_computed_tokens=computed)
    assert pool.grow(r, computed + q)
    pool.used = pool.total - spare
    rep = Replica.__new__(Replica)
    rep.state, rep.policy = SchedulerState(pool, running=[r]), PolicyHooks()
    got = runs._kv_limited(rep, [(r, q)], k, 0)
    brute = max(j for j in range(1, k + 1) if -(-(computed + q - 1 + j) // bs) - r.num_blocks <= spare)
    assert got == brute
