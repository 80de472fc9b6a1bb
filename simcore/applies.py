"""The applying of the commonest plans, mixed into Replica: a lightly loaded cluster's plan of one
request alone, and a busy one's of one prompt beside a cohort of one member. Each makes the
general ``Replica._apply``'s updates in the same order, its setup for every other kind of plan
left out (tests/test_apply_lone.py and tests/test_apply_beside.py compare them with it)."""
from __future__ import annotations

import math
from operator import sub

import numpy as np

from policies.base import Plan


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


class FastApplies:
    """Needs the Replica's state, policy, histogram, counters and ``_finish_key``, ``_join_cohort``."""

    def _apply_lone(self, items, start: float, ends) -> None:
        """``_apply`` for a plan of one request, no cohort, lead, leavers or joiners (the common
        plan of a lightly loaded cluster): the same updates, the general case's setup left out."""
        (req, n), = items
        steps = len(ends)
        self.num_iterations += steps
        if type(ends) is list:
            first, last = ends[0], ends[-1]
        else:
            first, last = float(ends[0]), float(ends[-1])
        s = self.state
        pool = s.pool
        top = 0.0
        if steps > 1:
            if self._counts_runs:
                self.policy.on_fast_forward(steps - 1)
            if type(ends) is list:
                inner = list(map(sub, ends[1:], ends))
                top = max(inner)
            else:
                inner = ends[1:] - ends[:-1]
                top = float(np.maximum.reduce(inner))
            self.itl.add_many(inner)
        if req.first_scheduled_s is None:
            req.first_scheduled_s = start
        req.num_computed_tokens += n
        finished = False
        if req.num_computed_tokens >= req.prompt_len + req.num_output_tokens:
            gap = _sample(req, first, top)
            if gap is not None:
                self.itl.add(gap)
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
        if c is not None and not c.members:
            self._join_cohort(items, last)
        if finished:
            req.finish_s = last
            s.retire(req, True)
            if c is None or req in s.running:
                s.running.remove(req)
            self._outstanding -= 1
            if self._counts_finishes:
                self.policy.on_finish()
            self.on_finish(req)

    def _apply_beside(self, plan: Plan, start: float, ends) -> None:
        """``_apply`` for a plan of one request beside a cohort of one member, no lead or joiners
        (a busy cluster's common plan, ``RunPlanning._beside_ends``): the same updates in the same
        order, the general case's setup left out and ``_advance_folded`` written out for a batch
        of two, whose leavers (at most the member and the request) end its segments."""
        (req, n), = plan.items
        steps = len(ends)
        self.num_iterations += steps
        listed = type(ends) is list
        first, last = (ends[0], ends[-1]) if listed else (float(ends[0]), float(ends[-1]))
        s, itl = self.state, self.itl
        pool, c = s.pool, s.cohort
        bs, cache = pool.block_size, pool.cache
        inner, inner_max, mine, top_mine = None, 0.0, steps, None   # top_mine: req's largest inner gap, if it leaves early
        if steps > 1:
            if self._counts_runs:
                self.policy.on_fast_forward(steps - 1)
            inner = list(map(sub, ends[1:], ends)) if listed else ends[1:] - ends[:-1]
        gap = first - c.last_end
        itl.add(gap, 1)
        leaving = self._leaving
        if leaving:
            self._leaving = []
            done, s0, i, nl, used, riders, members = [], 0, 0, len(leaving), 0, 1, c.members
            while s0 < steps:
                f = leaving[i][0] if i < nl else steps
                top = gap if s0 == 0 else -math.inf
                if f > 1:
                    seg = inner[s0 - 1 if s0 else 0: f - 1]
                    if len(seg):
                        itl.add_many(seg, len(members) + riders)
                        m = max(seg) if listed else float(np.maximum.reduce(seg))
                        if m > inner_max:
                            inner_max = m
                        if m > top:
                            top = m
                used += c.new_blocks(c.tick + 1, f - 1) if s0 == 0 else c.new_blocks(c.tick, f - s0)
                group = []
                while i < nl and leaving[i][0] == f:
                    r = leaving[i][1]
                    if r.cohort_tick >= 0:
                        group.append(r)
                    else:   # req leaves here: its samples are those of steps [0, f)
                        riders, mine, top_mine = 0, f, inner_max
                    i += 1
                done += c.advance(f - s0, top, float(ends[f - 1]), group)
                s0 = f
            pool.used += used
        else:
            if inner is not None:
                inner_max = max(inner) if listed else float(np.maximum.reduce(inner))
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
                held = -(-req.num_computed_tokens // bs) - (cache.shared_blocks(req) if cache else 0)   # blocks_held
                pool.used += held - req.num_blocks
                req.num_blocks = held
        if done:
            for r in done:
                r.num_blocks = -(-r.num_computed_tokens // bs) - (cache.shared_blocks(r) if cache else 0)
            finished = sorted(finished + done, key=self._finish_key(plan, ends, None, 0)) if finished else done
        assert pool.used <= pool.total
        self._join_cohort(plan.items, last)
        if finished:
            running, on_finish = s.running, self.policy.on_finish if self._counts_finishes else None
            for r in finished:
                r.finish_s = r.last_token_s
                s.retire(r, r.last_token_s == last)
                if r in running:
                    running.remove(r)
                self._outstanding -= 1
                if on_finish is not None:
                    on_finish()
                self.on_finish(r)
