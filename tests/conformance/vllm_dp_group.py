"""vLLM 0.33's data-parallel engine end to end, run as vLLM's own code, against chunksim's lockstep group.

vLLM's side: N ``DPEngineCoreProc`` (vllm/v1/engine/core.py), one per DP rank, built without their
processes, each around its own ``Scheduler`` / ``AsyncScheduler`` and KV pool (vllm_driver's
``_build_scheduler``) and a stand-in executor that returns vllm_driver's fake outputs and counts
dummy batches. What runs is vLLM's code: ``add_request`` (a request reaching an idle rank starts a
wave), ``_handle_client_request(START_DP_WAVE)`` (the coordinator waking the other ranks),
``_process_engine_step`` with ``step`` or ``step_with_batch_queue``, ``execute_dummy_batch``,
``_has_global_unfinished_reqs`` (its all-reduce: the OR of every rank's flag), and the front end's
``DPLBAsyncMPClient.get_core_engine_for_request`` (vllm/v1/engine/core_client.py) fed the
coordinator's counts (``Scheduler.get_request_counts``, ``get_kv_cache_usage``) at the first
request of each step (a step lasts 1 s, over the coordinator's 100 ms) and finishes as the client
sees them. One loop iteration of ``run_busy_loop`` per rank is one group step: a forward or a
dummy batch, the MoE collectives pairing them across ranks.

chunksim's side: ``build_cluster("vllm", MoE model, dp ranks, router vllm_dp)`` with
``--enable-expert-parallel`` (experiments/engines.py ``build_dp_group``), its pools overridden to
the scenario's blocks, through ``Simulation`` and ``LockstepGroup``; the group's price is the real
``LockstepCost.step_time`` (the expert-parallel path), read and replaced by 1 s a step.
Expert parallelism changes no scheduling in vLLM: ``enable_expert_parallel`` is read by the MoE
layers and the all-to-all setup (``ParallelConfig.use_all2all`` / ``use_batched_dp_moe``,
vllm/config/parallel.py; the worker's process title, multiproc_executor.py), never by
vllm/v1/core/sched, ``EngineCore`` / ``DPEngineCoreProc`` (v1/engine/core.py), the client
(core_client.py) or the coordinator (coordinator.py).

Both sides must agree, at every group step and on every rank, on: a dummy batch or the tokens
scheduled per request, the requests preempted, the requests finished by that step's output; and
on every request's rank.
"""

from __future__ import annotations

import queue
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from unit_cost import UnitCost
from vllm_driver import _OUTPUT_TOKEN, _build_scheduler, _make_requests, _new_rule_flags
from vllm_scenarios import VllmScenario, pool_blocks

CONFIGS = {
    # name: (dp, pool, chunked prefill, async scheduling)
    "dp2-ample": (2, "ample", True, False),
    "dp2-tight": (2, "tight", True, False),
    "dp4-ample": (4, "ample", True, False),
    "dp4-tight": (4, "tight", True, False),
    "dp2-nochunk": (2, "mixed", False, False),
    "dp4-nochunk-tight": (4, "tight", False, False),
    # async scheduling, vLLM's default: schedule(n+1) before step n's output is processed
    "dp2-async-ample": (2, "ample", True, True),
    "dp4-async-tight": (4, "tight", True, True),
}
SYNC_INTERVAL = 16  # ParallelConfig.dp_sync_interval's default
DUMMY = "dummy"


@dataclass(frozen=True)
class DPScenario:
    dp: int
    sc: VllmScenario  # every rank's knobs and pool (num_blocks each), and all requests

    @property
    def label(self) -> str:
        return f"dp={self.dp} {self.sc.label}"


