"""SGLang's scheduler (python/sglang/srt/managers/scheduler.py, schedule_policy.py), seeds 000 and 001.

Each step picks a batch kind. Prefill first: if PrefillAdder can form a prefill batch it runs,
alone, and the decoders wait (unless enable_mixed_chunk folds them in as one-token extends).
PrefillAdder has two budgets, rem_input_tokens (max_prefill_tokens) and rem_chunk_tokens
(chunked_prefill_size), both reduced by the mixed decode tokens, plus rem_total_tokens (free
KV minus a reserve of new_token_ratio × the running requests' remaining outputs). Exactly one
request is chunked at a time; it is re-entered first next step (add_chunked_req). Chunk
lengths and prefix lengths are truncated to page_size multiples. A decode step that finds too
little free KV retracts requests (fewest outputs first, then longest prompt) to the back of the
waiting queue until the next decode fits (ScheduleBatch.retract_decode, check_decode_mem).
PrefillAdder itself is policies/sglang_prefill.py; with the radix cache on, the tree
(simcore/radix_cache.py) is driven as SGLang drives it by policies/sglang_radix.py. The server
args and their defaults are policies/sglang_config.py; the fast-forward hooks,
policies/sglang_lookahead.py.
"""

from __future__ import annotations

from .base import Plan, SchedulerState
from .sglang_config import SGLangConfig
from .sglang_decode import DecodeMemory
from .sglang_hicache import HiCacheDriving
from .sglang_lookahead import SGLangLookahead
from .sglang_overlap import OverlapLag
from .sglang_prefill import PrefillAdder, reject_reason
from .sglang_radix import RadixDriving, evict_for
from .sglang_spec import SpecDriving


