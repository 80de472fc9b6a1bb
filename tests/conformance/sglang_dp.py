"""SGLang 0.5.23's DP attention across ranks, run as SGLang's own code, against chunksim's lockstep group.

A scenario is N ranks (sglang_engine.SGLangEngine each: SGLang's own admission, radix cache and
allocator) behind one front end. SGLang's code makes the two decisions the ranks share:
- the rank of each request: ``DataParallelController.round_robin_scheduler``
  (managers/data_parallel_controller.py; ``load_balance_method`` "auto" resolves to round_robin
  outside PD, ``handle_load_balance_method``), on a controller built without its processes and
  with ``sock_send`` caught;
- every iteration, after each rank formed its batch: ``prepare_mlp_sync_batch_raw``
  (managers/scheduler_components/dp_attn.py): each rank's ``MLPSyncBatchInfo`` is all-gathered and
  a rank without a batch gets an idle batch when any rank has tokens; when none has, no forward
  runs and the ranks go to ``on_idle``.
Only the gather's transport is a stand-in (``exchange_sync_rows``: every rank's row, in group-rank
order, as gloo would put them; each rank's call is made once to leave its row and again to read
them all), with the process-group handles ``get_parallel`` gives. chunksim runs the same requests
through ``Simulation`` with a ``LockstepGroup`` of SGLang policies and the round_robin router, every
group step costing 1 s; both sides must agree at every step on which ranks run a forward and
which an idle batch, the tokens each request computes, and the rank of every request.

Importing the controller needs einops and setproctitle beside tests/conformance/sglang_requirements.txt;
its import of the scheduler process (``run_scheduler_process``, a default argument only) is
stood in for while it loads.
"""

from __future__ import annotations

import random
import sys
import types
from dataclasses import dataclass, field

from .sglang_driver import policy_for, scenario_workload
from .sglang_engine import SGLangEngine, _Batch, _sglang
from .sglang_scenarios import Scenario, random_scenario
from .unit_cost import UnitCost

CONFIGS = ("dp-attn/mixed-off/radix-on/tight", "dp-attn/overlap/mixed-on/radix-on/tight")

_DP = None


def _dp():
    """dp_attn and data_parallel_controller, imported once, with SGLang's own modules."""
    global _DP
    if _DP is not None:
        return _DP
    sg = _sglang()
    from sglang.srt.managers.scheduler_components import dp_attn
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    name = "sglang.srt.managers.scheduler"
    real = sys.modules.get(name)
    if real is None:
        stub = types.ModuleType(name)
        stub.run_scheduler_process = None  # type: ignore[attr-defined]
        sys.modules[name] = stub
    try:
        from sglang.srt.managers import data_parallel_controller as dpc
    finally:
        if real is None:
            del sys.modules[name]
    _DP = types.SimpleNamespace(
        sg=sg, dp_attn=dp_attn, dpc=dpc, ForwardMode=ForwardMode, NONE=SpeculativeAlgorithm.NONE, parallel=None
    )
    dp_attn.get_parallel = lambda: _DP.parallel  # the rank being synced: its process-group handles
    dp_attn.exchange_sync_rows = _exchange
    return _DP


class _Collected(Exception):
    """A rank's row is in: its call stops at the gather, to be made again once every row is."""


class _Collective:
    """One all-gather among the ranks: the rows in group-rank order, then every rank reads them all."""

    def __init__(self, n: int):
        self.rows: list = [None] * n
        self.full = False


def _exchange(global_flat, local_row, group) -> None:
    """Stand-in transport for dp_attn.exchange_sync_rows. Each rank's call is made twice: the first
    leaves its row and stops (nothing before the gather has an effect the second call does not
    repeat: the batch's is_extend_in_batch); the second, once all rows are in, reads them all."""
    coll, rank = group
    if not coll.full:
        coll.rows[rank] = local_row.clone()
        raise _Collected
    global_flat.copy_(_DP.sg.torch.cat(coll.rows))


@dataclass
class DPScenario:
    name: str
    ranks: int
    base: Scenario
    requests: list = field(default_factory=list)


