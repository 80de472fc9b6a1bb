"""SGLang 0.5.23's decode server under PD disaggregation, driven on CPU one loop iteration at a time,
against chunksim's model of it (policies/sglang_pd.py) in the reference loop.

SGLang side: ``event_loop_normal_disagg_decode`` or ``event_loop_overlap_disagg_decode`` (batch
n + 1 launched, then batch n's result processed; sglang/srt/disaggregation/decode.py) around
SGLang's own ``DecodePreallocQueue`` / ``DecodeTransferQueue`` (sglang_pd_queues.py builds them),
``resume_retracted_reqs``, ``release_req`` (its KV backed up as ``cpu_tensor``) and the paged
allocator. The glue below is what SGLang keeps on ``Scheduler`` / ``ScheduleBatch`` (whose
constructors need a model): ``process_decode_queue``, ``_get_new_prebuilt_batch`` with
``process_batch_result_prebuilt``, ``update_running_batch``; the decode bookkeeping
(``check_decode_mem``, ``retract_decode``, the result processing) is sglang_engine.py's. A
transfer completes ``delay`` iterations-with-a-batch after its preallocation (``HeldReceiver``),
or at once under the ``fake`` backend (``FakeKVReceiver``, unmodified).

chunksim side: one ``SteppingReplica`` over UnitCost (a step lasts 1 s), its transfers completing
after the same delays. A record, per step start: ({rid: tokens}, retracted rids, finished rids,
queues), the queues (prealloc, transfer, waiting, running, retracted, each in order) as each side
stands when its batch is formed.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from .sglang_engine import OUTPUT_TOKEN_BASE, Knobs, SGLangEngine, _Batch
from .sglang_pd_queues import DecodeQueues


@dataclass
class PDScenario:
    """One decode server and its requests: (arrival step, prompt length, max_new_tokens), and each
    transfer's length in steps (0 under the fake backend)."""

    name: str
    pool_tokens: int
    page_size: int
    max_running: int
    extra_slots: int
    reserved: int
    fake: bool
    requests: list
    delays: list
    overlap: bool = False  # event_loop_overlap_disagg_decode (SGLang's default) instead of the normal loop


CONFIGS = {  # name: (page size, max running, extra slots, reserved decode tokens, pool, fake backend, overlap)
    "p1-ample": (1, 16, 0, 512, "ample", False, False),
    "p1-tight": (1, 16, 0, 32, "tight", False, False),
    "p16-ample": (16, 16, 0, 512, "ample", False, False),
    "p16-tight": (16, 16, 0, 32, "tight", False, False),
    "p1-small-batch": (1, 4, 8, 64, "tight", False, False),
    "p16-small-batch": (16, 4, 8, 16, "tight", False, False),
    "fake-p1-tight": (1, 8, 16, 16, "tight", True, False),
    "overlap-p1-ample": (1, 16, 0, 512, "ample", False, True),
    "overlap-p1-tight": (1, 16, 0, 32, "tight", False, True),
    "overlap-p16-tight": (16, 16, 0, 32, "tight", False, True),
    "overlap-p16-small-batch": (16, 4, 8, 16, "tight", False, True),
    "overlap-fake-p1-tight": (1, 8, 16, 16, "tight", True, True),
}


