"""The applying of the commonest plans, as functions of a Replica: a lightly loaded cluster's plan of one
request alone, and a busy one's of one prompt beside a cohort of one member. Each makes the
general ``Replica._apply``'s updates in the same order, its setup for every other kind of plan
left out (tests/test_apply_lone.py and tests/test_apply_beside.py compare them with it)."""

from __future__ import annotations

from operator import sub

import numpy as np

from policies.base import Plan


def _max(values) -> float:
    return max(values) if type(values) is list else float(np.maximum.reduce(values))


def _sample(req, at: float, top: float):
    """A request's first sample of a run at ``at``, whose largest gap inside the run is ``top``:
    its first token (None), or the gap since its last token (returned for the ITL histogram)."""
    if req.first_token_s is None:
        req.first_token_s = at
        if top > req.max_itl_s:
            req.max_itl_s = top
        return None
    gap = at - req.last_token_s
    req.max_itl_s = max(req.max_itl_s, gap, top)
    return gap


def _apply_lone(rep, items, start: float, ends) -> None:
    """``_apply`` for a plan of one request, no cohort, lead, leavers or joiners (the common
    plan of a lightly loaded cluster): the same updates, the general case's setup left out."""
    ((req, n),) = items
    steps = len(ends)
    rep.num_iterations += steps
    if type(ends) is list:
        first, last = ends[0], ends[-1]
    else:
        first, last = float(ends[0]), float(ends[-1])
    s = rep.state
    pool = s.pool
    top, inner = 0.0, None
    if steps > 1:
        if rep._counts_runs:
            rep.policy.on_fast_forward(steps - 1)
        if type(ends) is list:
            inner = list(map(sub, ends[1:], ends))
            top = max(inner)
        else:
            inner = ends[1:] - ends[:-1]  # its largest gap is taken later, with other runs' (tops.py)
        rep.itl.add_many(inner)
    if req.first_scheduled_s is None:
        req.first_scheduled_s = start
    req.num_computed_tokens += n
    finished = False
    if req.num_computed_tokens >= req.prompt_len + req.num_output_tokens:
        if inner is not None and type(inner) is not list:
            rep.tops.add(req, inner)
        gap = _sample(req, first, top)
        if gap is not None:
            rep.itl.add(gap)
        req.num_computed_tokens += steps - 1
        req.num_output_tokens += steps
        req.last_token_s = last
        finished = req.num_output_tokens >= req.output_len
        if steps > 1:
            held = pool.blocks_held(req, req.num_computed_tokens)
            pool.used += held - req.num_blocks
            req.num_blocks = held
    assert pool.used <= pool.total
    c = s.cohort
    if not finished and c is not None and not c.members:  # (a finished request joins nothing)
        rep._join_cohort(items, last)
    if finished:
        req.finish_s = last
        s.retire(req, True)
        if c is None or req in s.running:
            s.running.remove(req)
        rep._outstanding -= 1
        if rep._counts_finishes:
            rep.policy.on_finish()
        rep.on_finish(req)


def _apply_beside(rep, plan: Plan, start: float, ends) -> None:
    """``_apply`` for a plan of one request beside a cohort of one member, no lead or joiners
    (a busy cluster's common plan, ``runs._beside_ends``): the same updates in the same
    order, the general case's setup left out; leavers (at most the member and the request)
    go through the general ``_advance_folded``."""
    ((req, n),) = plan.items
    steps = len(ends)
    rep.num_iterations += steps
    listed = type(ends) is list
    first, last = (ends[0], ends[-1]) if listed else (float(ends[0]), float(ends[-1]))
    s, itl = rep.state, rep.itl
    pool, c = s.pool, s.cohort
    bs, cache = pool.block_size, pool.cache
    inner, inner_max, mine, top_mine = None, 0.0, steps, None  # top_mine: req's largest inner gap, if it leaves early
    if steps > 1:
        if rep._counts_runs:
            rep.policy.on_fast_forward(steps - 1)
        inner = list(map(sub, ends[1:], ends)) if listed else ends[1:] - ends[:-1]
    gap = first - c.last_end
    itl.add(gap, 1)
    if rep._leaving:
        mine = next((f for f, r in rep._leaving if r is req), steps)  # req leaves after step mine
        if mine < steps:
            top_mine = _max(inner[: mine - 1]) if mine > 1 else 0.0  # type: ignore[index]
        done, inner_max, _ = rep._advance_folded(steps, gap, inner, ends, 1)
    else:
        if inner is not None:
            inner_max = _max(inner)
            itl.add_many(inner, 2)
        pool.used += c.new_blocks(c.tick + 1, steps - 1)
        done = c.advance(steps, gap if gap > inner_max else inner_max, last)
    if req.first_scheduled_s is None:
        req.first_scheduled_s = start
    req.num_computed_tokens += n
    finished = []
    if req.num_computed_tokens >= req.prompt_len + req.num_output_tokens:
        g = _sample(req, first, inner_max if top_mine is None else top_mine)
        if g is not None:
            itl.add(g)
        req.num_computed_tokens += mine - 1
        req.num_output_tokens += mine
        req.last_token_s = last if mine == steps else float(ends[mine - 1])
        if req.num_output_tokens >= req.output_len:
            finished.append(req)
        if steps > 1:
            held = -(-req.num_computed_tokens // bs) - (cache.shared_blocks(req) if cache else 0)  # blocks_held
            pool.used += held - req.num_blocks
            req.num_blocks = held
    if done:
        for r in done:
            r.num_blocks = -(-r.num_computed_tokens // bs) - (cache.shared_blocks(r) if cache else 0)
        finished = sorted(finished + done, key=rep._finish_key(plan, ends, None, 0)) if finished else done
    assert pool.used <= pool.total
    rep._join_cohort(plan.items, last)
    if finished:
        running, on_finish = s.running, rep.policy.on_finish if rep._counts_finishes else None
        for r in finished:
            r.finish_s = r.last_token_s
            s.retire(r, r.last_token_s == last)
            if r in running:
                running.remove(r)
            rep._outstanding -= 1
            if on_finish is not None:
                on_finish()
            rep.on_finish(r)
