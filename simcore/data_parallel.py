"""A MoE engine's data-parallel ranks stepping in lockstep (reference loop only).

Each rank is a ``SteppingReplica`` (its own conformant scheduler and KV pool, ``driven``: no
process of its own); one process steps them together: the MoE layers' collectives make every
rank's forward pass wait for the others, so a step lasts the group's price of all ranks' batches
(costmodel/data_parallel.py). ``scheduler.has_requests()`` (unfinished, or finished and still held
by async scheduling) decides whether a rank's scheduler runs at all.

vLLM, ``DPEngineCoreProc.run_busy_loop`` (vllm/v1/engine/core.py):
- a wave starts when a request reaches an idle group (``add_request`` sets ``engines_running``
  and the coordinator wakes the other ranks with START_DP_WAVE);
- while the wave runs, a rank with nothing scheduled executes a dummy batch (``execute_dummy_batch``);
- ``_has_global_unfinished_reqs``: after every step the step counter advances; on step 1 and every
  ``dp_sync_interval`` (16) steps the ranks all-reduce "any request unfinished"; when none is,
  the wave ends and the counter resets. Between checks the ranks keep stepping (dummy batches).
  Under async scheduling a request whose last token came from the step just run is unfinished
  still (its output is processed after the next schedule(): ``SchedulerState.finished``), and a
  rank whose schedule() is then empty runs a dummy batch (``step_with_batch_queue``).

SGLang DP attention, ``prepare_mlp_sync_batch_raw`` (managers/scheduler_components/dp_attn.py):
every scheduler iteration all-gathers each rank's token count; when any is non-zero, ranks with no
batch run an idle batch (``need_idle_batch = max(global_num_tokens) > 0``); when all are zero no
forward runs and each rank's loop reaches ``Scheduler.on_idle`` (an empty rank running idle batches
never does, so its new-token ratio is not reset: ``on_group_idle``). No waves.

Same-timestamp ordering is the reference loop's (simcore/stepping.py): arrivals stamped t join the
batch planned at t.
"""

from __future__ import annotations

from .clock import LATE
from .invariants import check_replica


class LockstepGroup:
    """Ranks (``SteppingReplica``, driven) stepped together, priced by ``cost.step_time(shapes)``."""

    def __init__(self, env, ranks: list, cost, sync_interval: int = 16):
        self.env, self.ranks, self.cost, self.sync_interval = env, ranks, cost, sync_interval
        self.waves = getattr(cost, "engine", "vllm") == "vllm"  # SGLang: a forward only when a rank has tokens
        self.engines_running = False
        self.step_counter = 0
        self.dummy_steps = 0  # steps where some rank ran a dummy batch
        self._wake = None
        for r in ranks:
            r.group = self
            if not self.waves and hasattr(r.policy, "in_lockstep"):
                r.policy.in_lockstep = True  # its on_idle comes from here (on_group_idle)
        self.process = env.process(self.run())

    def wake(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _idle(self) -> bool:
        return not self.engines_running and not any(r.outstanding for r in self.ranks)

    def run(self):
        env, ranks = self.env, self.ranks
        while True:
            if self._idle():  # the wave is over and no request is here: held finished leave
                if any(r.state.finished for r in ranks) and ranks[0].open_loop:
                    yield env.at(env.now, LATE)  # an arrival stamped now still finds them held
                if self._idle():
                    for r in ranks:
                        r.state.release_finished()
                    self._wake = env.event()
                    yield self._wake
            yield env.at(env.now, LATE)  # behind every arrival stamped now (ORDERING)
            self.engines_running = True
            plans, shapes, raw = [], [], []
            for r in ranks:
                s = r.state
                s.waiting.extend(r.inbox)
                r.inbox.clear()
                plan = None
                if r.outstanding or s.finished:  # scheduler.has_requests()
                    plan = r.policy.schedule(s)
                    if s.looked_up:
                        s.settle_lookups()
                    if r.checking:
                        check_replica(r, plan)
                raw.append(plan)
                run = plan is not None and bool(plan.items)
                plans.append(plan if run else None)
                shapes.append(
                    ([q for _, q in plan.items], [x.num_computed_tokens for x, _ in plan.items]) if run else None
                )
            if not self.waves and not any(plans):  # SGLang: every rank's count is 0, no forward
                self.engines_running = False
                for r in ranks:  # no idle batch: each rank's loop reaches Scheduler.on_idle
                    on_idle = getattr(r.policy, "on_group_idle", None)
                    if on_idle is not None:
                        on_idle(r.state)
                if not any(p is not None and (p.preempted or p.released) for p in raw):
                    self._wake = env.event()
                    yield self._wake
                continue
            if None in shapes:
                self.dummy_steps += 1
            start = env.now
            end = start + self.cost.step_time(shapes)
            yield env.at(end)
            for r, plan in zip(ranks, plans):
                if plan is not None:
                    r.apply(plan, start, end)
            if self.waves:
                self.after_step(any(r.state.waiting or r.state.running or r.state.finished for r in ranks))

    def after_step(self, unfinished: bool) -> None:
        """``_has_global_unfinished_reqs`` and the wave's end: ``unfinished`` is the all-reduced
        "some rank has a request waiting or running" (read only on the steps that sync)."""
        self.step_counter += 1
        if self.step_counter == 1 or self.step_counter % self.sync_interval == 0:
            self.engines_running = unfinished
            if not unfinished:
                self.step_counter = 0  # the wave is complete