def random_scenario(config: str, seed: int) -> PDScenario:
    page, running, extra, reserved, size, fake, overlap = CONFIGS[config]
    rng = np.random.default_rng([seed, sum(map(ord, config))])
    n = int(rng.integers(3, 25))
    span = int(rng.integers(1, 80))
    reqs = []
    for _ in range(n):
        prompt = int(rng.integers(1, 1200)) if rng.random() < 0.8 else int(rng.integers(1, 40))
        out = int(rng.integers(1, 160)) if rng.random() < 0.9 else 1
        reqs.append((int(rng.integers(0, span)), prompt, out))
    longest = max(p + o for _, p, o in reqs)
    if size == "ample":
        tokens = int(sum(p + o for _, p, o in reqs) + reserved * (n + 2) + page * n)
    else:
        tokens = int(longest + reserved + page + rng.integers(0, max(longest, 2 * reserved)))
    tokens = -(-tokens // page) * page
    delays = [0 if fake else int(rng.integers(1, 31)) for _ in reqs]
    return PDScenario(f"{config}/{seed}", tokens, page, running, extra, reserved, fake, reqs, delays, overlap)


class PDDecodeEngine(SGLangEngine):
    """Scheduler.event_loop_{normal,overlap}_disagg_decode over SGLang's decode queues; the decode itself
    is SGLangEngine's (check_decode_mem, retract_decode, _prepare_for_decode, _process_decode)."""

    def __init__(self, sc: PDScenario):
        longest = max(p + o for _, p, o in sc.requests)
        self.q = DecodeQueues(
            sc.pool_tokens, sc.max_running, sc.reserved, sc.page_size, sc.extra_slots, longest + 2 * sc.page_size
        )
        self.sg, self.alloc, self.r2t, self.tree = self.q.sg, self.q.alloc, self.q.r2t, self.q.tree
        self.k = Knobs(sc.pool_tokens, page_size=sc.page_size, max_running_requests=sc.max_running)
        self.overlap, self.fake = sc.overlap, sc.fake
        self.sched = self.q.scheduler
        self.sched.enable_overlap = sc.overlap  # resume_retracted_reqs then syncs the streams (stood in)
        self.sched.schedule_stream = types.SimpleNamespace(wait_stream=lambda stream: None)
        self.sched.forward_stream = None
        self.running = self.sched.running_batch = _Batch()
        self._sampled: dict = {}
        self.result_queue: list = []  # overlap: (the launched batch's requests, its step), unprocessed
        self.done: list = []  # (step, rids) finished by a result processed in the last iteration
        self.clock = 0

    def add(self, rid: str, prompt_len: int, max_new_tokens: int) -> None:
        """Scheduler._add_request_to_queue: to the prealloc queue."""
        self._sampled[rid] = OUTPUT_TOKEN_BASE + len(self._sampled)
        self.q.add(rid, prompt_len, max_new_tokens, hold=not self.fake)

    def iterate(self):
        """One loop iteration: (rids preallocated, batch or None, retracted, finished, queues); a
        decode result's finishes go to ``done`` with their step. event_loop_overlap_disagg_decode:
        the batch is launched, then the last one's result processed (pop_and_process)."""
        pre_rids, finished = self.process_decode_queue(), []
        new = self._get_new_prebuilt_batch()
        for req in new:  # process_batch_result_prebuilt, then filter_batch and merge_batch
            req.update_finish_state()
            if req.finished():
                self.sg.common.release_kv_cache(req, self.tree, checkpoint=True)
                finished.append(req.rid)
        self.running.reqs += [r for r in new if not r.finished()]
        retracted: list = []
        self.filtered = 0
        batch = self.update_running_batch_pd(retracted) if self.running.reqs else None
        queues = self.queues() if batch is not None else None
        self.processed = False
        if batch is not None:  # run_batch, then process_batch_result (decode) or queue it
            from sglang.srt.model_executor.forward_batch_info import ForwardMode

            batch.forward_mode = ForwardMode.DECODE  # prepare_for_decode; _allocatable_token_budgets reads it
            self.result_queue.append((list(batch.reqs), self.clock))
        if self.result_queue and (not self.overlap or self.sched.last_batch is not None):
            reqs, step = self.result_queue.pop(0)
            rec = types.SimpleNamespace(finished=[])
            self._process_decode(reqs, rec)  # overlap: a finished or retracted request's token is dropped
            self.done.append((step, rec.finished))
            self.processed = batch is None
        self.sched.last_batch = batch
        return pre_rids, batch, retracted, finished, queues

    def process_decode_queue(self) -> list:
        """Scheduler.process_decode_queue (polling interval 1, no host receive): resume retracted
        requests; while any is left, nothing else; else preallocate, then poll the transfers."""
        pq, tq, sched = self.q.prealloc, self.q.transfer, self.sched
        sched.waiting_queue.extend(pq.resume_retracted_reqs())
        if pq.retracted_queue:
            return []
        pre, _failed = pq.pop_preallocated()
        tq.extend(pre)
        sched.waiting_queue.extend(tq.pop_transferred())
        return [d.req.rid for d in pre]

    def _get_new_prebuilt_batch(self) -> list:
        """Scheduler._get_new_prebuilt_batch: the waiting queue's head, up to min(req_to_token rows,
        max_running_requests) less the running batch; prepare_for_prebuilt and process_prebuilt's
        bookkeeping (the radix cache is off on a decode server)."""
        waiting = self.sched.waiting_queue
        room = min(self.r2t.size, self.k.max_running_requests) - len(self.running.reqs)
        take = waiting[: max(room, 0)]
        self.sched.waiting_queue = waiting[max(room, 0) :]
        for req in take:
            req.init_next_round_input(self.tree)
            if req.kv.kv_committed_len is not None:
                req.extend_end = req.kv.kv_committed_len
            req.is_retracted = False
            self.sg.common.checkpoint_kv_cache(req, self.tree)
        return take

    def update_running_batch_pd(self, retracted: list):
        """Scheduler.update_running_batch without overlap: the finished leave; retract when the next
        decode does not fit (each retracted request to the prealloc queue's retracted queue,
        _add_request_to_queue(is_retracted=True)); then the decode's slots."""
        batch = self.running
        before = len(batch.reqs)
        batch.filter_batch()
        self.filtered = before - len(batch.reqs)
        if batch.is_empty():
            return None
        if not self.check_decode_mem(batch.reqs):
            out, _ratio = self.retract_decode(batch)
            for req in out:
                self.q.prealloc.add(req, is_retracted=True)
                retracted.append(req.rid)
        self._prepare_for_decode(batch)
        return batch

    def queues(self) -> tuple:
        pq, tq = self.q.prealloc, self.q.transfer
        return (
            tuple(int(d.req.rid) for d in pq.queue),
            tuple(int(d.req.rid) for d in tq.queue),
            tuple(int(r.rid) for r in self.sched.waiting_queue),
            tuple(int(r.rid) for r in self.running.reqs),
            tuple(int(r.rid) for r in pq.retracted_queue),
        )

    @property
    def busy(self) -> bool:
        pq = self.q.prealloc
        return bool(
            pq.queue
            or pq.retracted_queue
            or self.q.transfer.queue
            or self.sched.waiting_queue
            or self.running.reqs
            or self.result_queue
        )


def _put(records: dict, t: int, tokens=None, retracted=(), finished=(), queues=None) -> None:
    rec = records.setdefault(t, [{}, [], [], None])
    rec[0].update(tokens or {})
    rec[1].extend(retracted)
    rec[2].extend(finished)
    if queues is not None:
        rec[3] = queues


def _frozen(records: dict) -> dict:
    return {t: (dict(sorted(a.items())), sorted(b), sorted(c), d) for t, (a, b, c, d) in records.items()}


def run_sglang_pd(sc: PDScenario, max_iterations: int = 100_000) -> dict:
    """SGLang's records: arrivals join at their step; a held transfer is released `delay` steps
        after its preallocation; an iteration that runs nothing but finished a request is followed
        by another at once (SGLang's loop spins), and so is one whose running batch lost its finished
    requests (filter_batch: the next preallocation's budget no longer counts them), else time jumps to the next arrival or release."""
    eng = PDDecodeEngine(sc)
    pending = sorted(((a, i, p, o) for i, (a, p, o) in enumerate(sc.requests)), reverse=True)
    due: dict = {}
    records: dict = {}
    clock = 0
    for _ in range(max_iterations):
        while pending and pending[-1][0] <= clock:
            _, i, p, o = pending.pop()
            eng.add(str(i), p, o)
        for rid in [r for r, t in due.items() if t <= clock]:
            eng.q.release(rid)
            del due[rid]
        eng.clock = clock
        pre, batch, retracted, finished, queues = eng.iterate()
        for rid in pre:
            if not sc.fake:
                due[rid] = clock + sc.delays[int(rid)]
        for step, rids in eng.done:
            _put(records, step, finished=[int(r) for r in rids])
        eng.done.clear()
        fin = [int(r) for r in finished]
        if batch is not None:
            _put(records, clock, {int(r.rid): 1 for r in batch.reqs}, [int(r) for r in retracted], fin, queues)
            clock += 1
            continue
        if fin or eng.filtered or eng.processed:  # the loop spins: its next iteration sees what changed
            if fin:
                _put(records, clock, finished=fin)
            continue
        later = [t for t in due.values() if t > clock] + ([pending[-1][0]] if pending else [])
        if not later:
            if eng.busy:
                raise RuntimeError(f"{sc.name}: SGLang runs nothing and nothing is due (stuck)")
            return _frozen(records)
        clock = min(later)
    raise RuntimeError(f"{sc.name}: SGLang did not drain in {max_iterations} iterations")


class _Recorder:
    """Wraps the policy: every plan's time, items, retractions, landed finishes and queues."""

    def __init__(self, policy, env):
        self._policy, self._env, self.plans = policy, env, []

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def schedule(self, s):
        plan = self._policy.schedule(s)
        q, pol = s.connector, self._policy
        queues = (
            tuple(r.rid for r in s.waiting),
            tuple(r.rid for r in q.transfer),
            tuple(r.rid for r in q.landed),
            tuple(r.rid for r in pol.batch),
            tuple(r.rid for r in q.retracted),
        )
        done = [  # finished on landing (a late finish under the overlap has decoded: its step records it)
            r.rid
            for r in plan.landed or ()
            if r.num_output_tokens >= r.output_len and r.num_computed_tokens == r.prompt_len
        ]
        self.plans.append((int(self._env.now), plan, [r.rid for r in plan.preempted], done, queues))
        return plan


class StepTransfers:
    """chunksim's transfers in the harness: a load completes `delays[rid]` after its schedule()."""

    def __init__(self, env, delays):
        self.env, self.delays = env, delays

    def loads_started(self, replica, reqs, now: float) -> None:
        for r in reqs:
            self.env.at(now + self.delays[r.rid]).callbacks.append(lambda _e, r=r: replica.kv.received(r))


def sglang_pd_flags(sc: PDScenario) -> dict:
    """The scenario as SGLang's server args (engine flags), for build_engine."""
    return dict(
        disaggregation_mode="decode",
        disaggregation_transfer_backend="fake" if sc.fake else "mooncake",
        disable_overlap_schedule=not sc.overlap,
        disable_radix_cache=True,
        page_size=sc.page_size,
        max_total_tokens=sc.pool_tokens,
        max_running_requests=sc.max_running,
        num_reserved_decode_tokens=sc.reserved,
        disaggregation_decode_extra_slots=sc.extra_slots,
    )


def run_chunksim_pd(sc: PDScenario, ablation=None) -> dict:
    """chunksim's records; `ablation`: a subclass of the policy with one rule broken."""
    from costmodel import load_hardware, load_model
    from experiments.engines import build_engine
    from policies.base import SchedulerState
    from simcore.clock import LATE, ExactEnvironment
    from simcore.request import Request
    from simcore.stepping import SteppingReplica

    from .unit_cost import UnitCost

    built, pool, _, _ = build_engine(
        "sglang", load_model("llama-3.1-8b"), load_hardware("h100"), flags=sglang_pd_flags(sc)
    )
    assert pool.total * pool.block_size == sc.pool_tokens, "the pool is not the scenario's"
    env = ExactEnvironment()
    rec = _Recorder(ablation(built.cfg, built.pd) if ablation else built, env)
    finished: list = []
    rep = SteppingReplica(env, 0, rec, SchedulerState(pool), UnitCost(), finished.append, True, True)
    rep.transfers = StepTransfers(env, sc.delays)
    reqs = [Request(i, float(a), p, o) for i, (a, p, o) in enumerate(sc.requests)]

    def arrivals():
        for r in sorted(reqs, key=lambda r: (r.arrival_s, r.rid)):
            if r.arrival_s > env.now:
                yield env.at(r.arrival_s, LATE)
            rep.submit(r)

    env.process(arrivals())
    env.run()
    assert len(finished) == len(reqs), f"{len(reqs) - len(finished)} requests never finished"
    assert pool.used == 0, "KV pages not returned"
    records: dict = {}
    for t, plan, retracted, done, queues in rec.plans:
        if plan.items:
            fin = [r.rid for r, _ in plan.items if r.finish_s == t + 1]
            _put(records, t, {r.rid: n for r, n in plan.items}, retracted, done + fin, queues)
        elif done or retracted:
            _put(records, t, retracted=retracted, finished=done)
    return _frozen(records)


def first_divergence(a: dict, b: dict) -> str | None:
    if a == b:
        return None
    for t in sorted(set(a) | set(b)):
        if a.get(t) != b.get(t):
            return f"step {t}: sglang {a.get(t)} / chunksim {b.get(t)}"
    return "differ"


def compare_pd(sc: PDScenario, ablation=None) -> tuple[str | None, dict]:
    """(first divergence or None, SGLang's records)."""
    ref = run_sglang_pd(sc)
    return first_divergence(ref, run_chunksim_pd(sc, ablation)), ref


def ablations() -> dict:
    """chunksim's policy with one rule broken each, to show the harness catches it."""
    from policies.sglang_pd import SGLangPDDecode

    class FinishedNotCounted(SGLangPDDecode):
        """The budget and the prebuilt room without the requests that finished in the last step."""

        def schedule(self, s):
            self.batch = [r for r in self.batch if r.num_output_tokens < r.output_len]
            return super().schedule(s)

    class NoRetractedGate(SGLangPDDecode):
        """Preallocates and polls while retracted requests wait to resume."""

        def _resume_retracted(self, s, q):
            super()._resume_retracted(s, q)
            self._held, q.retracted = q.retracted, []

        def _pop_transferred(self, q):
            super()._pop_transferred(q)
            q.retracted = self._held

    class NoReserve(SGLangPDDecode):
        """num_reserved_decode_tokens not held per active request."""

        def __init__(self, cfg, pd):
            super().__init__(cfg, pd)
            self.reserve = 0

    class SkipFinishing(SGLangPDDecode):
        """Overlap: a request finishing in flight is not decoded again (as the colocated overlap loop,
        whose enable_skip_finishing_decode the decode server's loop does not set)."""

        def _decode(self, s, q, plan):
            self.batch = [r for r in self.batch if r not in q.finishing]
            super()._decode(s, q, plan)

    return {
        "finished-not-counted": FinishedNotCounted,
        "no-retracted-gate": NoRetractedGate,
        "no-reserve": NoReserve,
        "skip-finishing": SkipFinishing,
    }
