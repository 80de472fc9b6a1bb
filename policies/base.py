"""What every policy receives and returns. A policy decides; the replica does (and keeps time)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from simcore.cohort import DecodeCohort
from simcore.kv import BlockPool
from simcore.request import Request


@dataclass
class SchedulerState:
    """The queues and the KV pool of one replica. Policies move requests between the queues and
    hold or release KV blocks, as the engines' schedulers do; they never advance tokens or time."""

    pool: BlockPool
    waiting: deque = field(default_factory=deque)  # arrived, holding no KV
    running: list = field(default_factory=list)  # holding KV: prefilling or decoding (outside the cohort)
    cohort: DecodeCohort | None = None  # running decodes advanced as a group (policies with lazy_decodes)
    admitted: int = 0
    looked_up: list = field(default_factory=list)
    hold_finished: bool = False  # vLLM async scheduling: see ``retire``
    finished: list = field(default_factory=list)  # sampled their last token in the step just applied; still held
    connector: Any = None  # vLLM's KV connector state under PD disaggregation (policies/vllm_pd.py), else None

    @property
    def num_running(self) -> int:
        return len(self.running) + (len(self.cohort.members) if self.cohort is not None else 0)

    @property
    def num_in_cohort(self) -> int:
        return len(self.cohort.members) if self.cohort is not None else 0

    def admit(self, req: Request) -> None:
        """To the end of the running queue; the stamp keeps queue order across the cohort."""
        self.admitted += 1
        req.seq = self.admitted
        self.running.append(req)

    def dissolve_cohort(self) -> None:
        """Every cohort member back into the running queue, in queue order, with its exact state."""
        c = self.cohort
        if c is None or not c.members:
            return
        members = c.dissolve(lambda r: self.pool.blocks_held(r, r.num_computed_tokens))
        self.running[:] = sorted(self.running + members, key=lambda r: r.seq)

    def cohort_rides(self, wants, budget: int, others=None) -> int:
        """Cohort members in the next step, one token each: all of them when every other running
        request (`others`, default all) gets all it `wants(req)` this step and the blocks are free
        without evicting (then queue order cannot matter; the members' blocks are taken here), else
        none and the cohort dissolves back into the running queue for the caller to walk in order.
        The budget may run out at requests queued after every member (a partial prefill at the
        queue's tail): they take what is left, min(wants, left), as an in-order walk gives them."""
        c, pool = self.cohort, self.pool
        if c is None or not c.members:
            return 0
        n = len(c.members)
        cohort_blocks = c.new_blocks(c.tick, 1)
        tokens, blocks, left = n, cohort_blocks, budget - n
        plain, bs = pool.cache is None, pool.block_size
        for req in self.running if others is None else others:
            n = wants(req)
            if n > left:
                if left < 0 or req.seq < c.top_seq:
                    tokens = budget + 1
                    break
                n = left
            left -= n
            tokens += n
            need = (
                -(-(req.num_computed_tokens + n) // bs) - req.num_blocks
                if plain  # blocks_missing, no cache
                else pool.blocks_missing(req, req.num_computed_tokens + n)
            )
            if need > 0:
                blocks += need
        if tokens > budget or blocks > pool.free:
            self.dissolve_cohort()
            return 0
        pool.used += cohort_blocks
        return len(c.members)

    def head_blocked(self, new_tokens) -> bool:
        """Whether the queue head, looked up as the next schedule() would, lacks the KV blocks for
        its next `new_tokens(head)` tokens (the lookup is undone)."""
        head = self.waiting[0]
        self.lookup(head)
        n = new_tokens(head)
        blocked = n > 0 and self.pool.blocks_missing(head, head.num_computed_tokens + n) > self.pool.available
        self.settle_lookups()
        return blocked

    def all_running(self) -> list:
        return self.running + (list(self.cohort.members) if self.cohort is not None else [])

    def lookup(self, req: Request) -> None:
        """Prefix-cache lookup for a request about to be admitted with nothing computed."""
        cache = self.pool.cache
        if cache is not None and req.num_computed_tokens == 0 and req.cache_path is None:
            req.num_computed_tokens = cache.match(req)
            self.looked_up.append(req)

    def unlookup(self, req: Request) -> None:
        """Undo ``lookup`` for a request that will not be admitted this step."""
        if req.cache_path is not None:
            self.pool.cache.unmatch(req)
            req.num_computed_tokens = 0

    def settle_lookups(self) -> None:
        """After a plan: an admitted request's prefix counts as used; a looked-up request that got no
        blocks stays waiting without pinning its prefix, as in both engines (vLLM pins in
        allocate_slots, SGLang in inc_lock_ref, on admission only): a pinned prefix that can never
        be evicted could starve a request that needs those blocks."""
        for req in self.looked_up:
            if req.cache_path is None:
                continue
            if req in self.running:
                self.pool.cache.touch(req)
            else:
                self.pool.cache.unmatch(req)
                req.num_computed_tokens = 0
        self.looked_up.clear()

    def publish(self, req: Request, tokens: int) -> None:
        """vLLM's prefix cache takes a request's full blocks when they are scheduled (see
        BlockHashCache.publish_scheduled); its private block count shrinks by what the cache took."""
        cache = self.pool.cache
        if cache is not None:
            req.num_blocks -= cache.publish_scheduled(req, tokens)

    def retire(self, req: Request, last_step: bool = True) -> None:
        """A request sampled its last token. Its KV goes now, or, with ``hold_finished`` and when
        that token came from the step just applied, after the next schedule(): under vLLM's
        async scheduling schedule(n+1) runs before the output of step n is processed
        (vllm/v1/engine/core.py, EngineCore.step_with_batch_queue), so a request that finished
        in step n still sits in Scheduler.running, holding its max_num_seqs slot and its blocks,
        and Scheduler.schedule skips it ("Avoid scheduling an extra step when we are sure that
        the previous step has reached request.max_tokens") but may pick it as the preemption
        victim; Scheduler.update_from_output frees it afterwards."""
        if self.hold_finished and last_step:
            self.finished.append(req)
        else:
            self.pool.release(req)

    def release_finished(self) -> int:
        """The held finished requests leave (after the schedule() that still saw them)."""
        n = len(self.finished)
        if not n:
            return 0
        for req in self.finished:
            if req.remote_decode:  # PD prefill side: held on until finished_sending (policies/vllm_pd.py)
                self.connector.sending.append(req)
            else:
                self.pool.release(req)
        self.finished.clear()
        return n

    def grow_or_preempt(self, req: Request, tokens: int, preempted: list) -> bool:
        """vLLM's recompute preemption (Scheduler.schedule, the running loop): until `req` can
        hold `tokens` positions, preempt the last request of Scheduler.running to the front of
        the queue (appended to `preempted`); a held finished request (see ``retire``) counts in
        that order, and preempting it only frees its blocks. False when `req` itself was
        preempted. Under PD with async scheduling a victim still in the step in flight cannot be
        preempted (policies/vllm_pd.py, ``in_flight``): then False, nothing preempted."""
        c = self.connector
        while not self.pool.grow(req, tokens):
            fin = self.finished
            if fin and (not self.running or max(r.seq for r in fin) > self.running[-1].seq):
                victim = max(fin, key=lambda r: r.seq)
                if c is not None and victim in c.in_flight:
                    return False
                fin.remove(victim)
                self.pool.release(victim)
                victim.num_preemptions += 1
                preempted.append(victim)
                continue
            if c is not None and self.running[-1] in c.in_flight:
                return False
            victim = self.running.pop()
            self.preempt(victim, front=True)
            preempted.append(victim)
            if victim is req:
                return False
        return True

    def allocate_slots(self, req: Request, num_new_tokens: int, preempted: list, lookahead: int = 0) -> bool:
        """vLLM's KVCacheManager.allocate_slots for a running request, in Scheduler.schedule's
        preemption loop (``grow_or_preempt``): blocks for its next `num_new_tokens` positions, the
        last running request preempted until they are free; then the prefix cache takes its full
        blocks (``publish``). False when `req` itself was preempted. `lookahead`: slots held past the
        new tokens (``num_lookahead_tokens``, speculative decoding's drafter), not published."""
        pool = self.pool
        tokens = req.num_computed_tokens + num_new_tokens
        if pool.cache is None:  # pool.grow without a cache, inline (the common case: the blocks are free)
            need = -(-(tokens + lookahead) // pool.block_size) - req.num_blocks
            if need <= 0:
                return True
            if need <= pool.total - pool.used:
                pool.used += need
                req.num_blocks += need
                return True
        if not self.grow_or_preempt(req, tokens + lookahead, preempted):
            return False
        self.publish(req, tokens)
        return True

    def allocate_new(self, req: Request, num_new_tokens: int, full_sequence_must_fit: bool, lookahead: int = 0) -> bool:
        """vLLM's KVCacheManager.allocate_slots for a waiting request (looked up): blocks for its next
        `num_new_tokens` positions and, with `full_sequence_must_fit` (scheduler_reserve_full_isl),
        free blocks for all its num_tokens (its prefix-cache hit counted as held, hit blocks nobody
        else uses as taken, evictable cached blocks as free); then the prefix cache takes its full
        blocks. False, holding nothing more, when they are not free."""
        pool = self.pool
        tokens = req.num_computed_tokens + num_new_tokens
        if pool.cache is None and not req.num_blocks:  # the same without a cache to consult, inline
            free = pool.total - pool.used
            need = -(-(tokens + lookahead) // pool.block_size)
            if (
                full_sequence_must_fit and -(-(req.prompt_len + req.num_output_tokens) // pool.block_size) > free
            ) or need > free:
                return False
            pool.used += need
            req.num_blocks = need
            return True
        if (full_sequence_must_fit and pool.blocks_missing(req, req.num_tokens) > pool.available) or not pool.grow(
            req, tokens + lookahead
        ):
            return False
        self.publish(req, tokens)
        return True

    def preempt(self, req: Request, *, front: bool) -> None:
        """Recompute-style preemption: free the KV, keep the tokens, requeue."""
        self.pool.release(req)
        req.reset_for_recompute()
        (self.waiting.appendleft if front else self.waiting.append)(req)


class Plan:
    """The next forward pass: (request, new tokens) in batch order, and who was preempted for it.
    The rarer parts (drafts, PD loads, sampling items) are class defaults an instance sets when it
    has them: a plan is made every step, and most have none."""

    spec: dict | None = None  # speculative decoding: request -> drafts scheduled (< 0: placeholders, never accepted)
    loads: list | None = None  # PD: requests whose KV load this schedule() started (policies/vllm_pd.py)
    sampling: list | None = None  # async scheduling + drafts: the items that sample (vLLM's not is_prefill_chunk)
    landed: list | None = None  # SGLang PD decode: took in by the prebuilt batch, or finished late (sglang_pd.py)

    def __init__(self, items: list | None = None, preempted: list | None = None) -> None:
        self.items: list = [] if items is None else items
        self.preempted: list = [] if preempted is None else preempted
        self.cohort = 0  # decode cohort members riding along, one token each (not in items)
        self.released = 0  # held finished requests freed by this schedule() (see SchedulerState.retire)

    def __repr__(self) -> str:
        return (
            f"Plan(items={self.items!r}, preempted={self.preempted!r}, cohort={self.cohort}, released={self.released})"
        )

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items) + self.cohort

    def __bool__(self) -> bool:
        return bool(self.items) or self.cohort > 0


class PolicyHooks:
    """What a policy inherits that has no lookahead: every fast-forward hook declines (the replica
    then steps, one schedule() a step) or has nothing to do. A policy that can tell its next steps
    overrides them in a lookahead module of its own (policies/vllm_lookahead.py,
    sglang_lookahead.py)."""

    cohort_max_outputs_left = 1 << 62  # a decode joins the cohort only with at most this many outputs left
    kv_observed = False  # set by Simulation when the router reads replicas' KV usage mid-run (Replica.kv_usage)
    num_spec_tokens = 0  # drafts the drafter proposes after a request's sampling step (0: no spec decoding)

    @property
    def needs_stepping(self) -> bool:
        """True: Simulation runs the reference loop (simcore/stepping.py), no fast path."""
        return False

    def step_cost(self, cm):
        """The cost model as this policy's steps cost (speculative decoding adds its drafter)."""
        return cm

    def accept(self, req, drafts: int) -> int:
        """Drafts accepted of the `drafts` a step verified for `req` (speculative decoding only)."""
        return 0

    def can_fast_forward(self, s: SchedulerState) -> bool:
        """FAST-FORWARD HOOK (simcore/fastforward/runs.py, chunked.py): whether the steps after the plan just
        made repeat it (its requests, one token a decode) while nothing arrives, finishes or runs
        out of KV blocks; then the replica may take them in one event. No: the replica steps."""
        return False

    def on_fast_forward(self, steps: int) -> None:
        pass

    def prefill_chunks(self, s: SchedulerState, plan: Plan, leaves=()) -> tuple[list[int], int]:
        """FAST-FORWARD HOOK (simcore/fastforward/chunked.py). The plan's last item P is a partial prefill and
        every other item catches up in this step. Returns P's new tokens in each of the steps
        that would follow, up to the one that completes its prompt, as this policy's schedule()
        would plan them while nothing arrives, finishes, is preempted or lacks a KV block (the
        replica checks those), with every other item and the cohort decoding one token a step
        beside P, one decode fewer from each step in `leaves` on (a decode that finished, in
        step order); it may stop early (the replica steps on from there). And how many of those
        steps, from the first, would be planned the same with more requests waiting (they never
        reach the waiting queue), so that a run may go on past an arrival. ([], 0) when the
        following steps cannot be told in advance: the replica then takes one step. During the
        lead exactly the plan's other items and its cohort riders decode; every other running
        request sits it out (the hook refuses a plan where that is not what schedule() does)."""
        return [], 0

    def arrival_chunks(
        self, s: SchedulerState, req, decodes: int, seated: int, leaves=(), extra: int = 0, queued: bool = False
    ) -> tuple[list[int], int]:
        """FAST-FORWARD HOOK (simcore/fastforward/arrival_folds.py). `req` has just arrived and is the only
        request waiting, at a step where `decodes` running requests all decode one token (in that
        step one of them takes `extra` more: a prompt's last chunk) and
        `seated` requests hold a seat (the decodes and finished requests still held). Returns the
        new tokens schedule() gives req in that step and in each that follows until its prompt
        completes, one decode fewer from each step in `leaves` on (steps after the first, in
        order), when its blocks are known to be free (the replica checks a bound that covers the
        engine's own test) and nothing else arrives; and how many of the chunks after the first
        would be planned the same with more requests waiting. With `queued`, req heads a queue
        of several: ([], 0) unless its first chunk leaves nothing for the next. ([], 0) when req
        would not be admitted then, or that cannot be told: the run ends before that step."""
        return [], 0

    def on_lead(self, s: SchedulerState, req, chunks: list) -> None:
        """FAST-FORWARD HOOK: the replica took a lead (``prefill_chunks``) of `req` through its
        `chunks` (the first was planned by schedule(), the others were not), and num_computed_tokens
        is now as stepping would leave it. Whatever schedule() would have done with each chunk
        beyond the first (a prefix cache taking its blocks) is for the hook to do."""

    def on_finish(self) -> None:
        pass

    def run_headroom(self, s: SchedulerState) -> int:
        """FAST-FORWARD HOOK (simcore/fastforward/runs.py, chunked.py): pool blocks a run must leave free before
        each of its steps, because the engine would act below that (SGLang evicts from its tree)."""
        return 0

    def reject_reason(self, req, pool) -> str | None:
        """Why this engine would refuse `req` outright, beyond max_model_len and the pool's size."""
        return None