def random_dp_scenario(config: str, index: int, seed: int = 0) -> DPScenario:
    """Knobs drawn as vllm_scenarios.random_scenario draws them, chunked prefill as the
    configuration says, 2 to 24 requests arriving over 0 to 200 steps with outputs of 1 to 60
    tokens; every rank's pool fits the largest request (``tight``: barely, so ranks preempt;
    ``ample``: the whole load's share of a rank, or more)."""
    dp, pool, chunked, async_ = CONFIGS[config]
    rng = np.random.default_rng([seed, list(CONFIGS).index(config), index])
    block_size = int(rng.choice([1, 2, 4, 8, 16, 32]))
    seqs = int(rng.choice([1, 2, 3, 4, 8, 16, 64]))
    budget = max(seqs, int(rng.choice([8, 16, 32, 64, 128, 256, 512, 2048])))
    thr = int(rng.choice([0, 0, 1, 4, 16, 64, 200])) if chunked else 0
    max_model_len = 8192 if chunked else budget
    max_prompt = min(max_model_len - 1, int(rng.choice([4, 32, 128, 512, 2048])))
    span = int(rng.choice([0, 2, 10, 40, 200]))
    reqs = []
    for _ in range(int(rng.integers(2, 25))):
        p = int(rng.integers(1, max_prompt + 1))
        out = int(rng.integers(1, min(60, max_model_len - p) + 1))
        reqs.append((int(rng.integers(0, span + 1)), tuple(int(t) for t in rng.integers(1, 30000, size=p)), out))
    reqs.sort(key=lambda r: r[0])
    blocks = pool_blocks(rng, reqs, block_size, pool, dp)
    sc = VllmScenario(
        f"{config}#{index}",
        tuple(reqs),
        int(blocks),
        budget,
        seqs,
        thr,
        chunked,
        block_size,
        False,
        async_,
        True,
        max_model_len,
    )
    return DPScenario(dp, sc)


class _Executor:
    """The model executor's calls the engine core makes: each batch's output is vllm_driver's fake
    one (one own token per request that is not a prefill chunk), fixed when the batch is launched."""

    is_sleeping = False

    def __init__(self, scheduler, on_dummy):
        self.scheduler, self.on_dummy, self.pending = scheduler, on_dummy, None

    def execute_model(self, out, non_block=False):
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput

        ids = list(out.num_scheduled_tokens)
        if not ids:
            return _done(EMPTY_MODEL_RUNNER_OUTPUT)
        reqs = self.scheduler.requests
        sampled = [[] if reqs[r].is_prefill_chunk else [_OUTPUT_TOKEN + int(r)] for r in ids]
        self.pending = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )
        return _done(None)  # sampled by sample_tokens, as the GPU runner does

    def sample_tokens(self, grammar_output, non_block=False):
        out, self.pending = self.pending, None
        return _done(out) if non_block else out

    def execute_dummy_batch(self):
        self.on_dummy()


def _done(value) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def _core(sc: VllmScenario, rank: int, flags: dict, on_dummy):
    """A DPEngineCoreProc around its own scheduler, built without its process and DP group."""
    from vllm.v1.engine.core import DPEngineCoreProc

    sched = _build_scheduler(sc)
    core = object.__new__(DPEngineCoreProc)
    core.scheduler = sched
    core.model_executor = _Executor(sched, on_dummy)
    core.log_stats = False
    core.vllm_config = SimpleNamespace(
        observability_config=sched.vllm_config.observability_config,
        parallel_config=SimpleNamespace(
            sync_dp_state=lambda group, has_unfinished, pending_pause: (flags["any"], False)
        ),
    )
    core.aborts_queue = queue.Queue()
    core.output_queue = queue.Queue()
    core._weight_version = None
    core.is_mm_encoder_only = core.is_pooling_model = False
    core.check_for_draft_tokens = False
    core.async_scheduling = sc.async_scheduling
    core.batch_queue_size = 2 if sc.async_scheduling else 1
    core.batch_queue = deque() if sc.async_scheduling else None
    core.step_fn = core.step_with_batch_queue if sc.async_scheduling else core.step
    core.prefill_schedule_interval, core.dp_sync_interval = 1, SYNC_INTERVAL
    core.step_counter, core.current_wave = 0, 0
    core.pending_pause = core.ignore_start_dp_wave = False
    core.engines_running = False
    core.has_coordinator = True
    core.dp_group, core.dp_rank, core.engine_index = None, rank, rank
    return core