def random_dp_scenario(config: str, seed: int) -> DPScenario:
    """A conformance scenario's knobs and requests (sglang_scenarios.random_scenario) over 2-4 ranks,
    with outputs cut short (a group step runs every rank's scheduler, so steps are what costs),
    arrivals spread out in half of them (ranks then drain and refill while others run), and each
    rank's pool from tight to ample, never below what its longest request needs."""
    base = random_scenario(config, seed)
    rng = random.Random(f"dp/{config}/{seed}")
    n = rng.choice((2, 2, 3, 4))
    extra = random_scenario(config, seed + 1_000_000).requests if rng.random() < 0.5 else []
    for i, r in enumerate(extra):
        r.rid = f"s{i}"
    reqs = base.requests + extra
    cap = rng.choice((8, 30, 80))
    spread = rng.random() < 0.5
    t = 0
    for r in sorted(reqs, key=lambda r: (r.arrival, r.rid)):
        r.max_new_tokens = min(r.max_new_tokens, rng.randint(1, cap))
        if spread:
            t += rng.choice((0, 0, 1, 2, 5, 20, 60))
            r.arrival = t
    k = base.knobs
    longest = max(len(r.tokens) + r.max_new_tokens for r in reqs)
    total = sum(len(r.tokens) + r.max_new_tokens for r in reqs)
    pool = max(longest + 4 * k.page_size + 16, int(total * rng.uniform(0.25, 1.5) / n))
    k.pool_tokens = -(-pool // k.page_size) * k.page_size + k.page_size
    base.requests = reqs
    return DPScenario(f"dp{n}/{config}#{seed}", n, base, reqs)


def _view(batch, fm):
    """What prepare_mlp_sync_batch_raw reads of a ScheduleBatch, from the engine's batch."""
    if batch is None:
        return None
    decoding = set(map(id, batch.decoding_reqs or ()))
    if not batch.extend:
        mode, lens = fm.DECODE, [1] * len(batch.reqs)
    else:
        mode = fm.MIXED if decoding else fm.EXTEND
        lens = [1 if id(r) in decoding else r.extend_len for r in batch.reqs]
    return types.SimpleNamespace(
        forward_mode=mode,
        reqs=batch.reqs,
        batch_size=lambda: len(batch.reqs),
        extend_num_tokens=sum(lens),
        extend_lens=lens,
        extend_logprob_start_lens=[x - 1 for x in lens],  # no logprobs: one sampled position a request
        return_logprob=False,
        encoder_swa_reset=None,
        spec_info=None,
        seq_lens_cpu=None,  # metrics read Req.seqlen instead
        prefix_lens=[r.prefix_len for r in batch.reqs],
        engine_batch=batch,
    )


def _sync(views: list, knobs) -> list:
    """Every rank's prepare_mlp_sync_batch_raw: its batch, an idle batch, or None."""
    d = _dp()
    n = len(views)
    coll = _Collective(n)
    runner = types.SimpleNamespace(
        attn_backend=types.SimpleNamespace(folds_encoder_swa_replay=False),
        prefill_cuda_graph_runner=None,
        spec_algorithm=d.NONE,
        model_config=None,
    )

    def idle():
        return types.SimpleNamespace(forward_mode=d.ForwardMode.IDLE, reqs=[], engine_batch=_Batch())

    def rank(i):
        group = (coll, i)
        d.parallel = types.SimpleNamespace(
            num_dp_ranks=n,
            attn_tp_size=1,
            attn_cp_size=1,
            dwdp_size=1,
            tp_group=types.SimpleNamespace(
                device_group=group,
                cpu_group=group,
                device="cpu",
                active_ranks_cpu=d.sg.torch.ones(n, dtype=d.sg.torch.int32),
            ),
        )
        return d.dp_attn.prepare_mlp_sync_batch_raw(
            views[i],
            model_runner=runner,
            get_idle_batch=idle,
            disable_cuda_graph=True,
            require_mlp_tp_gather=True,
            disable_overlap_schedule=knobs.disable_overlap_schedule,
            offload_tags=set(),
        )

    for i in range(n):
        try:
            rank(i)
        except _Collected:
            pass
        else:
            raise AssertionError("a rank's MLP sync returned before the gather")
    coll.full = True
    out = [rank(i) for i in range(n)]
    return out


class _Controller:
    """DataParallelController's dispatch state, without its processes: rank i's socket is i."""

    def __init__(self, n: int):
        d = _dp()
        self.ctrl = object.__new__(d.dpc.DataParallelController)
        self.ctrl.round_robin_counter = 0
        self.ctrl._active_workers = list(range(n))
        self.ctrl.status = [True] * n
        self.ctrl.workers = list(range(n))
        self.sent: list = []
        d.dpc.sock_send = lambda sock, req: self.sent.append(sock)

    def dispatch(self, rid: str) -> int:
        _DP.dpc.DataParallelController.round_robin_scheduler(
            self.ctrl, types.SimpleNamespace(rid=rid, routed_dp_rank=None)
        )
        return self.sent.pop()


def run_sglang_dp(sc: DPScenario, max_steps: int = 100_000):
    """SGLang's side: (group steps, rid → rank). A step: (time, per rank its tokens dict or "idle")."""
    d = _dp()
    k = sc.base.knobs
    ctx = max(len(r.tokens) + r.max_new_tokens for r in sc.requests) + 8
    ranks = [SGLangEngine(k, max_context_len=ctx) for _ in range(sc.ranks)]
    ctrl = _Controller(sc.ranks)
    pending = sorted(sc.requests, key=lambda r: (r.arrival, r.rid))
    placed: dict = {}
    i, t, steps = 0, 0, []
    while True:
        while i < len(pending) and pending[i].arrival <= t:
            r = pending[i]
            placed[r.rid] = ctrl.dispatch(r.rid)
            ranks[placed[r.rid]].add(r.rid, r.tokens, r.max_new_tokens, r.ignore_eos)
            i += 1
        formed = [eng.form() for eng in ranks]
        synced = _sync([_view(b, d.ForwardMode) for b, _ in formed], k)
        ran = any(v is not None for v in synced)
        row = []
        progressed = False
        for eng, (_, rec), v in zip(ranks, formed, synced):
            eng.time = t
            rec.time = t
            out = eng.launch(None if v is None else v.engine_batch, rec)
            progressed |= eng.progressed or bool(out is not None and out.retracted and v is None)
            idle = v is not None and v.forward_mode == d.ForwardMode.IDLE
            row.append("idle" if idle else (dict(rec.tokens) if v is not None else None))
        if ran:
            assert all(x is not None for x in row), "a rank skipped a forward the others ran"
            steps.append((t, row))
            t += 1
            if len(steps) > max_steps:
                raise RuntimeError("too many steps")
            continue
        if progressed:
            continue
        if i < len(pending):
            t = max(t, pending[i].arrival)
            continue
        if any(eng.busy for eng in ranks):
            raise RuntimeError("engines stuck: requests wait and nothing runs")
        return steps, placed


class _LockUnit:
    """A group step of 1 s, recording which ranks run (their plans) and which run an idle batch."""

    engine = "sglang"

    def __init__(self):
        self.steps: list = []
        self.plans: dict = {}
        self.env = None

    def step_time(self, shapes) -> float:
        row = [dict(self.plans[i]) if s is not None else "idle" for i, s in enumerate(shapes)]
        self.steps.append((self.env.now, row))
        return 1.0


def run_chunksim_dp(sc: DPScenario):
    """chunksim's side: the same requests through Simulation, LockstepGroup and the round_robin router."""
    from simcore.kv import BlockPool
    from simcore.router import make_router
    from simcore.simulation import Simulation

    k = sc.base.knobs
    reqs = sorted(sc.requests, key=lambda r: (r.arrival, r.rid))
    names = [r.rid for r in reqs]
    wl = scenario_workload(k, reqs)
    cost = _LockUnit()
    engines = []
    for rank in range(sc.ranks):
        pol = policy_for(k)
        schedule = pol.schedule

        def recorded(s, schedule=schedule, rank=rank):
            plan = schedule(s)
            assert not plan.cohort, "the reference loop keeps no decode cohort"
            cost.plans[rank] = {names[r.rid]: q for r, q in plan.items}
            return plan

        pol.schedule = recorded  # type: ignore[method-assign]
        engines.append((pol, BlockPool(k.pool_tokens // k.page_size, k.page_size), UnitCost()))
    router = make_router("round_robin")
    placed: dict = {}

    def route(req, replicas, pick=router):
        i = pick(req, replicas)
        placed[names[req.rid]] = i
        return i

    sim = Simulation(engines, wl, fast_forward=False, max_model_len=1 << 30, check=True, router=route, lockstep=cost)
    cost.env = sim.env
    sim.run()
    return [(int(t), row) for t, row in cost.steps], placed


def compare_dp(sc: DPScenario) -> str | None:
    """None when both sides agree at every group step and on every request's rank, else the first difference."""
    theirs, their_ranks = run_sglang_dp(sc)
    mine, my_ranks = run_chunksim_dp(sc)
    if their_ranks != my_ranks:
        rid = next(r for r in their_ranks if their_ranks[r] != my_ranks.get(r))
        return f"{sc.name}: {rid} to rank {their_ranks[rid]} (SGLang), {my_ranks.get(rid)} (chunksim)"
    for j, (a, b) in enumerate(zip(theirs, mine)):
        if a != b:
            return f"{sc.name}: group step {j}: SGLang t={a[0]} {a[1]} | chunksim t={b[0]} {b[1]}"
    if len(theirs) != len(mine):
        return f"{sc.name}: SGLang ran {len(theirs)} group steps, chunksim {len(mine)}"
    return None


__all__ = ["CONFIGS", "compare_dp", "random_dp_scenario"]
