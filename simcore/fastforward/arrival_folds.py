"""Arrivals folded into a run (functions of a Replica).

A sole replica in open loop knows its arrivals. A folded decode run (simcore/fastforward/runs.py,
``_folded_run``) would end at the first step that starts at or after the next arrival A, for
the plan made then to admit it. When A is the only request then waiting, every running request
decodes, and the policy's hook ``arrival_chunks`` (policies/base.py) can say what that plan and
the ones after it give A (vLLM: ``min(prompt left, budget − decodes)`` a step), the run goes on
instead: A's chunks are a lead in the middle of the run (priced as any lead,
``CostModel.prefill_lead_ends``), A then decodes beside the others until it finishes or the run
ends, and the next arrival is met the same way. A's chunks past the first are taken after the
next arrival only where the hook seals them (a chunk of the whole budget leaves nothing for a
waiting request); the run ends before the first that is not. A queue's head whose whole prompt
fits in what the step leaves (the hook, asked without the queue, gives one chunk) joins with
that chunk not yet taken (``_fold_head``): it is a head, as a cut prompt's last chunk is, and
goes in the step of the next arrival that folds beside it, or back to the queue's front when
none does (``_unfold_head``; the run ends before that step).

KV: every step of the run fits without a release when the blocks held now, plus each of the
run's first sequences growing by at most H // bs + 1 blocks in H steps (the lead's P by its
chunks too), plus every joiner at its full size, are free; else the arrival is not folded (the
run ends there, as before). Then no step preempts and every admission's full-ISL check passes,
as stepping would find.

A joiner is ``(request, step it is admitted in, its chunks)`` in ``rep._joins``; ``_apply``
admits it then (its running-queue stamp follows the order of admission, as stepping's), and
``stop_at`` returns the ones whose step was not reached to the inbox.
"""

from __future__ import annotations

from heapq import heappop, heappush
from operator import itemgetter

import numpy as np


def _seen_by(rep, t: float) -> bool:
    """Whether another event (a stop, a process reading the replica) is due by t: an arrival
    is folded only at a step that starts before anyone could look (pulled requests then have
    arrived, as stepping has them, whenever they are looked at)."""
    return rep.env.due_by(t)


def _finished_joiners(rep, ends, now: float) -> int:
    """Joiners whose last step ended by now (``outstanding`` counts them as finished)."""
    n = 0
    for req, at, chunks in rep._joins:
        last = at + len(chunks) + req.output_len - 2
        if sum(chunks) == req.prompt_len and last < len(ends) and ends[last] <= now:
            n += 1
    return n