def run_vllm_dp(d: DPScenario, max_steps: int = 50_000):
    """vLLM's side: ({step: [per rank DUMMY or (tokens, preempted, finished)]}, rid -> rank)."""
    from vllm.v1.engine import EngineCoreRequestType
    from vllm.v1.engine.core_client import DPLBAsyncMPClient

    sc, n = d.sc, d.dp
    flags = {"any": False}
    steps: dict = {}
    clock = [0]
    cores = []
    for i in range(n):

        def on_dummy(i=i):
            steps.setdefault(clock[0], [None] * n)[i] = DUMMY

        cores.append(_core(sc, i, flags, on_dummy))
    launched: dict = {}  # id(scheduler output) -> (step, rank): finishes are that step's
    for i, core in enumerate(cores):
        _record(core.scheduler, i, n, steps, clock, launched)
    client = object.__new__(DPLBAsyncMPClient)
    names = [f"e{i}".encode() for i in range(n)]
    client.core_engines, client.client_count, client.eng_start_index = names, 1, 0
    client.engine_inflight = {e: 0 for e in names}
    client.reqs_in_flight, client.streaming_reqs = {}, set()
    client.lb_engines = [[0, 0, 0.0] for _ in range(n)]
    placed: dict = {}
    pending = deque(zip([a for a, _, _ in sc.requests], _make_requests(sc)))
    snap_t = None
    t = 0
    while True:
        clock[0] = t
        while pending and pending[0][0] <= t:
            req = pending.popleft()[1]
            if snap_t != t:  # the coordinator's counts: published often, read once a step
                client.lb_engines = [
                    [
                        c.scheduler.get_request_counts()[1],
                        c.scheduler.get_request_counts()[0],
                        c.scheduler.get_kv_cache_usage(),
                    ]
                    for c in cores
                ]
                snap_t = t
            ask = SimpleNamespace(
                request_id=req.request_id, resumable=False, data_parallel_rank=None, pooling_params=None
            )
            rank = names.index(client.get_core_engine_for_request(ask))
            placed[int(req.request_id)] = rank
            cores[rank].add_request(req, cores[rank].current_wave)
            _coordinate(cores, EngineCoreRequestType)
        forwards, reduced = [], []
        for core in cores:  # one iteration of DPEngineCoreProc.run_busy_loop each
            executed = core._process_engine_step()
            _finishes(core, client, names)
            unfinished = core.scheduler.has_unfinished_requests()
            ran = True
            if not executed:
                if not unfinished and not core.engines_running:
                    ran = False  # all engines idle: no forward, no all-reduce
                else:
                    core.execute_dummy_batch()
            forwards.append(ran)
            if ran:
                reduced.append((core, unfinished))
        if reduced:
            assert len(reduced) == n, f"{d.sc.name}: step {t}: some ranks ran a forward, others none"
            flags["any"] = any(u for _, u in reduced)
            for core, u in reduced:
                core.engines_running = core._has_global_unfinished_reqs(u)
                if not core.engines_running:
                    core.current_wave += 1
                    core.step_counter = 0
            t += 1
            if t > max_steps:
                raise RuntimeError(f"{d.sc.name}: vLLM ran past {max_steps} steps")
            continue
        if any(c.scheduler.has_requests() or c.batch_queue for c in cores):
            continue  # held finished requests leave at this schedule()
        if not pending:
            break
        t = max(t, pending[0][0])
    return {k: v for k, v in steps.items()}, placed


def _record(sched, rank: int, n: int, steps: dict, clock: list, launched: dict) -> None:
    """Wrap a rank's scheduler: its batches and preemptions at the step that launches them, its
    finishes at the step whose batch produced them."""
    schedule, update = sched.schedule, sched.update_from_output

    def recorded_schedule(*a, **k):
        out = schedule(*a, **k)
        if out.total_num_scheduled_tokens > 0 or out.preempted_req_ids:
            row = steps.setdefault(clock[0], [None] * n)
            row[rank] = (
                {int(r): q for r, q in out.num_scheduled_tokens.items()},
                sorted(int(r) for r in out.preempted_req_ids),
                [],
            )
            launched[id(out)] = (clock[0], rank)
        return out

    def recorded_update(out, mro):
        outs = update(out, mro)
        done = sorted(int(o.request_id) for eco in outs.values() for o in eco.outputs if o.finish_reason is not None)
        if done:
            step, r = launched[id(out)]
            steps[step][r][2].extend(done)
        return outs

    sched.schedule, sched.update_from_output = recorded_schedule, recorded_update


def _coordinate(cores, kinds) -> None:
    """DPCoordinatorProc: a rank's start_wave wakes every other rank with START_DP_WAVE."""
    for i, core in enumerate(cores):
        while not core.output_queue.empty():
            _, eco = core.output_queue.get_nowait()
            if getattr(eco, "start_wave", None) is not None:
                for other in cores:
                    if other is not core:
                        other._handle_client_request(kinds.START_DP_WAVE, (eco.start_wave, i))


def _finishes(core, client, names) -> None:
    """The front end's process_engine_outputs: a finished request leaves its engine's in-flight count."""
    while not core.output_queue.empty():
        _, eco = core.output_queue.get_nowait()
        for o in eco.outputs or ():
            if o.finish_reason is not None:
                client.engine_inflight[client.reqs_in_flight.pop(o.request_id)] -= 1


