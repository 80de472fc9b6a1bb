"""Drive vLLM 0.33's Scheduler / AsyncScheduler with a KV connector, and chunksim's vLLM policy with
one, through one PD scenario (vllm_pd_scenarios.py) and compare them step by step.

vLLM side: the scheduler of vllm_driver.py with ``kv_transfer_config`` naming the stand-in
connector (vllm_pd_connector.py, loaded through ``kv_connector_module_path``); requests carry
``kv_transfer_params``. The harness steps as EngineCore does: sync, schedule then update
(EngineCore.step); async, two batches in flight, schedule n+1 before the update of step n
(step_with_batch_queue), with the config's async flag on as on a GPU, so that a consumer
connector defers block frees. A step's output carries the completions due by its end
(``KVConnectorOutput.finished_recving`` / ``finished_sending``), as the worker's connector
reports them; an empty step's output is processed when it is made; when the latest schedule()
ran and changed nothing, time jumps to the next arrival or completion and that output carries
the completions due by then.

chunksim side: one ``SteppingReplica`` (simcore/stepping.py) over UnitCost (a step lasts 1 s),
its ``transfers`` completing each load / send after the scenario's delay.

A record is, per step start: ({rid: tokens}, preempted rids, finished rids), as vllm_driver's."""

from __future__ import annotations

import json
from collections import deque

from unit_cost import UnitCost
from vllm_driver import _OUTPUT_TOKEN, _build_scheduler, _make_requests, first_divergence
from vllm_pd_scenarios import PDScenario

CONNECTOR = {
    "kv_connector": "FakeNixlConnector",
    "kv_role": "kv_both",
    "kv_connector_module_path": "vllm_pd_connector",
}


def run_vllm_pd(pd: PDScenario, max_calls: int = 100_000) -> dict:
    from vllm.config import KVTransferConfig
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

    sc = pd.base
    scheduler = _build_scheduler(sc, kv_transfer_config=KVTransferConfig(**CONNECTOR))
    conn = scheduler.connector
    reqs = _make_requests(sc)
    for r, role in zip(reqs, pd.roles):
        if role != "L":
            r.kv_transfer_params = {"do_remote_prefill": True} if role == "D" else {"do_remote_decode": True}
    pending = deque(sorted(zip([a for a, _, _ in sc.requests], reqs), key=lambda x: x[0]))
    records: dict = {}
    recv_due: dict = {}
    send_due: dict = {}
    # steps scheduled, output not processed: (start or None, output, sampled, progressed, scheduled at)
    queue: deque = deque()
    depth = 2 if sc.async_scheduling else 1
    clock = 0
    for _ in range(max_calls):
        while pending and pending[0][0] <= clock:
            scheduler.add_request(pending.popleft()[1])
        if scheduler.has_requests():
            started = len(conn.loads_started)
            out = scheduler.schedule()
            for rid in conn.loads_started[started:]:
                recv_due[rid] = clock + pd.delays[int(rid)]
            tokens = out.total_num_scheduled_tokens
            if tokens or out.preempted_req_ids:
                rec = records.setdefault(clock, ({}, [], []))
                rec[0].update({int(r): n for r, n in out.num_scheduled_tokens.items()})
                rec[1].extend(sorted(int(r) for r in out.preempted_req_ids))
            sampled = [
                [] if scheduler.requests[r].is_prefill_chunk else [_OUTPUT_TOKEN + int(r)]
                for r in out.num_scheduled_tokens
            ]
            progressed = bool(tokens or out.preempted_req_ids or len(conn.loads_started) > started)
            queue.appendleft((clock if tokens else None, out, sampled, progressed, clock))
            if tokens:
                clock += 1
            if len(queue) < depth and (tokens or scheduler.has_requests()):
                continue
        elif not queue:
            if not pending:
                break
            clock = max(clock, pending[0][0])
            continue
        start, out, sampled, progressed, at = queue.pop()
        if start is not None:
            end = start + 1
        elif queue[0][3] if queue else progressed:  # the latest schedule() changed something: again
            end = queue[0][4] if queue else at  # an empty step's output is processed when it is made
        else:  # the latest schedule() ran nothing and changed nothing: idle until the next event
            due = [*recv_due.values(), *send_due.values(), *([pending[0][0]] if pending else [])]
            later = [t for t in due if t > clock]
            if not later and not scheduler.requests:  # the last finish: its ids flushed, all done
                break
            if not later:
                raise RuntimeError(f"{sc.name}: vLLM scheduled nothing and nothing is due (stuck)")
            end = clock = min(later)
        recv = {r for r, t in recv_due.items() if t <= end}
        send = {r for r, t in send_due.items() if t <= end}
        for r in recv:
            del recv_due[r]
        for r in send:
            del send_due[r]
        ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(finished_sending=send or None, finished_recving=recv or None)
            if recv or send
            else None,
        )
        outs = scheduler.update_from_output(out, mro)
        done = sorted(int(o.request_id) for eco in outs.values() for o in eco.outputs if o.finish_reason is not None)
        for rid in done:
            if pd.roles[rid] == "P":
                send_due[str(rid)] = end + pd.delays[rid]
        if done:
            records[start][2].extend(done)
    else:
        raise RuntimeError(f"{sc.name}: vLLM did not drain in {max_calls} scheduler calls")
    return {t: (tok, sorted(p), sorted(f)) for t, (tok, p, f) in records.items()}