class SGLangScheduler(SpecDriving, DecodeMemory, HiCacheDriving, OverlapLag, RadixDriving, SGLangLookahead):
    """SGLang's Scheduler, its event loop's scheduling half. The fast-forward hooks are
    SGLangLookahead's (policies/sglang_lookahead.py); the radix cache's driving is RadixDriving's
    (policies/sglang_radix.py); the overlap scheduler's lag, OverlapLag's (policies/sglang_overlap.py);
    EAGLE spec decoding, SpecDriving's (policies/sglang_spec.py); HiCache's host tier, HiCacheDriving's
    (policies/sglang_hicache.py); the decode memory check and retraction, DecodeMemory's (sglang_decode.py)."""

    def __init__(self, cfg: SGLangConfig):
        self.cfg = cfg
        self.chunked_req = None
        self.init_ratio, self.min_ratio, self.ratio_decay = cfg.ratios
        self.new_token_ratio = self.init_ratio
        self.batch_is_full = False
        self._extends = 0
        self._replaced = False  # the last prefill batch replaced the running batch (see schedule)
        self.in_lockstep = False  # a DP-attention rank: on_idle comes from its group (on_group_idle)
        self._init_radix()
        self._init_overlap()
        self._init_spec()

    def _decoding(self, s: SchedulerState) -> list:
        """The running decodes outside the cohort (the chunked request is running but not decoding),
        and the spec riders (policies/sglang_spec.py, split_riders)."""
        running = [r for r in s.running if r is not self.chunked_req]
        return sorted(running + self._riders, key=_seq) if self._riders else running

    def _with_decodes(self, s: SchedulerState, plan: Plan, decoding: list) -> Plan:
        """Every decode, one token each, when all of them get their KV page (check_decode_mem), else
        none: a mixed step neither retracts nor splits the decodes (_get_new_batch_prefill_raw)."""
        if not self._decode_fits(s, decoding):
            return plan
        if self.spec is not None:  # eagle_prepare_for_decode: a verify (mixed: one token) each
            return self.spec_decodes(s, plan, decoding)
        evict_for(s.pool, (len(decoding) + s.num_in_cohort) * self.cfg.page_size)  # prepare_for_decode
        had = s.num_in_cohort
        plan.cohort = s.cohort_rides(_one, 1 << 62, decoding)
        if (
            had and not plan.cohort
        ):  # dissolved into the running queue: decode it in queue order, but not this step's extends
            extends = {id(r) for r, _ in plan.items}
            decoding = [r for r in s.running if r is not self.chunked_req and id(r) not in extends]
        for r in decoding:
            ok = s.pool.grow(r, r.num_computed_tokens + 1)
            assert ok, "a decode's page was counted free"
            plan.items.append((r, 1))
        return plan

    def schedule(self, s: SchedulerState) -> Plan:
        if self.overlapped:  # event_loop_overlap: see policies/sglang_overlap.py
            finishing = self.split_riders(self._lag_begin(s))  # spec: some ride one more verify
            return self._lag_end(s, self._schedule(s, finishing))
        if self._cache is not None:
            self._settle(s)
        return self._remember(self._schedule(s, []))

    def _schedule(self, s: SchedulerState, finishing: list) -> Plan:
        """Scheduler.get_next_batch_to_run. `finishing`: the requests finishing in flight under the
        overlap scheduler, still in SGLang's running batch but decoded no more."""
        if self._replaced:
            self.batch_is_full = False
            self._replaced = False
        decoding = self._decoding(s)
        batch = sorted(decoding + finishing, key=_seq) if finishing else decoding  # running_batch.reqs
        had_running = bool(batch) or bool(s.num_in_cohort)
        plan = self._prefill(s, batch)
        self._extends = len(plan.items)  # the plan's first items are extends (prefill), the rest decodes
        if plan:
            # get_next_batch_to_run: the prefill batch becomes the running batch (a fresh
            # batch_is_full) when none ran beside it or a mixed step took the decodes along; a
            # non-final chunk leaving it shrinks it: batch_is_full is reset either way.
            self._replaced = not had_running or self.chunked_req is not None
            if self.cfg.is_mixed_chunk and had_running:
                n = len(plan.items)
                if s.num_in_cohort and any(r is not self.chunked_req for r, _ in plan.items):
                    s.dissolve_cohort()  # its members go behind this step's extends (_extends_first)
                    ids = {id(r) for r, _ in plan.items}
                    decoding = [r for r in self._decoding(s) if id(r) not in ids]
                if decoding or s.num_in_cohort:
                    plan = self._with_decodes(s, plan, decoding)
                if len(plan.items) > n or plan.cohort > 0:
                    self._replaced = True
                    self._extends_first(s, plan, n)
            return plan
        if not self.in_lockstep:
            self.on_group_idle(s)  # Scheduler.on_idle: this loop reaches it with nothing to run
        return self._decode(s, decoding, finishing)

    def _extends_first(self, s: SchedulerState, plan: Plan, n: int) -> None:
        """A mixed step's batch becomes the running batch (get_next_batch_to_run: the running batch
        mix_with_running emptied is replaced by the filtered last batch), its extends ahead of the
        decodes it carried (ScheduleBatch.mix_with_running: merge_batch appends the running rows);
        the chunked request waits outside. Their queue stamps are permuted into that order."""
        extends = [r for r, _ in plan.items[:n] if r is not self.chunked_req]
        if not extends:
            return
        assert not s.num_in_cohort, "a mixed step reorders the running queue: the cohort is dissolved first"
        ids = {id(r) for r in extends}
        order = extends + [r for r in s.running if id(r) not in ids and r is not self.chunked_req]
        for r, seq in zip(order, sorted(r.seq for r in order)):
            r.seq = seq
        s.running.sort(key=_seq)

    def on_group_idle(self, s: SchedulerState) -> None:
        """Scheduler.on_idle: an empty scheduler's new-token ratio goes back to its initial value. A
        DP-attention rank's comes from simcore/data_parallel.py when no rank has tokens: while any
        has, prepare_mlp_sync_batch_raw gives an empty rank an idle batch, so it waits for none."""
        if not s.num_running and not s.waiting:
            self.new_token_ratio = self.init_ratio

    def _prefill(self, s: SchedulerState, decoding: list) -> Plan:
        """Scheduler._get_new_batch_prefill_raw."""
        if not decoding and not s.num_in_cohort:
            self.batch_is_full = False
        if (self.batch_is_full or not s.waiting) and self.chunked_req is None:
            return Plan()
        allocatable = self.cfg.max_running_requests - len(decoding) - s.num_in_cohort - self._rows_held(s)
        if allocatable <= 0 and self.chunked_req is None:
            self.batch_is_full = True
            return Plan()
        self._refresh_waiting(s)
        adder = PrefillAdder(self.cfg, s, decoding, self.new_token_ratio)
        resumed = self.chunked_req
        if resumed is not None and not adder.add_chunked(resumed):
            self.chunked_req = None
        for req in s.waiting:
            if adder.budget_state() == "other":
                break
            if len(adder.items) >= allocatable:
                self.batch_is_full = True
                break
            s.lookup(req)
            res = adder.add_one(req) if self._host_fits(adder, req) else "no_token"
            if adder.items and adder.items[-1][0] is req:
                self._load_back(s.pool, req)
            if res != "continue":
                if not adder.items or adder.items[-1][0] is not req:
                    s.unlookup(req)  # not added: its prefix is not pinned (inc_lock_ref is on add only)
                if res == "no_token":
                    self.batch_is_full = bool(adder.items) or bool(decoding) or bool(s.num_in_cohort)
                break
        plan = Plan()
        if adder.items:  # ScheduleBatch.prepare_for_extend: evict for the extend, a page a request when paged
            page = self.cfg.page_size
            evict_for(s.pool, sum(n for _, n in adder.items) + (len(adder.items) * page if page > 1 else 0))
        for req, n in adder.items:
            ok = s.pool.grow(req, req.num_computed_tokens + n)
            assert ok, "admission let through more KV than the pool holds"
            if req is not resumed:
                s.waiting.remove(req)
                s.admit(req)
            plan.items.append((req, n))
        if adder.new_chunked is not None:
            self.chunked_req = adder.new_chunked
        if self.chunked_req is not None and resumed is None and adder.new_chunked is None:
            self.chunked_req = None
        return plan

    def _rows_held(self, s: SchedulerState) -> int:
        """req_to_token rows held outside the running batch (a PD prefill server's sending requests)."""
        return 0

    def _decode(self, s: SchedulerState, decoding: list, finishing: list) -> Plan:
        """Scheduler.update_running_batch: retract when the next decode does not fit, else decay the
        new-token ratio; nothing when it does not fit and a request finishes in flight (overlap)."""
        plan = Plan()
        if not decoding and not s.num_in_cohort:
            return plan
        fits = self._decode_fits(s, decoding)
        if not fits and finishing:
            self.batch_is_full = False
            return plan
        if not fits:
            s.dissolve_cohort()
            decoding = [r for r in self._decoding(s) if r.finish_s is None]
            self._retract(s, decoding, plan, self._riders)
            decoding = sorted(decoding + self._riders, key=_seq) if self._riders else decoding
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.min_ratio)
        return self._with_decodes(s, plan, decoding)

    def reject_reason(self, req, pool) -> str | None:
        return reject_reason(self.cfg, req, pool)

    def on_finish(self) -> None:
        if not self.overlapped:  # else when the finish is processed (OverlapLag._full_reset_due)
            self.batch_is_full = False

    def check(self, plan, s) -> None:
        """Extends and decodes are told apart by where the plan put them, not by request state: a
        retracted request's last re-prefill chunk can be a single token."""
        extends, decodes = plan.items[: self._extends], plan.items[self._extends :]
        width = self.spec.num_draft_tokens if self.spec is not None and not extends else 1
        assert all(n == width and (r.remaining_tokens == 1 or r.finish_s) for r, n in decodes), "a decode's width"
        chunk = self.cfg.chunk
        if chunk is not None and extends:
            assert sum(n for _, n in extends) <= max(self.cfg.max_prefill_tokens, chunk) + max(n for _, n in extends)
            assert sum(1 for r, n in extends if n < r.remaining_tokens) <= 1, "more than one chunked request"
        if extends and not self.cfg.is_mixed_chunk:
            assert not decodes and not plan.cohort, "decodes ran in a prefill batch without mixed chunk"

    @property
    def overlaps_host(self) -> bool:
        """True when SGLang's overlap scheduler runs (scheduler.py, event_loop_overlap): the host
        work of step n+1 (scheduling it, preparing its batch) is done while step n runs on the
        GPU, and step n's results are processed after step n+1 is launched. A cost model may then
        hide a step's host time behind the previous step's GPU time. The scheduling decisions
        themselves follow the loop that runs (policies/sglang_overlap.py)."""
        return not self.cfg.disable_overlap_schedule

    @property
    def prefix_caching(self) -> bool:
        return not self.cfg.disable_radix_cache


def _one(req) -> int:
    return 1


def _seq(req) -> int:
    return req.seq
