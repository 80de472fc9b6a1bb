"""How many steps a plan runs in one event, and when each ends (functions of a Replica).

FAST-FORWARD. When every running request is in the plan, each catches up in its first step
(decodes, or the last chunk of a prefill) and the policy says the plans that follow would be
decode-only repeats, k steps are taken in one event: k is cut at the first finish and where
the KV blocks the steps need run out. An arrival routed here at time a moves the wait (Replica._cut) and
cuts the run after the last step that started before a (a sole replica, which knows its next
arrival, stops computing there); the arrival joins the plan made when that step ends, as stepping
would have it. A run cut shorter than that for any reason (a cap on its length) is as exact:
the next plan carries on from the planned end. Step times are the same sequence of additions
stepping would make, and the next plan starts at the planned end of the last step, not at
SimPy's `now` (which adds the wait to the previous `now` and can land an ulp away), so
fast-forward and stepping agree to the bit.

A run through which cohort members finish is folded (``_folded_run``): the batch shrinks at each
finish instead of the run ending there, when nobody waits and no router reads KV usage. A sole
replica's folded run goes on past an arrival where the policy can say what it is given
(simcore/fastforward/arrival_folds.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from heapq import heappop

import numpy as np

from policies.base import Plan

from . import arrival_folds, chunked
from .arrival_folds import _step

SHORT_RUN = 64  # runs up to this many steps are timed in plain floats (numpy's call overhead dominates)
OPEN_RUN = 16  # the same toward no known stop (several replicas): no early break at a stop, so numpy pays sooner


def _run_free(rep) -> int:
    """Free KV blocks a run may use: the pool's, less the policy's headroom (asked only where the
    policy overrides ``run_headroom``; PolicyHooks' is always 0)."""
    pool = rep.state.pool
    return pool.total - pool.used - (rep.policy.run_headroom(rep.state) if rep._headroom else 0)


def _step_ends(rep, plan: Plan, start: float):
    """End times of the steps this plan starts: one, or a run of k when every running request
    is in the plan, catches up in its first step and then only decodes (see FAST-FORWARD)."""
    items, cm, nc, c = plan.items, rep.cm, plan.cohort, rep.state.cohort
    rep._lead, rep._seqs0, rep._ends_all = None, len(items) + nc, False
    if not nc and len(items) == 1 and rep.pull is None and not plan.preempted:
        ends = _lone_ends(rep, items[0], start)
        if ends is not None:
            return ends
    if nc == 1 and len(items) == 1 and rep.pull is None and rep.fold and not plan.preempted and not rep.state.waiting:
        ends = _beside_ends(rep, items[0], start)
        if ends is not None:
            return ends
    k, longest, decodes = _run_length(items) if not plan.preempted else (0, 0, False)
    if not k and rep.switches.chunked_runs and not plan.preempted and rep.iteration_log is None:
        ends = chunked._chunked_run(rep, plan, start)
        if ends is not None:
            return ends
    first_finish, fold, full = k, False, longest  # full: the step the last of them leaves after
    if nc and k:
        fold = rep.fold and not rep.state.waiting
        k = max(c.steps_to_empty(), longest) if fold else min(k, c.steps_to_finish())
        full = k if fold else -1
    stop = rep.next_arrival() if rep.pull is not None else math.inf
    if k > SHORT_RUN and stop < math.inf:  # only steps that start before the arrival run (a shorter run is as exact)
        k = min(k, SHORT_RUN + 2 * int((stop - start) / rep._step_estimate))
    everyone = len(items) == len(rep.state.running) and nc == rep.state.num_in_cohort
    if k > 1:
        k = _kv_limited(rep, items, k, nc) if everyone and rep.policy.can_fast_forward(rep.state) else 1
    rep._ends_all = first_finish > 0 and everyone and k == full and rep.pull is None  # all of them finish in the run
    cohort_kv = c.kv + nc if nc else 0  # Σ(kv + 1) of the cohort in the first step
    if k <= 1 or not decodes:  # the first step priced on its own: it ends at t1
        if len(items) == 1:  # fast-forward prices it as a lead step of one chunk (its pared loop; the same bits)
            ((r, q),) = items
            t1 = cm.prefill_step_end(nc, cohort_kv - nc, q, r.num_computed_tokens, start)
        else:
            t1 = start + cm.step_time([q for _, q in items], [r.num_computed_tokens for r, _ in items], nc, cohort_kv)
        if k <= 1:
            return [t1]
    n = len(items) + nc
    kv = cohort_kv
    for r, q in items:
        kv += r.num_computed_tokens + q
    if fold and min(c.steps_to_finish(), first_finish) < k:
        riders = [(r.output_len - r.num_output_tokens, r.seq, r.num_computed_tokens + q, r) for r, q in items]
        return _folded_run(rep, start, [] if decodes else [t1], n, kv if decodes else kv + n, k, riders)
    if decodes:
        return _decode_ends(rep, start, n, kv, k, stop)
    t = t1
    return [t] if t >= stop else _decode_ends(rep, t, n, kv + n, k - 1, stop, lead=True)


def _lone_ends(rep, item, start: float):
    """``_step_ends`` for a plan of one request and no cohort, on a replica that does not know
    its next arrival (the common plan of a lightly loaded cluster): the same steps, its
    general checks written out for one request. None if the request is still prefilling
    after its first step (a chunked run: the general path)."""
    r, q = item
    if r.num_computed_tokens + q != r.prompt_len + r.num_output_tokens:
        return None
    left = k = r.output_len - r.num_output_tokens
    s = rep.state
    alone = len(s.running) == 1 and (s.cohort is None or not s.cohort.members)
    if k > 1:
        k = _kv_limited(rep, ((r, q),), k, 0) if alone and rep.policy.can_fast_forward(s) else 1
    rep._ends_all = alone and k == left and not rep._leaving  # the run ends with its finish, nobody else running
    kv = r.num_computed_tokens + q
    if q == 1 and k > 1:
        return _decode_ends(rep, start, 1, kv, k)
    t1 = rep.cm.prefill_step_end(0, 0, q, r.num_computed_tokens, start)  # as _step_ends prices it
    if k <= 1:
        return [t1]
    return _decode_ends(rep, t1, 1, kv + 1, k - 1, math.inf, lead=True)


def _beside_ends(rep, item, start: float):
    """``_step_ends`` for a prompt's last chunk beside a cohort of one, nobody waiting, folding
    allowed, on a replica that does not know its next arrival (a busy cluster's common plan):
    the same steps and leavers as the general path's folded run, which here has at most two
    leavers and so two decode segments after the chunk's step. Their durations go into one
    array and one cumulative sum (the same additions in the same order as the general path's
    sum per segment, each segment's first addition starting from the last end); runs of at
    most OPEN_RUN decode steps in plain floats. (``_step_estimate`` is read only toward a
    known stop, so it is left alone.) None where the request is not a prompt catching up."""
    r, q = item
    tokens = r.prompt_len + r.num_output_tokens
    if r.num_computed_tokens + q != tokens or q == 1:
        return None
    s, cm = rep.state, rep.cm
    c = s.cohort
    mine = r.output_len - r.num_output_tokens  # the step it leaves after
    k = c.last_finish - c.tick  # c.steps_to_empty()
    if mine > k:
        k = mine
    full, alone = k, len(s.running) == 1 and len(c.members) == 1
    if k > 1:
        k = _kv_limited(rep, (item,), k, 1) if alone and rep.policy.can_fast_forward(s) else 1
    rep._ends_all = alone and k == full  # both leave by the run's end (it ends at the last leaver)
    t1 = cm.prefill_step_end(1, c.kv, q, r.num_computed_tokens, start)
    if k <= 1:
        return [t1]
    kv = c.kv + tokens + 3  # Σ(kv + 1) of both in step 1
    fm = c.finish[0][0] - c.tick  # the step the member leaves after
    f = fm if fm < mine else mine
    if f >= k:
        return _decode_ends(rep, t1, 2, kv, k - 1, math.inf, lead=True)
    leaving, x = rep._leaving, kv + 2 * (f - 1)  # x: Σ(kv + 1) in step f, before the leavers leave
    n2 = 2
    if fm == f:
        member = heappop(c.finish)[2]
        leaving.append((f, member))
        x -= member.num_computed_tokens + c.tick - member.cohort_tick + f + 1
        n2, g = 1, mine
    if mine == f:
        leaving.append((f, r))
        x -= tokens + f
        n2, g = n2 - 1, fm
    f2 = f
    if n2:
        f2 = g if g < k else k  # the run's last step
        if f2 < k:  # the other leaves before the run's end, which it then is
            leaving.append((f2, heappop(c.finish)[2] if fm == f2 else r))
    if f2 <= OPEN_RUN + 1:
        listed = cm.decode_ends_list
        e = [t1] + listed(2, float(kv), f - 1, t1)
        return e + listed(1, float(x), f2 - f, e[-1]) if f2 > f else e
    d = cm.decode_run(2, float(kv - 2), f)  # its first duration replaced by t1: the sum starts there
    d[0] = t1
    if f2 > f:
        d = np.concatenate((d, cm.decode_run(1, float(x), f2 - f)))
    return np.add.accumulate(d, out=d)


def _folded_run(rep, start: float, lead: list, n: int, kv: int, k: int, riders: list, head=None):
    """A run of at most k steps (for a sole replica, only those that start before its next
    arrival) through which cohort members and planned requests finish: the batch shrinks at
    each finish. Only with nobody waiting, where a finish changes nothing but the batch until
    the run's end (or with `head`, see below). `lead`: the end times of its first steps, priced
    already (nobody leaves before the last of them); kv: Σ(kv + 1) in the step after them.
    `riders`: (the step it leaves after, seq, base, request) for each planned request, Σ(kv + 1)
    of one at step j ≥ len(lead) being base + j. The leavers (members taken off the finish
    heap, planned requests) are kept with the step they leave after, for ``_apply``. A sole
    replica folds arrivals in (simcore/fastforward/arrival_folds.py); `head` (q, kv, request): the step
    after the lead is that request's last chunk q over kv beside the queue head's first, its
    (kv + q) counted in kv and n as a decode's, or the run ends before it. Heads gather while
    the queue's head takes its whole prompt in one chunk (``_fold_head``) and leave the
    budget's rest to the next: all go in the step of the first arrival that folds beside them."""
    c, s = rep.state.cohort, rep.state
    arrival = rep.next_arrival() if rep.pull is not None else math.inf
    riders.sort()  # by the step each leaves after, then queue order (seq is unique)
    i = ji = 0
    ends, arrays, t, pos = list(lead), [], start, len(lead)  # type: ignore[var-annotated]  # arrays: long pieces, concatenated after `ends`
    if lead:
        t = lead[-1]
    leaving, finish, nr, listed = rep._leaving, c.finish, len(riders), rep.cm.decode_ends_list
    jl = []  # type: ignore[var-annotated]  # (the step it is not in, base, request) of each arrival folded in (simcore/fastforward/arrival_folds.py), by step
    heads = (
        [head] if head is not None else []
    )  # (q, kv, request) of each sequence taking its last chunk beside the next
    if rep._folds_arrivals:
        rep._free0, rep._joined_blocks = _run_free(rep), 0
        if head is not None and pos < k:
            n, kv, i, ji = _drain(rep, pos, n, kv, riders, i, jl, ji)
    while True:
        if not heads:
            while pos < k and n > 0 and t < arrival:
                f = k
                if finish and finish[0][0] - c.tick < f:
                    f = finish[0][0] - c.tick
                if i < nr and riders[i][0] < f:
                    f = riders[i][0]
                if ji < len(jl) and jl[ji][0] < f:
                    f = jl[ji][0]
                seg = f - pos
                if seg > 0:
                    if (
                        seg <= (SHORT_RUN if arrival < math.inf else OPEN_RUN) and not arrays
                    ):  # _decode_ends' short path, inlined
                        e = listed(n, float(kv), seg, t, arrival)
                        if len(e) > 1:
                            rep._step_estimate = e[-1] - e[-2]
                        ends += e
                    else:
                        e = _decode_ends(rep, t, n, kv, seg, arrival)
                        if type(e) is list and not arrays:
                            ends += e
                        else:
                            arrays.append(e)
                    t = float(e[-1])
                    pos += len(e)
                    kv += n * len(e)
                if pos == f < k:
                    n, kv, i, ji = _drain(rep, pos, n, kv, riders, i, jl, ji)
            if not rep._folds_arrivals or pos >= k or n <= 0 or t < arrival:
                break
            if rep.env.due_by(t):  # arrival_folds._seen_by(rep, t)
                break
            rep.pull(t)
            if not rep.inbox and not s.waiting:  # it was rejected: the run goes on to the next
                arrival = rep.next_arrival()
                continue
        got = arrival_folds._fold_arrival(
            rep,
            pos,
            t,
            n,
            kv,
            k,
            _held(rep, pos, jl, ji) if s.hold_finished else 0,
            riders,
            i,
            jl,
            ji,
            tuple(h[:2] for h in heads) if heads else None,
        )
        if got is None:
            for h in reversed(heads):
                arrival_folds._unfold_head(rep, h[2])
            break
        e, gone, kv, n, k, i, ji, leave, rest = got
        if e:  # else the queue's head folded with its chunk not taken (_fold_head)
            for h in heads:  # their last chunks were taken beside the new one's first
                _extend_lead(rep, h[2], h[0])
            heads = []
            for f, r, kind in gone:
                if kind < 2:
                    leaving.append((f, r))
            if arrays:
                arrays.append(e)
            else:
                ends += e
            t, pos = e[-1], pos + len(e)
        req = rep._joins[-1][0]
        if leave is not None:
            insort(jl, (leave, req.prompt_len - (pos - 1), req), ji, key=_step)
            arrival = t if s.waiting or rep.inbox else rep.next_arrival()
            if pos < k:
                n, kv, i, ji = _drain(rep, pos, n, kv, riders, i, jl, ji)
            continue
        if len(rest) != 1 or pos >= k or arrival_folds._seen_by(rep, t):  # its prompt cut short by the queue
            if not e:
                for h in reversed(heads + [(0, 0, req)]):
                    arrival_folds._unfold_head(rep, h[2])
            break
        n, kv, i, ji = _drain(rep, pos, n, kv, riders, i, jl, ji)
        rep.pull(t)
        heads.append((rest[0], req.prompt_len - rest[0], req))  # from here it is one of the n
        insort(jl, (pos + req.output_len, req.prompt_len - pos, req), ji, key=_step)
        n, kv = n + 1, kv + req.prompt_len
    return np.concatenate([ends] + arrays) if arrays else ends


def _extend_lead(rep, req, q: int) -> None:
    """`req`'s lead (a joiner's, or the plan's P) takes its last chunk q in the step after it."""
    joins = rep._joins
    for x in range(len(joins) - 1, -1, -1):
        if joins[x][0] is req:
            joins[x] = (req, joins[x][1], joins[x][2] + [q])
            return
    rep._lead = (req, rep._lead[1] + [q])


def _held(rep, pos: int, jl: list, ji: int) -> int:
    """Requests that finished in step pos − 1 and, under async scheduling, still hold a seat at
    step pos's schedule() (SchedulerState.retire)."""
    if not rep.state.hold_finished:
        return 0
    held, leaving = 0, rep._leaving
    x = len(leaving) - 1
    while x >= 0 and leaving[x][0] == pos:
        held += 1
        x -= 1
    x = ji - 1  # jl is in step order: the joiners that left at pos are just before ji
    while x >= 0 and jl[x][0] == pos:
        held += 1
        x -= 1
    return held


def _drain(rep, pos: int, n: int, kv: int, riders: list, i: int, jl: list, ji: int):
    """The members, planned requests and joiners whose last step was pos − 1 leave the run."""
    c, leaving = rep.state.cohort, rep._leaving
    finish, tick = c.finish, c.tick
    while finish and finish[0][0] - tick == pos:  # c.take_finishing(pos), inlined
        req = heappop(finish)[2]
        leaving.append((pos, req))
        n -= 1
        kv -= req.num_computed_tokens + tick - req.cohort_tick + pos + 1  # c.current(req) + pos + 1
    while i < len(riders) and riders[i][0] == pos:
        _, _, base, req = riders[i]
        leaving.append((pos, req))
        n -= 1
        kv -= base + pos
        i += 1
    while ji < len(jl) and jl[ji][0] == pos:
        n -= 1
        kv -= jl[ji][1] + pos
        ji += 1
    return n, kv, i, ji


def _decode_ends(rep, t: float, n: int, kv: int, steps: int, stop: float = math.inf, lead: bool = False):
    """End times of `steps` decode-only steps of n sequences with Σ(kv + 1) = kv, from time t
    (preceded by t itself with `lead`), the steps that start before `stop` only: plain floats
    for short runs, numpy for long ones (the same additions either way). Long runs toward a
    known stop are sized by the last step's length (steps only lengthen while n holds) and cut
    after it."""
    if stop < math.inf and steps > SHORT_RUN:
        steps = min(steps, max(2, int((stop - t) / rep._step_estimate) + 2))
    if steps <= (SHORT_RUN if stop < math.inf else OPEN_RUN):
        e = rep.cm.decode_ends_list(n, float(kv), steps, t, stop)
        if len(e) > 1:
            rep._step_estimate = e[-1] - e[-2]
        return [t] + e if lead else e
    if lead:  # one more duration in front, replaced by t: the cumulative sum then starts at t
        e = rep.cm.decode_run_ends(n, float(kv - n), steps + 1, t, lead=True)
    else:
        e = rep.cm.decode_run_ends(n, float(kv), steps, t)
    if stop == math.inf:
        return e
    rep._step_estimate = float(e[-1] - e[-2])
    return e[: steps_started(e, stop)] if e[-2] >= stop else e


def _keep_leavers(rep, steps: int) -> None:
    """The run was cut to `steps`: members that would have left later stay on the finish heap
    (planned requests that would have left later simply have not)."""
    leaving, rep._leave_times = rep._leaving, None
    while leaving and leaving[-1][0] > steps:
        req = leaving.pop()[1]
        if req.cohort_tick >= 0:
            rep.state.cohort.put_back(req)


def _run_length(items) -> tuple[int, int, bool]:
    """(steps until the first finish, until the last, whether all are decodes now) if every item
    catches up and samples in the first step; (0, 0, False) if one is still prefilling after it."""
    k, longest, decodes = 1 << 62, 0, True
    for r, q in items:
        if r.num_computed_tokens + q != r.prompt_len + r.num_output_tokens:
            return 0, 0, False
        if q != 1:
            decodes = False
        left = r.output_len - r.num_output_tokens
        if left < k:
            k = left
        if left > longest:
            longest = left
    return k, longest, decodes


def _kv_limited(rep, items, k: int, cohort: int, decoding: bool = True) -> int:
    """Most of k steps whose KV blocks are free now (the first step's blocks are already held).
    An item (r, q) holds r.num_computed_tokens + q − 1 + j positions after step j; with
    `decoding` False an item may grow by more than one a step before that (a chunked lead)."""
    pool, c = rep.state.pool, rep.state.cohort
    bs, free, cache = pool.block_size, _run_free(rep), pool.cache
    if (
        decoding and (len(items) + cohort) * (k // bs + 1) <= free
    ):  # each sequence crosses at most k // bs + 1 block boundaries
        return k
    held, blocks = 0, (c.new_blocks(c.tick + 1, k - 1) if cohort else 0)
    for r, q in items:  # blocks: what k steps need, held: what the items hold (the common answer is k)
        held += r.num_blocks + (cache.shared_blocks(r) if cache else 0)
        blocks -= (r.num_computed_tokens + q - 1 + k) // -bs
    if blocks - held <= free:
        return k
    if len(items) == 1 and not cohort:  # ⌈(x + j)/bs⌉ ≤ held + free  ⇔  j ≤ (held + free)·bs − x
        r, q = items[0]
        return (held + free) * bs - (r.num_computed_tokens + q - 1)
    x = [r.num_computed_tokens + q - 1 for r, q in items]

    def need(j: int) -> int:
        return sum(-(-(v + j) // bs) for v in x) - held + (c.new_blocks(c.tick + 1, j - 1) if cohort else 0)

    lo, hi = 1, k
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo


def steps_started(ends, now: float) -> int:
    """Steps of a run with these end times that began before `now` (step j > 0 begins at ends[j-1])."""
    return 1 + bisect_left(ends, now, 0, len(ends) - 1)