def _fold_arrival(
    rep, pos: int, t: float, n: int, kv: int, k: int, held: int, riders: list, i: int, jl: list, ji: int, head=None
):
    """Step `pos`, starting at t, is the first at or after an arrival, with n decodes whose
    Σ(kv + 1) is kv and `held` finished requests still seated. With `head`, (q, kv) pairs,
    some of the n are joiners before (or the plan's P), each taking its last chunk q over kv
    cached in this step (its Σ(kv + 1) counted as kv + q). Returns None when the arrival is not folded, else (lead
    ends, window leavers as (step, request, kind), Σ(kv + 1) and n after the lead, new k, i,
    ji, the joiner's leave step or None, its chunks not taken)."""
    s, inbox = rep.state, rep.inbox
    c, waiting = s.cohort, s.waiting
    if not waiting and not inbox:  # the arrival that cut a joiner's prompt short was rejected
        return None
    req = waiting[0] if waiting else inbox[0]  # the queue's head: the inbox joins the queue behind the waiting
    if req.num_computed_tokens or req.num_output_tokens:
        return None
    queued = len(waiting) + len(inbox) > 1
    extra = sum(q for q, _ in head) - len(head) if head else 0
    chunks, sealed = rep.policy.arrival_chunks(s, req, n, n + held, (), extra, queued)
    if not chunks:
        if queued:  # its whole prompt in this step, the budget left to the next
            return _fold_head(rep, req, pos, n, held, kv, k, riders, i, jl, ji, extra)
        return None
    bs = s.pool.block_size
    L0 = len(chunks)
    window = []  # (step it is not in, base, request, kind): Σ(kv + 1) at step j is base + j
    finish, tick = c.finish, c.tick
    while finish and finish[0][0] - tick < pos + L0:
        f, _, r = heappop(finish)
        window.append((f - tick, r.num_computed_tokens + tick - r.cohort_tick + 1, r, 0))
    nr = len(riders)
    while i < nr and riders[i][0] < pos + L0:
        window.append((riders[i][0], riders[i][2], riders[i][3], 1))
        i += 1
    nj = len(jl)
    while ji < nj and jl[ji][0] < pos + L0:
        window.append((jl[ji][0], jl[ji][1], jl[ji][2], 2))
        ji += 1
    if window:
        window.sort(key=_step)
        chunks, sealed = rep.policy.arrival_chunks(
            s, req, n, n + held, [f - pos for f, _, _, _ in window], extra, queued
        )
    out = req.output_len
    mine = pos + len(chunks) - 1 + out  # the step it is not in
    k2 = max(k, mine, c.last_finish - tick, riders[-1][0] if riders else 0, jl[-1][0] if jl else 0)
    lead = rep._lead
    grow = rep._seqs0 * (k2 // bs + 1)
    if lead is not None:  # the plan's P: by all its prompt left, beyond one token a step
        p = lead[0]
        grow += (p.prompt_len + p.num_output_tokens - p.num_computed_tokens) // bs + 1
    grow += (req.prompt_len + out + bs - 1) // bs + rep._joined_blocks
    if not chunks or grow > rep._free0:
        for f, _, r, kind in window:  # nothing taken: all back where they were
            if kind == 0:
                heappush(finish, (f + tick, r.seq, r))
        i -= sum(1 for x in window if x[3] == 1)
        ji -= sum(1 for x in window if x[3] == 2)
        return None
    waiting.popleft() if waiting else inbox.pop(0)
    stop = t if queued else rep.next_arrival()  # with a request waiting behind, only sealed chunks after the first
    e = rep.cm.prefill_lead_ends(
        n,
        kv - n,
        [0] + chunks,
        0,
        t,
        stop,
        sealed + 1,
        [(f - pos + 1, b + pos - 1) for f, b, _, _ in window] if window else (),
        head or (),
    )
    ran = len(e)
    end = pos + ran
    gone, back_i, back_j = [], 0, 0
    for f, b, r, kind in window:
        if f < end:
            gone.append((f, r, kind))
            kv -= b + end
            n -= 1
        elif kind == 0:
            heappush(finish, (f + tick, r.seq, r))
        elif kind == 1:
            back_i += 1
        else:
            back_j += 1
    i -= back_i
    ji -= back_j
    kv += (n + len(gone)) * ran
    rep._joined_blocks += (req.prompt_len + out + bs - 1) // bs
    rep._joins.append((req, pos, chunks[:ran]))
    leave = None
    if ran == len(chunks):
        n += 1
        kv += req.prompt_len + 1
        leave = end - 1 + out
    return e, gone, kv, n, k2, i, ji, leave, chunks[ran:]


def _fold_head(
    rep, req, pos: int, n: int, held: int, kv: int, k: int, riders: list, i: int, jl: list, ji: int, extra: int
):
    """The queue's head takes its whole prompt in step `pos` and the next in the queue the
    budget left (``arrival_chunks`` without the queue: one chunk). It joins with that chunk
    not taken: the run goes on only if the next one folds beside it as beside a joiner's last
    chunk (``_folded_run``'s `head`), else ``_unfold_head`` puts it back. Same return as
    ``_fold_arrival``'s, with no lead ends."""
    s = rep.state
    chunks, _ = rep.policy.arrival_chunks(s, req, n, n + held, (), extra, False)
    if len(chunks) != 1:
        return None
    c, bs, out = s.cohort, s.pool.block_size, req.output_len
    k2 = max(k, pos + out, c.last_finish - c.tick, riders[-1][0] if riders else 0, jl[-1][0] if jl else 0)
    grow = rep._seqs0 * (k2 // bs + 1) + (req.prompt_len + out + bs - 1) // bs + rep._joined_blocks
    lead = rep._lead
    if lead is not None:
        p = lead[0]
        grow += (p.prompt_len + p.num_output_tokens - p.num_computed_tokens) // bs + 1
    if grow > rep._free0:
        return None
    s.waiting.popleft() if s.waiting else rep.inbox.pop(0)
    rep._joined_blocks += (req.prompt_len + out + bs - 1) // bs
    rep._joins.append((req, pos, []))
    return [], [], kv, n, k2, i, ji, None, chunks


def _unfold_head(rep, req) -> bool:
    """The run ends before `req`'s chunk (the next did not fold beside it): if it was folded
    by ``_fold_head``, it goes back to the queue's front. Returns whether it did."""
    joins = rep._joins
    if not joins or joins[-1][0] is not req or joins[-1][2]:
        return False
    joins.pop()
    rep._joined_blocks -= (req.prompt_len + req.output_len + rep.state.pool.block_size - 1) // rep.state.pool.block_size
    if rep.state.waiting:
        rep.state.waiting.appendleft(req)
    else:
        rep.inbox.insert(0, req)
    return True


def _admit_joins(rep, ends, steps: int, inner, finished: list, marks: list | None = None) -> list:
    """(Called by _apply.) The arrivals folded into the run are admitted at their steps
    and advanced through their chunks, then one token a step until they finish or the run
    ends; each one's own gaps go to the histogram (with the cohort's `marks`, see
    ``weighted_gaps``). Returns them as plan items."""
    s, itl = rep.state, rep.itl
    pool = s.pool
    bs, joins, rep._joins = pool.block_size, rep._joins, []
    if marks is None:
        marks = []
    out, opens, shuts, sampled = (
        [],
        [],
        [],
        [],
    )  # the inner gaps [open, shut) each joiner in sampled samples at both ends of
    for req, at, chunks in joins:
        s.admit(req)
        if req.first_scheduled_s is None:  # else it ran before, preempted before its first token
            req.first_scheduled_s = float(ends[at - 1])
        taken = steps - at
        req.num_computed_tokens = sum(chunks if taken >= len(chunks) else chunks[:taken])
        if req.num_computed_tokens == req.prompt_len:
            e = at + len(chunks) - 1
            mine = min(req.output_len, steps - e)
            req.first_token_s = float(ends[e])
            if mine > 1:
                opens.append(e)
                shuts.append(e + mine - 1)
                sampled.append(req)
                marks += (e, 1, e + mine - 1, -1)
            req.num_computed_tokens += mine - 1
            req.num_output_tokens = mine
            req.last_token_s = float(ends[e + mine - 1])
            if mine >= req.output_len:
                finished.append(req)
        req.num_blocks = -(-req.num_computed_tokens // bs)
        pool.used += req.num_blocks
        out.append((req, 0))
    if marks:
        gaps = weighted_gaps(itl, inner, marks)
        if sampled:
            _joiner_max_itl(gaps, opens, shuts, sampled)
    return out


def weighted_gaps(itl, inner, marks: list) -> np.ndarray:
    """A run's inner gaps into the histogram once, each with its weight (how many requests sample
    at both its ends): `marks` is flattened pairs (gap index, weight change from that gap on).
    Returns the gaps as an array."""
    gaps = np.asarray(inner, dtype=np.float64)
    w = np.add.accumulate(np.bincount(marks[0::2], weights=marks[1::2], minlength=len(gaps) + 1))[:-1]
    m = w > 0
    itl.add_weighted(gaps[m], w[m])
    return gaps


def _joiner_max_itl(gaps: np.ndarray, opens: list, shuts: list, reqs: list) -> None:
    """Joiner reqs[x] samples at both ends of the inner gaps [opens[x], shuts[x]): its largest is
    its max ITL. For those that finished inside the run (shut before the last gap) one
    ``maximum.reduceat`` over their ranges interleaved (every other result is one range's
    maximum; the last index is below len(gaps)); for the others a suffix maximum."""
    last = len(gaps)
    inside = [x for x in range(len(reqs)) if shuts[x] < last]
    if inside:
        idx = np.empty(2 * len(inside), dtype=np.intp)
        idx[0::2] = [opens[x] for x in inside]
        idx[1::2] = [shuts[x] for x in inside]
        for x, top in zip(inside, np.maximum.reduceat(gaps, idx)[0::2].tolist()):
            reqs[x].max_itl_s = top
    if len(inside) < len(reqs):
        suffix = np.maximum.accumulate(gaps[::-1])[::-1]
        rest = [x for x in range(len(reqs)) if shuts[x] >= last]
        for x, top in zip(rest, suffix[[opens[x] for x in rest]].tolist()):
            reqs[x].max_itl_s = top


_step = itemgetter(0)  # a leaver's or joiner's step: the sort key (a C call, not a Python one)