class _UnitLockstep:
    """The group's real price (``LockstepCost.step_time``, expert parallel) computed and recorded,
    then every step lasting 1 s; per rank its plan's {rid: tokens} and preemptions, or DUMMY."""

    engine = "vllm"

    def __init__(self, real):
        self.real, self.steps, self.plans, self.env = real, {}, {}, None
        self.priced = 0

    def step_time(self, shapes) -> float:
        self.priced += self.real.step_time(shapes) > 0
        row = [
            DUMMY if s is None else (dict(self.plans[i][0]), list(self.plans[i][1]), []) for i, s in enumerate(shapes)
        ]
        self.steps[int(self.env.now)] = row
        return 1.0


def run_chunksim_dp(d: DPScenario, break_rule: str | None = None):
    """chunksim's side, built as ``chunksim`` builds vLLM DP over a MoE model with EP on."""
    from costmodel import load_hardware, load_model
    from experiments.engines import build_cluster
    from simcore.kv import BlockPool
    from simcore.simulation import Simulation
    from workloads.workload import Workload

    sc = d.sc
    flags = sc.engine_flags(enable_prefix_caching=False, enable_expert_parallel=True)
    flags.update(_new_rule_flags(sc))
    engines, route, max_len = build_cluster(
        "vllm", load_model("qwen3-30b-a3b"), load_hardware("h100"), 1, flags, replicas=d.dp, router="vllm_dp"
    )
    assert route.lockstep is not None and route.lockstep.experts is not None, "EP lockstep path not built"
    cost = _UnitLockstep(route.lockstep)
    route.lockstep = cost
    wrapped = []
    for rank, (pol, pool, _) in enumerate(engines):
        assert isinstance(pool, BlockPool) and pool.total + 1 == sc.num_blocks, (pool.total, sc.num_blocks)
        schedule = pol.schedule

        def recorded(s, schedule=schedule, rank=rank):
            plan = schedule(s)
            cost.plans[rank] = ({r.rid: q for r, q in plan.items}, sorted(r.rid for r in plan.preempted))
            return plan

        pol.schedule = recorded
        wrapped.append((pol, pool, UnitCost()))
    if break_rule is not None:
        _break(route, break_rule)
    wl = Workload(
        [float(a) for a, _, _ in sc.requests],
        [len(p) for _, p, _ in sc.requests],
        [m for _, _, m in sc.requests],
    )
    sim = Simulation(wrapped, wl, fast_forward=False, check=True, max_model_len=max_len, router=route)
    cost.env = sim.env
    if break_rule == "sync-every-step":
        sim.group.sync_interval = 1
    sim.run()
    steps = cost.steps
    placed = {}
    for r in sim.requests:
        assert not r.rejected, f"chunksim rejected request {r.rid}: {r.rejected}"
        placed[r.rid] = r.replica
        row = steps[int(r.finish_s) - 1][r.replica]
        row[2].append(r.rid)
    for row in steps.values():
        for x in row:
            if x != DUMMY:
                x[2].sort()
    assert cost.priced == len(steps), "the EP price was not positive on every step"
    return steps, placed


ABLATIONS = ("sync-every-step", "no-rotation")


def _break(route, rule: str) -> None:
    """Break one rule in chunksim (the ablation the harness must catch)."""
    if rule == "no-rotation":  # the front end's scan starts at rank 0 every time
        pick = route.pick

        def unrotated(inflight, pick=pick):
            route.start = 0
            return pick(inflight)

        route.pick = unrotated
    elif rule != "sync-every-step":
        raise ValueError(f"ablation: unknown rule {rule!r} (one of {ABLATIONS})")


def compare_dp(d: DPScenario, break_rule: str | None = None, vllm_run: tuple | None = None) -> str | None:
    """None when both sides agree on every request's rank and at every group step, else the first
    difference; ``vllm_run``: run_vllm_dp's answer, when already run."""
    theirs, their_ranks = vllm_run or run_vllm_dp(d)
    mine, my_ranks = run_chunksim_dp(d, break_rule)
    if their_ranks != my_ranks:
        rid = next(r for r in sorted(their_ranks) if their_ranks[r] != my_ranks.get(r))
        return f"{d.sc.name}: request {rid} to rank {their_ranks[rid]} (vLLM), {my_ranks.get(rid)} (chunksim)"
    for t in sorted(set(theirs) | set(mine)):
        a, b = theirs.get(t), mine.get(t)
        if a != b:
            return f"{d.sc.name}: group step {t}: vLLM {a} | chunksim {b}"
    return None


__all__ = [
    "ABLATIONS",
    "CONFIGS",
    "DPScenario",
    "compare_dp",
    "random_dp_scenario",
    "run_chunksim_dp",
    "run_vllm_dp",
]
