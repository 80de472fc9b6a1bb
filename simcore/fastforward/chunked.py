"""Runs that start with a chunked prefill (functions of a Replica).

A plan whose last item P is a partial prefill, beside requests that all catch up in this step,
starts a run of P's chunks (its lead) when the policy can tell them in advance: its
fast-forward hook ``prefill_chunks`` (policies/base.py) returns them, or nothing, and the
replica then steps. Step j of the lead is P's chunk q_j over its prefix beside the plan's other
requests and the cohort, one token each (under SGLang nobody else: the decodes sit out a prefill
batch). Each lead step is priced on its own (its prefix-aware attention differs) with the same
integer sums and float additions stepping makes (``CostModel.prefill_lead_ends``).

The lead is cut where the KV blocks run out and, for a sole replica, before the first step that
starts at or after its next arrival unless the hook says the waiting queue cannot change that
step (vLLM: a chunk that takes the whole budget). A decode that finishes inside the lead leaves
it where folding is allowed (open loop, no router reading KV usage; the hook is told from
which steps one decode fewer runs and keeps to the chunks the waiting queue cannot change),
else the lead ends there; a lead with such a finish and requests waiting ends at P's last chunk. When P's prompt
completes and the policy lets decodes repeat, the run goes on as a decode run of everyone,
folded through finishes as any other (simcore/fastforward/runs.py). A lead that stops short of P's last chunk
because a request waits (a sole replica) may hand that chunk over beside the queue head's first
(``_hand_over``, simcore/fastforward/arrival_folds.py).

  P's positions:  [0, c) cached | [c, c + q_0) step 0 | … | [c + Σ_{i<j} q_i, + q_j) step j
  its first token: the end of step L − 1 (L = len(lead)), then one a step.

``_apply`` reads ``rep._lead = (P, [q_0, …, q_{L−1}])``: P's tokens and sample times come from
it; every other request is advanced as in any run; ``policy.on_lead`` is told what P got.
"""

from __future__ import annotations

import math
from heapq import heappop

import numpy as np

from . import arrival_folds, runs