class StepTransfers:
    """The harness's transfers on chunksim's side: a load completes `delays[rid]` after the
    schedule() that started it, a send `delays[rid]` after the prefill-side finish."""

    def __init__(self, env, delays):
        self.env, self.delays = env, delays

    def _later(self, t, fn, req) -> None:
        self.env.at(t).callbacks.append(lambda _e: fn(req))

    def loads_started(self, replica, reqs, now: float) -> None:
        for r in reqs:
            self._later(now + self.delays[r.rid], replica.kv.received, r)

    def prefill_finished(self, replica, req, end: float) -> None:
        self._later(end + self.delays[req.rid], replica.kv.sent, req)


def run_chunksim_pd(pd: PDScenario) -> dict:
    from vllm_driver import _Recorder

    from costmodel import load_hardware, load_model
    from experiments.engines import build_engine
    from policies.base import SchedulerState
    from simcore.clock import LATE, ExactEnvironment
    from simcore.request import Request
    from simcore.stepping import SteppingReplica

    sc = pd.base
    flags = sc.engine_flags(
        enable_prefix_caching=False,
        async_scheduling=sc.async_scheduling,
        kv_transfer_config=json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}),
    )
    policy, pool, _, _ = build_engine("vllm", load_model("llama-3.1-8b"), load_hardware("h100"), flags=flags)
    env = ExactEnvironment()
    rec = _Recorder(policy, env)
    finished: list = []
    rep = SteppingReplica(env, 0, rec, SchedulerState(pool), UnitCost(), finished.append, True, True)
    rep.transfers = StepTransfers(env, pd.delays)
    reqs = [
        Request(i, float(a), len(p), m, remote_prefill=role == "D", remote_decode=role == "P")
        for i, ((a, p, m), role) in enumerate(zip(sc.requests, pd.roles))
    ]

    def arrivals():
        for r in sorted(reqs, key=lambda r: r.arrival_s):
            if r.arrival_s > env.now:
                yield env.at(r.arrival_s, LATE)
            rep.submit(r)

    env.process(arrivals())
    env.run()
    assert len(finished) == len(reqs), f"{len(reqs) - len(finished)} requests never finished"
    assert pool.used == 0 and not rep.state.connector.sending, "KV blocks not returned"
    records: dict = {}
    for t, _, pre in rec.plans:
        if pre:
            records.setdefault(int(t), ({}, [], []))[1].extend(pre)
    for _, start, _end, _steps, plan in rep.iteration_log or []:
        records.setdefault(int(start), ({}, [], []))[0].update({r.rid: n for r, n in plan.items})
    for r in reqs:
        records.setdefault(int(r.finish_s) - 1, ({}, [], []))[2].append(r.rid)
    return {t: (tok, sorted(p), sorted(f)) for t, (tok, p, f) in records.items()}


def compare_pd(pd: PDScenario) -> tuple[str | None, dict]:
    """(first divergence or None, vLLM's records)."""
    ref = run_vllm_pd(pd)
    return first_divergence(ref, run_chunksim_pd(pd)), ref
