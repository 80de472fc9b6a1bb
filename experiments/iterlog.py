"""Replays a run's iteration log: what each forward pass held, and when each request's tokens came.

The log keeps (replica, start_s, end_s, steps, plan) and the plans hold the requests as they ended
the run, so the replay re-derives every request's (num_computed_tokens, num_output_tokens) before
each pass the way the replica advanced them. A fast-forwarded entry (steps > 1) is `steps`
decode-only passes; given the run's cost model their end times are recomputed exactly
(``CostModel.decode_run``), else they are spread evenly over the entry.
Prefix-cache hits are taken from each request's final ``num_cached_tokens`` at its first pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class Entry:
    replica: int
    start_s: float
    ends: np.ndarray  # end of each step, seconds
    rids: list  # request ids in batch order
    q_lens: list  # new tokens per sequence, first step
    kv_lens: list  # tokens already in KV per sequence, first step
    decode: list  # per sequence: True when its token is a decode
    sampled: list  # per sequence: True when the pass samples a token for it

    @property
    def steps(self) -> int:
        return len(self.ends)

    @property
    def prefill_tokens(self) -> int:
        return int(sum(q for q, d in zip(self.q_lens, self.decode) if not d))

    @property
    def decode_tokens(self) -> int:
        return int(sum(self.decode))


def replay(log, cm=None):
    """Yields one ``Entry`` per log entry, replicas one after another, each in time order.
    ``cm``: the run's CostModel, or a list of them indexed by replica (``Result.replicas[i].cm``)."""
    computed, outputs = {}, {}
    for replica, start, end, steps, plan in sorted(log or [], key=lambda e: (e[0], e[1])):
        for r in plan.preempted:
            computed[r.rid] = 0
        rids, q, kv, dec, samp = [], [], [], [], []
        for req, n in plan.items:
            c = computed.get(req.rid, req.num_cached_tokens)
            out = outputs.get(req.rid, 0)
            total = req.prompt_len + out
            rids.append(req.rid)
            q.append(n)
            kv.append(c)
            dec.append(n == 1 and out > 0 and c == total - 1)
            samp.append(c + n >= total)
            if c + n >= total:
                outputs[req.rid] = out + steps
                computed[req.rid] = c + n + steps - 1
            else:
                computed[req.rid] = c + n
        model = cm[replica] if isinstance(cm, (list, tuple)) else cm
        yield Entry(replica, start, _ends(start, end, steps, kv, model), rids, q, kv, dec, samp)


def _ends(start: float, end: float, steps: int, kv: list, cm) -> np.ndarray:
    if steps == 1:
        return np.array([end])
    if cm is not None:
        ends = np.cumsum(np.concatenate(([start], cm.decode_run(len(kv), float(sum(c + 1 for c in kv)), steps))))[1:]
        if abs(ends[-1] - end) <= 1e-9 * max(1.0, end):
            return ends
    return np.linspace(start, end, steps + 1)[1:]


def iteration_frame(log, cm=None) -> pd.DataFrame:
    """One row per forward pass: replica, start_s, end_s, prefill_tokens, decode_tokens, sequences, fast_forwarded."""
    rows = []
    for e in replay(log, cm):
        starts = np.r_[e.start_s, e.ends[:-1]]
        for s, t in zip(starts, e.ends):
            rows.append((e.replica, float(s), float(t), e.prefill_tokens, e.decode_tokens, len(e.rids), e.steps > 1))
    return pd.DataFrame(
        rows, columns=["replica", "start_s", "end_s", "prefill_tokens", "decode_tokens", "sequences", "fast_forwarded"]
    )


def token_times(log, rids, cm=None) -> dict:
    """rid -> times (seconds) of its sampled tokens, for the requests asked for."""
    want = set(rids)
    out = {r: [] for r in rids}
    for e in replay(log, cm):
        for rid, s in zip(e.rids, e.sampled):
            if s and rid in want:
                out[rid].extend(e.ends.tolist())
    return {r: np.asarray(t) for r, t in out.items()}
