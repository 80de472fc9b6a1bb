"""A run as a Chrome/Perfetto trace (Trace Event Format JSON, loads in ui.perfetto.dev).

One process per replica. Its "iterations" thread has one complete ("X") slice per iteration-log
entry: a forward pass, or a fast-forwarded run of ``steps`` decode passes (args: steps, and the
tokens of each of its passes). Its requests are nestable async slices ("b"/"e", one id per
request): request ⊃ queued, prefilling, decoding. Timestamps are µs of simulated time.

Sized to what it shows, within ``max_bytes`` (default 100 MiB): the operator cost breakdown
rides on at most ``MAX_BREAKDOWNS`` slices spread over the run (costing each pass is slower than
the simulation); past the budget, requests are sampled (every k-th rid, said in ``otherData``)
and then consecutive passes of a replica merged into one slice each of ``merged`` entries.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

US = 1e6
MAX_BYTES = 100 * 2**20
MAX_BREAKDOWNS = 2000
BYTES_PER_SLICE, BYTES_PER_BREAKDOWN, BYTES_PER_REQUEST = 260, 900, 900  # measured on this module's output


def _meta(pid: int, name: str, tid: int | None = None) -> dict:
    if tid is None:
        return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _name(pre: int, dec: int) -> str:
    return "prefill+decode" if pre and dec else "prefill" if pre else "decode"


def iteration_events(result, passes=None, merge: int = 1, breakdowns: int = MAX_BREAKDOWNS) -> list[dict]:
    """One slice per log entry, or per ``merge`` consecutive entries of a replica."""
    from .run_plots import pass_table

    cms = [r.cm for r in result.replicas]
    p = passes if passes is not None else pass_table(result)[0]
    if not len(p):
        return []
    events = []
    if merge > 1:
        p = p.sort_values(["replica", "start_s"], kind="stable").reset_index(drop=True)
        group = (p.groupby("replica").cumcount() // merge).to_numpy()
        g = (
            p.assign(g=group, pt=p.prefill_tokens * p.steps, dt=p.decode_tokens * p.steps)
            .groupby(["replica", "g"], sort=False)
            .agg(
                start_s=("start_s", "min"),
                end_s=("end_s", "max"),
                steps=("steps", "sum"),
                entries=("steps", "size"),
                pt=("pt", "sum"),
                dt=("dt", "sum"),
                seq=("sequences", "max"),
            )
            .reset_index()
        )
        for r in g.itertuples(index=False):
            events.append(
                {
                    "ph": "X",
                    "name": f"{r.entries} entries",
                    "cat": "iteration",
                    "pid": int(r.replica) + 1,
                    "tid": 0,
                    "ts": r.start_s * US,
                    "dur": (r.end_s - r.start_s) * US,
                    "args": {
                        "steps": int(r.steps),
                        "entries": int(r.entries),
                        "prefill_tokens": int(r.pt),
                        "decode_tokens": int(r.dt),
                        "max_sequences": int(r.seq),
                    },
                }
            )
        return events
    costed = set(np.linspace(0, len(p) - 1, min(breakdowns, len(p))).astype(np.int64).tolist()) if cms else set()
    entries = None
    if costed:
        from .iterlog import replay

        entries = replay(result.iterations, cms)  # the same order as pass_table's rows
    for i, r in enumerate(p.itertuples(index=False)):
        e = next(entries) if entries is not None else None
        args = {
            "prefill_tokens": int(r.prefill_tokens),
            "decode_tokens": int(r.decode_tokens),
            "sequences": int(r.sequences),
            "steps": int(r.steps),
        }
        if i in costed:
            cm = cms[e.replica]
            args["cost_ms"] = {op.name: op.time_s * 1e3 for op in cm.breakdown(cm.shape(e.q_lens, e.kv_lens)).operators}
        name = _name(r.prefill_tokens, r.decode_tokens)
        events.append(
            {
                "ph": "X",
                "name": name if r.steps == 1 else f"{name} ×{r.steps}",
                "cat": "iteration",
                "pid": int(r.replica) + 1,
                "tid": 0,
                "ts": r.start_s * US,
                "dur": (r.end_s - r.start_s) * US,
                "args": args,
            }
        )
    return events


def request_events(requests, every: int = 1) -> list[dict]:
    events = []
    df = requests if every == 1 else requests[requests.rid % every == 0]
    for r in df.itertuples():
        pid = int(r.replica) + 1
        if isinstance(r.rejected, str):
            events.append(
                {
                    "ph": "i",
                    "s": "t",
                    "name": "rejected",
                    "cat": "request",
                    "pid": pid,
                    "tid": 1,
                    "ts": r.arrival_s * US,
                    "args": {"rid": int(r.rid), "reason": r.rejected},
                }
            )
            continue
        marks = [r.arrival_s, r.first_scheduled_s, r.first_token_s, r.finish_s]
        if any(m is None or (isinstance(m, float) and math.isnan(m)) for m in marks):
            continue
        base = {"cat": "request", "pid": pid, "tid": 0, "id": int(r.rid)}
        args = {
            "rid": int(r.rid),
            "prompt_len": int(r.prompt_len),
            "output_len": int(r.output_len),
            "preemptions": int(r.num_preemptions),
        }
        events.append({**base, "ph": "b", "name": f"request {r.rid}", "ts": marks[0] * US, "args": args})
        for name, a, b in zip(("queued", "prefilling", "decoding"), marks, marks[1:]):
            events.append({**base, "ph": "b", "name": name, "ts": a * US})
            events.append({**base, "ph": "e", "name": name, "ts": b * US})
        events.append({**base, "ph": "e", "name": f"request {r.rid}", "ts": marks[-1] * US})
    return events


def plan(n_entries: int, n_requests: int, max_bytes: int = MAX_BYTES, breakdowns: int = MAX_BREAKDOWNS) -> dict:
    """Request sampling stride and pass merging that keep the estimated size within ``max_bytes``."""
    fixed = min(breakdowns, n_entries) * BYTES_PER_BREAKDOWN
    slices = n_entries * BYTES_PER_SLICE
    every, merge = 1, 1
    if fixed + slices + n_requests * BYTES_PER_REQUEST > max_bytes:
        room = max(max_bytes // 2, max_bytes - fixed - slices)  # requests get at least half the budget
        every = max(1, math.ceil(n_requests * BYTES_PER_REQUEST / room))
        left = max_bytes - math.ceil(n_requests / every) * BYTES_PER_REQUEST
        if fixed + slices > left:
            merge = max(2, math.ceil(n_entries * BYTES_PER_SLICE / max(left, 1)))
    return {
        "request_every": every,
        "merge_entries": merge,
        "estimated_bytes": (fixed if merge == 1 else 0)
        + math.ceil(n_entries / merge) * BYTES_PER_SLICE
        + math.ceil(n_requests / every) * BYTES_PER_REQUEST,
    }


def chrome_trace(result, max_bytes: int = MAX_BYTES, passes=None) -> dict:
    """Needs a run with ``record_iterations=True``."""
    if result.iterations is None and result.summary.get("num_iterations"):
        raise ValueError("the run kept no iteration log: simulate with record_iterations=True")
    from .run_plots import pass_table

    p = passes if passes is not None else pass_table(result)[0]
    how = plan(len(p), len(result.requests), max_bytes)
    n = max(len(result.replicas), int(result.requests.replica.max()) + 1 if len(result.requests) else 1)
    meta = []
    for i in range(n):
        meta += [_meta(i + 1, f"replica {i}"), _meta(i + 1, "iterations", 0), _meta(i + 1, "rejected", 1)]
    events = iteration_events(result, p, how["merge_entries"]) + request_events(result.requests, how["request_every"])
    shown = int((result.requests.rid % how["request_every"] == 0).sum())
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "chunksim",
            "time": "simulated",
            "requests": len(result.requests),
            "requests_shown": shown,
            "request_sampling": f"every {how['request_every']}th rid",
            "log_entries": len(p),
            "entries_per_slice": how["merge_entries"],
            "cost_breakdowns": f"on at most {MAX_BREAKDOWNS} slices, evenly spread",
        },
    }


def write_trace(result, path, max_bytes: int = MAX_BYTES, passes=None) -> tuple[Path, dict]:
    """Writes the trace; returns its path and ``otherData`` with ``bytes`` added."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    trace = chrome_trace(result, max_bytes, passes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))
    return path, {**trace["otherData"], "bytes": path.stat().st_size}