def _chunked_run(rep, plan, start: float):
    """End times of a run that starts with P's chunks (see the module), or None: one step."""
    items, nc, s = plan.items, plan.cohort, rep.state
    c = s.cohort
    everyone = len(items) == len(s.running) and nc == (
        len(c.members) if c is not None else 0
    )  # else the rest sit the lead out
    req, q0 = items[-1]
    if req.num_computed_tokens + q0 >= req.prompt_len + req.num_output_tokens:
        return None
    others = items[:-1]
    first_finish, longest = 1 << 62, 0
    for r, q in others:
        if r.num_computed_tokens + q != r.prompt_len + r.num_output_tokens:
            return None
        left = r.output_len - r.num_output_tokens
        if left < first_finish:
            first_finish = left
        if left > longest:
            longest = left
    if nc and c.finish[0][0] - c.tick < first_finish:
        first_finish = c.finish[0][0] - c.tick
    chunks, sealed = rep.policy.prefill_chunks(s, plan)
    if not chunks:
        return None
    fold = everyone and nc and rep.fold and not s.waiting  # decodes may finish inside the run
    leaves = ()
    if everyone and nc and rep.fold and first_finish <= len(chunks):  # inside the lead even beside a queue
        chunks, sealed, leaves = _lead_leavers(rep, plan, chunks)
        qs = [q0] + chunks
    else:
        qs = [q0] + chunks[: first_finish - 1]  # the batch holds while nobody finishes
    L, total = len(qs), sum(qs)
    completes = req.num_computed_tokens + total == req.prompt_len + req.num_output_tokens
    k = L
    if completes and everyone and rep.policy.can_fast_forward(s):
        mine = L - 1 + req.output_len - req.num_output_tokens  # the step P leaves after
        if fold:
            k = max(c.steps_to_empty(), longest, mine)
        elif leaves:  # a finish freed blocks and a slot the waiting queue may take next
            k = L
        else:
            k = min(first_finish, mine, c.steps_to_finish() if nc else 1 << 62)
    stop = rep.next_arrival() if rep.pull is not None else math.inf
    if k > L + 64 and stop < math.inf:
        k = min(k, L + 64 + 2 * int((stop - start) / rep._step_estimate))
    pool = s.pool
    bs = pool.block_size
    grows = (req.num_computed_tokens + total + k - L + bs - 1) // bs - (req.num_computed_tokens + q0 + bs - 1) // bs
    if (len(others) + nc) * (k // bs + 1) + grows > runs._run_free(rep):  # else every block is free
        kv_items = others + [(req, total - L + 1)]  # P holds c + total + (j − L) positions after step j ≥ L
        k = max(1, runs._kv_limited(rep, kv_items, k, nc, decoding=False))  # the first step's blocks are held
    if k < L:
        qs, L, completes = qs[:k], k, False
    ends = _lead_ends(rep, plan, start, qs, stop, sealed, leaves)
    ran = len(ends)
    rep._lead = (req, qs[:ran] if ran < L else qs)
    gone = ()
    if leaves:
        gone = [x for x in leaves if x[0] < ran]  # left inside the lead as run; the others are still in
        for f, _, _, r in leaves:
            if f >= ran and r.cohort_tick >= 0:
                c.put_back(r)
        rep._leaving += [(f, r) for f, _, _, r in gone]
    if (ran < L or not completes) and rep._folds_arrivals and everyone and nc:  # P's last chunk beside the queue's head
        return _hand_over(rep, plan, start, ends, gone)
    if ran < L or k == L or not completes or (L > 1 and ends[-2] >= stop):
        return ends
    n = len(others) + nc + 1 - len(gone)
    kv = (
        (c.kv + nc if nc else 0) + (len(others) + nc + 1) * L + req.num_computed_tokens + total - L + 1
    )  # Σ(kv + 1) of everyone in step L
    for r, q in others:
        kv += r.num_computed_tokens + q
    for _, _, b, _ in gone:  # type: ignore[var-annotated]
        kv -= b + L
    if fold:
        left = {id(r) for _, _, _, r in gone}  # type: ignore[var-annotated]
        riders = (
            [
                (r.output_len - r.num_output_tokens, r.seq, r.num_computed_tokens + q, r)
                for r, q in others
                if id(r) not in left
            ]
            if others
            else []
        )
        riders.append((mine, req.seq, req.num_computed_tokens + total - L + 1, req))
        return runs._folded_run(rep, start, ends, n, kv, k, riders)
    t = ends[-1]
    if t >= stop:
        return ends
    e = runs._decode_ends(rep, t, n, kv, k - L, stop)
    return ends + e if type(e) is list else np.concatenate([ends, e])


def _hand_over(rep, plan, start: float, ends: list, gone):
    """The lead stopped short of P's last chunk because a request waits (or has just arrived):
    that chunk may go beside the queue head's first, the run going on as a folded one
    (simcore/fastforward/arrival_folds.py), or the run ends here."""
    t, ran, s = ends[-1], len(ends), rep.state
    if arrival_folds._seen_by(rep, t):
        return ends
    rep.pull(t)
    if not s.waiting and not rep.inbox:
        return ends
    c, nc, req = s.cohort, plan.cohort, rep._lead[0]
    tokens = req.prompt_len + req.num_output_tokens
    rest = tokens - req.num_computed_tokens - sum(rep._lead[1])
    left = {id(r) for _, _, _, r in gone}
    kv, riders, longest = c.kv + nc + nc * ran + tokens, [], 0
    for r, q in plan.items[:-1]:
        if id(r) not in left:
            kv += r.num_computed_tokens + q + ran
            riders.append((r.output_len - r.num_output_tokens, r.seq, r.num_computed_tokens + q, r))
            longest = max(longest, r.output_len - r.num_output_tokens)
    mine = ran + req.output_len - req.num_output_tokens
    riders.append((mine, req.seq, tokens - ran, req))
    n = len(riders) + nc
    for _, _, b, r in gone:
        if r.cohort_tick >= 0:  # a member that left inside the lead: no longer in the cohort's sums at step ran
            kv -= b + ran
            n -= 1
    return runs._folded_run(
        rep, start, ends, n, kv, max(c.steps_to_empty(), longest, mine), riders, (rest, tokens - rest, req)
    )


def _lead_leavers(rep, plan, chunks: list):
    """Folding finishes into the lead: the decodes (planned requests, cohort members taken off
    the finish heap) whose last token comes before P's last chunk, and P's chunks asked again
    with one decode fewer from each of their leaving steps on. Returns (chunks, sealed,
    leaves), leaves as (f, seq, base, request), f the first step it is not in, Σ(kv + 1) of
    it at step j being base + j, in step then queue order."""
    c = rep.state.cohort
    L0 = 1 + len(chunks)
    leaves = [
        (r.output_len - r.num_output_tokens, r.seq, r.num_computed_tokens + q, r)
        for r, q in plan.items[:-1]
        if r.output_len - r.num_output_tokens < L0
    ]
    finish, tick = c.finish, c.tick
    while finish and 0 < finish[0][0] - tick < L0:  # c.take_finishing(pos) for pos in 1 … L0 − 1, in one sweep
        f, _, r = heappop(finish)
        leaves.append((f - tick, r.seq, r.num_computed_tokens + tick - r.cohort_tick + 1, r))  # c.current(r) + 1
    leaves.sort(key=_step_and_seq)
    chunks, sealed = rep.policy.prefill_chunks(rep.state, plan, [f for f, _, _, _ in leaves])
    L = 1 + len(chunks)
    for f, _, _, r in leaves:
        if f >= L and r.cohort_tick >= 0:
            c.put_back(r)
    return chunks, sealed, [x for x in leaves if x[0] < L]


def _lead_ends(rep, plan, start: float, qs: list, stop: float, sealed: int, leaves=()) -> list:
    """End times of the lead's steps, each priced as stepping prices it (``prefill_lead_ends``,
    step 0 its first): step j as P's chunk beside m decodes whose Σ(kv + 1) is base + m·j
    (less the `leaves` from their step on; in step 0 a planned prompt's last chunk is its own
    sequence); a step that starts at or after `stop` (an arrival, then waiting) only if it is
    one of the first `sealed` after step 0, which the waiting queue cannot change
    (``prefill_chunks``)."""
    items, nc, cm = plan.items, plan.cohort, rep.cm
    c = rep.state.cohort
    cohort_kv = c.kv + nc if nc else 0
    m, base, head = len(items) - 1 + nc, cohort_kv, ()
    for r, q in items[:-1]:
        base += r.num_computed_tokens + q
        if q != 1:  # a prompt's last chunk: priced as its own sequence in step 0
            head = head + ((q, r.num_computed_tokens),)  # type: ignore[assignment]
    return cm.prefill_lead_ends(
        m,
        base - m,
        [0] + qs,
        items[-1][0].num_computed_tokens,
        start,
        stop,
        sealed + 1,
        [(f + 1, b - 1) for f, _, b, _ in leaves] if leaves else (),
        head,
    )


def _lead_positions(rep, steps: int) -> int:
    """Positions the lead's P holds once `steps` steps of the run have been taken (≥ 1)."""
    req, qs = rep._lead
    L = len(qs)
    return req.num_computed_tokens + sum(qs[:steps]) + max(0, steps - L)


def _step_and_seq(leaver):
    return leaver[0], leaver[1]
