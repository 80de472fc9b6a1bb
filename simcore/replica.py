"""One engine instance as a SimPy process: plan, price, wait, apply, record.

ORDERING. An arrival stamped t joins the batch planned at t: when an arrival is due now (or, in
closed loop, may be freed by a finish now), the replica first waits for an event at t of
priority LATE, queued behind the arrival events of t, which run after every step ending at t
(simcore/clock.py), so all arrivals of t are in the inbox when it plans.
A sole replica in open loop (``pull``) needs no arrival events at all: before each plan it
pulls every request stamped up to the plan's start, and when idle it sleeps until the next.

FAST-FORWARD. Most plans start a run of k steps in one event, exact to the bit against stepping:
how long a run is and when its steps end is simcore/fastforward/runs.py.

DEFERRED FINISH. In front of several replicas (open loop, a router blind to KV, the run not
stopped at a time), a run that ends with all of its requests finished, nothing waiting (a lone
request's, a folded run's to an empty cohort, ...: ``Replica._ends_all``),
needs no event at its end: the replica waits for its next request instead (``_deferred_end``),
and the router counts the requests out from their last steps' ends (those leaving at its end by
``_done_at``, the others as a folded run's leavers). The run is applied when that request
arrives, at the run's end if it arrives before it (the wait is queued there, and cut as any run
is), else then (the plan starting at the arrival, as an idle replica's would); what is left at
the end of the run is applied by Simulation. Nothing reads the replica in between, so this is
the same bits. Stepping keeps its event per step: it is the reference.

DECODE COHORT. Under a policy with ``lazy_decodes`` (all three), plain decodes leave the running
queue for a DecodeCohort that advances them as a group, so a step's Python work is O(requests
that change) rather than O(batch). `--no-fast-forward` keeps every request explicit, one event
per step: the reference the tests compare against.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from operator import sub
from typing import TYPE_CHECKING, Any

import numpy as np
from simpy.events import Event

from costmodel import CostModel
from policies.base import Plan, PolicyHooks, SchedulerState

from .clock import LATE, trigger_unscheduled
from .cohort import DecodeCohort
from .fastforward import applies, arrival_folds, chunked, runs
from .fastforward.applies import _max, _sample
from .fastforward.runs import steps_started
from .fastforward.switches import FastForward
from .fastforward.tops import DeferredTops
from .histogram import LogHistogram
from .invariants import check_replica


class Replica:
    """One engine instance, fast-forwarding: its state, and the fast paths of simcore/fastforward/
    as functions of it (``runs._step_ends(replica, …)``), each behind a switch (``switches``)."""

    _headroom = True  # whether to ask policy.run_headroom (False where it is PolicyHooks', always 0)
    _ends_all = False  # the last plan's run ends with all of its requests finished (DEFERRED FINISH)
    _folds_arrivals = (
        False  # the policy has the hook and the run may fold arrivals (simcore/fastforward/arrival_folds.py)
    )
    if TYPE_CHECKING:  # the state's cohort is there wherever a plan has cohort members (Plan.cohort > 0)
        state: Any

    def __init__(
        self,
        env,
        index: int,
        policy,
        state: SchedulerState,
        cm: CostModel,
        next_arrival,
        on_finish,
        switches: FastForward = FastForward(),
        check: bool = False,
        log_iterations: bool = False,
    ):
        self.env, self.index, self.policy, self.state = env, index, policy, state
        self.cm = cm.with_host_overlap(getattr(policy, "overlaps_host", False))  # host/GPU overlap: costmodel/host.py
        self.itl, self.next_arrival, self.on_finish = LogHistogram(), next_arrival, on_finish
        self.tops = DeferredTops()  # lone runs' largest gaps, folded into max_itl_s in bulk (fastforward/tops.py)
        self._running_ends = None
        self._running_plan = None
        self._lead: Any = None  # (P, its chunks) when the running plan's run starts with P's chunked prefill (simcore/fastforward/chunked.py)
        self.switches, self.checking = switches, check
        self.settle = False  # True in closed loop: a finish may release an arrival at the same instant
        self.pull = (
            None  # one replica in open loop: pull(t) submits every arrival stamped ≤ t (it knows its next arrival)
        )
        self.fold = False  # True when a finish matters to nobody until the run ends (open loop, router blind to KV)
        self._leaving: list = []  # (steps, request): members or planned requests whose last step in this run is steps - 1
        self._leave_times = None  # their last steps' end times, once read (``outstanding``)
        self._joins: list = []  # arrivals folded into the running run (simcore/fastforward/arrival_folds.py)
        self._step_estimate = 0.01  # a recent decode step's length: sizes a folded run's pieces
        self._deferred_end = math.inf  # a deferred run's end (see DEFERRED FINISH)
        self._done_at, self._done_n = (
            math.inf,
            0,
        )  # the same: _done_n requests, finishing in its last step, out from then
        self._free_from = -math.inf  # from when nothing is outstanding here, unless more is routed (``_note_free``)
        self.inbox: list = []
        self.idle = None
        self.wakes = None  # where submit leaves a triggered idle event for the caller to process, if not None
        self._clock = None  # when the last step ended, as planned (SimPy's now may be an ulp off it)
        self.num_iterations = 0
        self._outstanding = 0  # submitted and not yet applied as finished
        self.iteration_log: list | None = [] if log_iterations else None
        state.hold_finished = getattr(policy, "holds_finished", False)
        self._counts_runs = (
            getattr(type(policy), "on_fast_forward", None) is not PolicyHooks.on_fast_forward
        )  # no-ops skipped
        self._counts_finishes = getattr(type(policy), "on_finish", None) is not PolicyHooks.on_finish
        self.rejects = (
            getattr(type(policy), "reject_reason", None) is not PolicyHooks.reject_reason
        )  # beyond the pool's size
        self._headroom = getattr(type(policy), "run_headroom", None) is not PolicyHooks.run_headroom  # else none
        if (
            switches.cohort and getattr(policy, "lazy_decodes", False) and not log_iterations
        ):  # the log lists every request
            state.cohort = DecodeCohort(state.pool.block_size)
        self.process = env.process(self.run())

    def submit(self, req) -> None:
        req.replica = self.index
        self.inbox.append(req)
        self._outstanding += 1
        self._free_from = math.inf  # outstanding until this replica's process has planned it
        if self.pull is not None:  # collected by the replica itself: its runs already end at the arrival
            return
        if self.idle is not None and not self.idle.triggered:
            if (
                self.env.now < self._deferred_end < math.inf
            ):  # a deferred run still going: wake at its end, or where it is cut
                self.env.queue_at(self.idle, self._deferred_end)
                self._deferred_end = self._done_at = math.inf  # counted until then, as a run's requests are
                ends = self._running_ends
                if len(ends) > 1 and ends[-2] >= self.env.now:
                    self._cut()
            elif self.wakes is None:
                self.idle.succeed()
            else:  # triggered now, its callbacks run by the caller (Simulation._plain_arrivals)
                trigger_unscheduled(self.idle)
                self.wakes.append(self.idle)
        elif self._running_ends is not None and len(self._running_ends) > 1 and self._running_ends[-2] >= self.env.now:
            self._cut()

    def _cut(self) -> None:
        """A request routed here while a run goes: the run ends after the last step started by now
        (the arrival joins the plan made when that step ends, as stepping would have it), and the
        replica's wait moves to that step's end. What an Interrupt would do, without its event and
        its exception."""
        env = self.env
        ends = self._running_ends = self._running_ends[: steps_started(self._running_ends, env.now)]  # type: ignore[index]
        if self._leaving:
            runs._keep_leavers(self, len(ends))
        env.move_wait_earlier(self.process, float(ends[-1]))

    @property
    def outstanding(self) -> int:
        """Requests here not finished by now: in the inbox, waiting or running (a folded run's
        leavers count as finished from the end of their last step). A sole replica first collects
        the arrivals stamped by now, which it would otherwise take only at its next plan (the same
        queue either way)."""
        if self.pull is not None:
            self.pull(self.env.now)
        n = self._outstanding
        if self._done_at < math.inf and self._done_at <= self.env.now:  # a deferred run's finishers
            n -= self._done_n
        if self._leaving and self._running_ends is not None:
            times = self._leave_times  # when each leaver's last step ends: leavers are in step order
            if times is None:
                ends = self._running_ends
                times = self._leave_times = [float(ends[f - 1]) for f, _ in self._leaving]
            n -= bisect_right(times, self.env.now)
        if self._joins and self._running_ends is not None:
            n -= arrival_folds._finished_joiners(self, self._running_ends, self.env.now)
        return n

    @staticmethod
    def least_outstanding(req, replicas) -> int:
        """simcore.router.least_outstanding over several fast replicas, the same pick: the first
        replica empty now by its ``_free_from``, else the least loaded with ``outstanding`` read
        inline, a folded run's leavers once their end times are listed (the router's hot loop:
        most of a cluster's arrivals). Several replicas have no pull and no joiners, which are a
        sole replica's (``run``); Simulation routes with this in the router's place."""
        now, i = replicas[0].env.now, 0
        for r in replicas:  # the first with nothing outstanding now, if any (``_note_free``)
            if r._free_from <= now:
                return i
            i += 1
        best, pick = 1 << 62, 0
        for i, r in enumerate(replicas):  # none is empty: the first with one request is the pick
            n = r._outstanding
            if r._done_at <= now:
                n -= r._done_n
            if r._leaving:  # the leavers gone by now, from their end times once they are listed
                times = r._leave_times
                n = r.outstanding if times is None or r._running_ends is None else n - bisect_right(times, now)
            if n < best:
                if n == 1:
                    return i
                best, pick = n, i
        return pick

    def _note_free(self) -> None:
        """Before the process waits: from when ``outstanding`` will be 0 if nothing more is routed
        here (-inf: now; inf: not before the process runs again). Only a deferred run's finishers
        and a folded run's leavers leave without it running, each at a time known now, so the
        several-replica router finds an empty replica by comparing one float (``least_outstanding``);
        ``submit`` sets inf. A sole replica's pull and joiners are not counted: it is never routed."""
        n, t = self._outstanding, -math.inf
        if n:
            if self._done_at < math.inf:
                n, t = n - self._done_n, self._done_at
            ends = self._running_ends
            if self._leaving and ends is not None:
                n -= len(self._leaving)
                last = float(ends[self._leaving[-1][0] - 1])  # leavers are in step order
                if last > t:
                    t = last
            if n:
                t = math.inf
        self._free_from = t

    def stop_at(self, t: float) -> None:
        """The simulation stops at t: the current run's steps that ended before t are applied, as
        stepping would have applied them (a step ending at t itself is not: SimPy stops first).
        The replica is left as of its last applied step; it is not to be run further."""
        ends, self._running_ends = self._running_ends, None
        if ends is None:
            return
        j = bisect_left(ends, t)
        runs._keep_leavers(self, j)
        if self._joins:  # arrivals whose admission step was not reached are still to be planned
            back = [req for req, at, _ in self._joins if at >= j]
            self._joins = [x for x in self._joins if x[1] < j]
            self.inbox[:0] = back
        if j:
            self._apply(self._running_plan, self._running_start, ends[:j])

    def finish_run(self, until: float | None) -> None:
        """The run is over (stopped at `until`, or every event done): apply what stepping would
        have applied by then (``stop_at``, a deferred run nobody arrived after: DEFERRED FINISH),
        put every cohort member back in the running queue, and settle the deferred largest gaps."""
        if until is not None:
            self.stop_at(until)
        if self._deferred_end < math.inf:
            self.apply_deferred()
        self.state.dissolve_cohort()
        self.tops.settle()

    def kv_usage(self) -> float:
        """Fraction of KV blocks in use now, as stepping shows it (``SteppingReplica.kv_usage``:
        cached blocks nobody references count as free): a fast-forward holds the first step's
        blocks up front and the rest at its end, so count the steps already started."""
        pool, ends = self.state.pool, self._running_ends
        used = pool.total - pool.available
        if ends is not None and len(ends) > 1:
            j = steps_started(ends, self.env.now)
            bs = pool.block_size
            used += sum(
                -(-(r.num_computed_tokens + q - 1 + j) // bs) + (r.num_computed_tokens + q) // -bs
                for r, q in self._running_plan.items
            )
            if self._lead is not None:  # P grows by its chunks, not by one a step: replace its term
                r, qs = self._lead
                used += (
                    -(-chunked._lead_positions(self, j) // bs)
                    + (r.num_computed_tokens + qs[0]) // -bs
                    + -(-(r.num_computed_tokens + qs[0]) // bs)
                    - -(-(r.num_computed_tokens + qs[0] - 1 + j) // bs)
                )
            if self._running_plan.cohort:
                c = self.state.cohort
                used += c.new_blocks(c.tick + 1, j - 1)
        return used / pool.total

    def run(self):
        state = self.state
        env = self.env
        skipping = self.pull is not None  # set before the run starts (Simulation)
        self._folds_arrivals = (
            skipping
            and self.fold
            and self.switches.arrival_folds
            and self.iteration_log is None
            and self.state.cohort is not None
            and getattr(type(self.policy), "arrival_chunks", PolicyHooks.arrival_chunks)
            is not PolicyHooks.arrival_chunks
        )
        while True:
            now = env.now if self._clock is None else self._clock
            if self.pull is not None:
                self.pull(now)
            if not self._outstanding:  # nothing in the inbox, waiting or running
                if state.finished:
                    state.release_finished()
                if self.pull is None:  # _wait_for_work, inlined
                    idle = self.idle = Event(env)
                    self._free_from = -math.inf
                    yield idle
                    self._clock = None
                else:
                    self._note_free()
                    yield from self._wait_for_work()
                continue
            if self.pull is None and (self.settle or self.next_arrival() <= now):
                self._note_free()
                yield self.env.at(self.env.now, LATE)
            if self.inbox:
                state.waiting.extend(self.inbox)
                self.inbox.clear()
            plan = self.policy.schedule(state)
            if state.looked_up:
                state.settle_lookups()
            if self.checking:
                check_replica(self, plan)
            if not plan.items and not plan.cohort:  # an empty plan (Plan.__bool__)
                if not plan.preempted and not plan.released:  # else plan again at once, from the queue
                    self._note_free()
                    yield from self._wait_for_work()
                continue
            start = now
            ends = runs._step_ends(self, plan, start)
            self._running_ends, self._leave_times = ends, None
            self._running_plan, self._running_start = plan, start
            t = ends[-1] if type(ends) is list else float(ends[-1])
            if (
                self._ends_all
                and self.wakes is not None
                and self.fold
                and not state.waiting
                and self.iteration_log is None
                and self.switches.deferred_finish
            ):
                self._deferred_end = self._done_at = t
                self._done_n = len(plan.items) + plan.cohort - len(self._leaving)  # the rest are leavers
                idle = self.idle = Event(env)
                self._note_free()
                yield idle
                self.apply_deferred()
                continue
            if not (skipping and env.skip_to(t)):
                self._note_free()
                yield env.at(t)
                ends = self._running_ends  # an arrival may have cut the run (``_cut``)
            self._running_ends = None
            self._clock = ends[-1] if type(ends) is list else float(ends[-1])
            self._apply_run(plan, start, ends)

    def _apply_run(self, plan: Plan, start: float, ends) -> None:
        """Apply a run by the commonest plans' fast paths (simcore/fastforward/applies.py) or the general one."""
        if (
            not plan.cohort
            and len(plan.items) == 1
            and self._lead is None
            and not self._leaving
            and not self._joins
            and self.iteration_log is None
        ):
            applies._apply_lone(self, plan.items, start, ends)
        elif (
            plan.cohort == 1
            and len(plan.items) == 1
            and self._lead is None
            and not self._joins
            and self.iteration_log is None
        ):
            applies._apply_beside(self, plan, start, ends)
        else:
            self._apply(plan, start, ends)

    def apply_deferred(self) -> None:
        """Apply the deferred run (to where it was cut, if it was); the next plan starts at its end
        if that is now, else now (an arrival after it). Where nothing arrived before its end, the
        replica was idle from then, and so held no finished request (``run``'s idle branch)."""
        idle_after = self._deferred_end < math.inf  # else an arrival queued the wait at the end
        ends, plan = self._running_ends, self._running_plan
        self._running_ends = None
        self._deferred_end = self._done_at = math.inf
        last = ends[-1] if type(ends) is list else float(ends[-1])  # type: ignore[index]
        self._clock = last if self.env.now <= last else None  # type: ignore[assignment]
        self._apply_run(plan, self._running_start, ends)  # type: ignore[arg-type]
        if idle_after and self.state.finished:
            self.state.release_finished()

    def _wait_for_work(self):
        """Idle until a request is submitted; the clock is then the arrival's."""
        if self.pull is not None:
            a = self.next_arrival()
            if a == math.inf:
                yield self.env.event()  # nothing more will come
            if not self.env.skip_to(max(a, self.env.now)):  # nobody could look in between: no event
                yield self.env.at(max(a, self.env.now))
            self._clock = a
            return
        self.idle = self.env.event()
        yield self.idle
        self._clock = None

    def _apply(self, plan: Plan, start: float, ends) -> None:
        """Advance every planned request; whoever catches up samples a token at the end of each step."""
        if (
            not plan.cohort
            and len(plan.items) == 1
            and self._lead is None
            and not self._leaving
            and not self._joins
            and self.iteration_log is None
        ):
            return applies._apply_lone(self, plan.items, start, ends)
        steps = len(ends)
        self.num_iterations += steps
        if self.iteration_log is not None:
            self._log(plan, start, ends)
        first, last = (ends[0], ends[-1]) if type(ends) is list else (float(ends[0]), float(ends[-1]))
        s, itl, items = self.state, self.itl, plan.items
        pool, c = s.pool, s.cohort
        bs, cache = pool.block_size, pool.cache
        inner, inner_max, done, marks = None, 0.0, (), None
        leaving = self._leaving
        left_at = {req: f for f, req in leaving if req.cohort_tick < 0} if leaving else None  # planned, leaving early
        P: Any
        lead, quiet, P = self._lead, 0, None  # quiet: inner gaps before the lead's P samples (it is not in them)
        if lead is not None:
            P, chunks = lead
            P.num_computed_tokens += sum(chunks[1:steps])  # the loop below adds its first chunk
            quiet = min(len(chunks), steps) - 1
        if steps > 1:
            if self._counts_runs:
                self.policy.on_fast_forward(
                    steps - 1 if lead is None else max(0, steps - len(lead[1]))
                )  # decode-only steps
            inner = list(map(sub, ends[1:], ends)) if type(ends) is list else ends[1:] - ends[:-1]
        if plan.cohort:
            gap = first - c.last_end
            itl.add(gap, plan.cohort)
            if leaving:
                done, inner_max, marks = self._advance_folded(steps, gap, inner, ends, len(items), quiet)  # type: ignore[assignment]
            else:
                if inner is not None:
                    inner_max = max(inner) if type(inner) is list else float(np.maximum.reduce(inner))
                    _add_gaps(itl, inner, len(items) + plan.cohort, quiet)
                pool.used += c.new_blocks(c.tick + 1, steps - 1)
                done = c.advance(steps, gap if gap > inner_max else inner_max, last)
        elif inner is not None:
            inner_max = _max(inner)
            _add_gaps(itl, inner, len(items), quiet)
        gaps, finished = [], []
        for req, n in items:
            if req.first_scheduled_s is None:
                req.first_scheduled_s = start
            req.num_computed_tokens += n
            s0, mine, top, at = (
                0,
                steps,
                inner_max,
                first,
            )  # its first sampling step, steps it samples in, largest inner gap, first sample
            if req is P:
                self.policy.on_lead(s, req, chunks[:steps])
                if req.num_computed_tokens < req.prompt_len + req.num_output_tokens:
                    if steps > 1:
                        held = -(-req.num_computed_tokens // bs) - (
                            cache.shared_blocks(req) if cache else 0
                        )  # blocks_held
                        pool.used += held - req.num_blocks
                        req.num_blocks = held
                    continue
                s0 = quiet
                at = float(ends[s0])
                mine = (left_at[req] if left_at and req in left_at else steps) - s0
                top = _max(inner[s0 : s0 + mine - 1]) if mine > 1 else 0.0  # type: ignore[index]
            elif req.num_computed_tokens < req.prompt_len + req.num_output_tokens:
                continue
            elif left_at and req in left_at:
                mine = left_at[req]
                top = _max(inner[: mine - 1]) if mine > 1 else 0.0  # type: ignore[index]
            gap = _sample(req, at, top)
            if gap is not None:
                gaps.append(gap)
            req.num_computed_tokens += mine - 1
            req.num_output_tokens += mine
            req.last_token_s = last if s0 + mine == steps else float(ends[s0 + mine - 1])
            if req.num_output_tokens >= req.output_len:
                finished.append(req)
            if steps > 1:
                held = -(-req.num_computed_tokens // bs) - (cache.shared_blocks(req) if cache else 0)
                pool.used += held - req.num_blocks
                req.num_blocks = held
        if gaps:
            itl.add_many(gaps)
        if self._joins:
            had = len(finished)
            items = items + arrival_folds._admit_joins(self, ends, steps, inner, finished, marks)
            if had < len(finished) and not done:
                finished.sort(key=self._finish_key(plan, ends, P, quiet))
        if done:
            for req in done:
                req.num_blocks = -(-req.num_computed_tokens // bs) - (cache.shared_blocks(req) if cache else 0)
            finished = sorted(finished + done, key=self._finish_key(plan, ends, P, quiet)) if finished else done
        elif steps > 1 and len(finished) > 1 and s.hold_finished:  # held in the order they finished
            finished.sort(key=self._finish_key(plan, ends, P, quiet))
        assert pool.used <= pool.total
        if c is not None and (plan.cohort or not c.members):  # _join_cohort
            self._join_cohort(items, last)
        if finished:
            running, on_finish = s.running, self.policy.on_finish if self._counts_finishes else None
            for req in finished:
                req.finish_s = req.last_token_s
                s.retire(req, req.last_token_s == last)
                if c is None or req in running:
                    running.remove(req)
                self._outstanding -= 1
                if on_finish is not None:
                    on_finish()
                self.on_finish(req)

    def _advance_folded(
        self, steps: int, gap: float, inner, ends, riders: int, quiet: int = 0
    ) -> tuple[list, float, list | None]:
        """The cohort through a folded run, segment by segment between the steps where members or
        riders (planned requests) left: each segment's gaps count once per member and rider
        present (less the lead's P in the first `quiet` gaps, before it samples), and its largest
        gap goes to the members' max ITL. Returns the members that finished, the run's largest
        inner gap, and, where arrivals joined the run, the gaps' weights as marks for their
        ``_admit_joins`` to add with theirs in one go (simcore/fastforward/arrival_folds.py), else None."""
        c, pool, add = self.state.cohort, self.state.pool, self.itl.add_many
        marks = [] if self._joins else None  # type: ignore[var-annotated]  # with joiners: (gap, weight change from it on), flattened, added with theirs
        leaving, self._leaving = self._leaving, []
        members, listed, nl = c.members, type(inner) is list, len(leaving)
        done, s0, i, inner_max, used = [], 0, 0, 0.0, 0
        while s0 < steps:
            f = leaving[i][0] if i < nl else steps
            top = gap if s0 == 0 else -math.inf
            if f > 1:
                a = s0 - 1 if s0 else 0
                seg = inner[a : f - 1]
                if len(seg):
                    w, q = (
                        len(members) + riders,
                        (quiet if quiet < f - 1 else f - 1) - a,
                    )  # weight w on [a, f − 1), less 1 on [a, a + q)
                    if marks is not None:
                        marks += (a, w, f - 1, -w, a, -1, a + q, 1) if q > 0 else (a, w, f - 1, -w)
                    elif q > 0:  # _add_gaps, inlined
                        if w > 1:
                            add(seg[:q], w - 1)
                        add(seg[q:], w)
                    else:
                        add(seg, w)
                    m = max(seg) if listed else float(np.maximum.reduce(seg))
                    if m > inner_max:
                        inner_max = m
                    if m > top:
                        top = m
            used += c.new_blocks(c.tick + 1, f - 1) if s0 == 0 else c.new_blocks(c.tick, f - s0)
            group = []
            while i < nl and leaving[i][0] == f:
                req = leaving[i][1]
                if req.cohort_tick >= 0:
                    group.append(req)
                else:
                    riders -= 1
                i += 1
            done += c.advance(f - s0, top, float(ends[f - 1]), group)
            s0 = f
        pool.used += used
        return done, inner_max, marks

    def _finish_key(self, plan, ends, P, quiet: int):
        """Same-step finishers leave in the step's batch order: queue order (seq), or the policy's
        ``planned_extends`` of the plan first (SGLang)."""
        extends = getattr(self.policy, "planned_extends", 0)
        return _extends_first(plan, ends, P, quiet, extends) if extends else _finish_order

    def _join_cohort(self, items, last: float) -> None:
        """Planned requests that sampled a token at `last` and decode next join the cohort (called
        when it took part in the step, its members sampling at `last` too, or is empty)."""
        c = self.state.cohort
        joined, limit = False, self.policy.cohort_max_outputs_left
        for req, _ in items:
            if (
                req.last_token_s == last
                and req.num_output_tokens < req.output_len
                and req.num_computed_tokens + 1 == req.prompt_len + req.num_output_tokens
                and req.output_len - req.num_output_tokens <= limit
            ):
                if not joined:
                    c.last_end, joined = last, True
                c.join(req)
        if joined:
            running = self.state.running
            running[:] = [r for r in running if r.cohort_tick < 0]

    def _log(self, plan: Plan, start: float, ends) -> None:
        """A log entry with steps > 1 is decode-only passes: a run that starts with a prefill is two entries."""
        steps = len(ends)
        if steps > 1 and any(q != 1 for _, q in plan.items):
            self.iteration_log.append((self.index, start, float(ends[0]), 1, plan))  # type: ignore[union-attr]
            start, steps, plan = float(ends[0]), steps - 1, Plan([(r, 1) for r, _ in plan.items])
        self.iteration_log.append((self.index, start, float(ends[-1]), steps, plan))  # type: ignore[union-attr]


def _add_gaps(itl: LogHistogram, inner, weight: int, quiet: int) -> None:
    """The run's inner gaps, each once per request sampling at both its ends: one fewer in the
    first `quiet` (the lead's P samples from the end of its last chunk on)."""
    if quiet:
        if weight > 1:
            itl.add_many(inner[:quiet], weight=weight - 1)
        inner = inner[quiet:]
    itl.add_many(inner, weight=weight)


def _finish_order(req):
    return req.last_token_s, req.seq


def _extends_first(plan, ends, P, quiet: int, extends: int):
    """SGLang's batch order: a step's extends, then its decodes (ScheduleBatch.mix_with_running:
    merge_batch puts the running batch's reqs after the prefill's), so a request that finished on its
    extend step leaves before that step's decodes."""
    at = {id(r): float(ends[quiet if r is P else 0]) for r, _ in plan.items[:extends]}
    return lambda r: (r.last_token_s, at.get(id(r)) != r.last_token_s, r.seq)
