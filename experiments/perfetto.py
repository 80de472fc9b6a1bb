"""A run as a Chrome/Perfetto trace (Trace Event Format JSON, loads in ui.perfetto.dev).

One process per replica. Its "iterations" thread has one complete ("X") slice per forward pass
with the pass's composition and cost breakdown in args; its requests are nestable async slices
("b"/"e", one id per request): request ⊃ queued, prefilling, decoding. Timestamps are µs of
simulated time. Fast-forwarded decode passes carry the breakdown of their entry's first step.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .iterlog import replay

US = 1e6


def _meta(pid: int, name: str, tid: int | None = None) -> dict:
    if tid is None:
        return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def iteration_events(result) -> list[dict]:
    cms = [r.cm for r in result.replicas]
    events = []
    for e in replay(result.iterations, cms):
        bd = cms[e.replica].breakdown(cms[e.replica].shape(e.q_lens, e.kv_lens)) if cms else None
        args = {"prefill_tokens": e.prefill_tokens, "decode_tokens": e.decode_tokens, "sequences": len(e.rids),
                "steps_in_entry": e.steps}
        if bd is not None:
            args["cost_ms"] = {op.name: op.time_s * 1e3 for op in bd.operators}
        name = "prefill+decode" if e.prefill_tokens and e.decode_tokens else "prefill" if e.prefill_tokens else "decode"
        start = e.start_s
        for j, end in enumerate(e.ends):
            events.append({"ph": "X", "name": name, "cat": "iteration", "pid": e.replica + 1, "tid": 0,
                           "ts": start * US, "dur": (end - start) * US, "args": {**args, "step": j}})
            start = float(end)
    return events


def request_events(requests) -> list[dict]:
    events = []
    for r in requests.itertuples():
        pid = int(r.replica) + 1
        if isinstance(r.rejected, str):
            events.append({"ph": "i", "s": "t", "name": "rejected", "cat": "request", "pid": pid, "tid": 1,
                           "ts": r.arrival_s * US, "args": {"rid": int(r.rid), "reason": r.rejected}})
            continue
        marks = [r.arrival_s, r.first_scheduled_s, r.first_token_s, r.finish_s]
        if any(m is None or (isinstance(m, float) and math.isnan(m)) for m in marks):
            continue
        base = {"cat": "request", "pid": pid, "tid": 0, "id": int(r.rid)}
        args = {"rid": int(r.rid), "prompt_len": int(r.prompt_len), "output_len": int(r.output_len),
                "preemptions": int(r.num_preemptions)}
        events.append({**base, "ph": "b", "name": f"request {r.rid}", "ts": marks[0] * US, "args": args})
        for name, a, b in zip(("queued", "prefilling", "decoding"), marks, marks[1:]):
            events.append({**base, "ph": "b", "name": name, "ts": a * US})
            events.append({**base, "ph": "e", "name": name, "ts": b * US})
        events.append({**base, "ph": "e", "name": f"request {r.rid}", "ts": marks[-1] * US})
    return events


def chrome_trace(result) -> dict:
    """Needs a run with ``record_iterations=True``."""
    if result.iterations is None and result.summary.get("num_iterations"):
        raise ValueError("the run kept no iteration log: simulate with record_iterations=True")
    n = max(len(result.replicas), int(result.requests.replica.max()) + 1 if len(result.requests) else 1)
    meta = []
    for i in range(n):
        meta += [_meta(i + 1, f"replica {i}"), _meta(i + 1, "iterations", 0), _meta(i + 1, "rejected", 1)]
    return {"traceEvents": meta + iteration_events(result) + request_events(result.requests),
            "displayTimeUnit": "ms", "otherData": {"generator": "chunksim", "time": "simulated"}}


def write_trace(result, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(result)))
    return path
